"""docs/alerts.md and docs/deploy.md stay true to the rules, the flags and the exporter."""

from __future__ import annotations

import re

import pytest

from .helpers import (
    DEPLOY,
    FIXTURE_ROOTS,
    REPO,
    RULES,
    cli_flags,
    exporter_available,
    exporter_command,
    missing,
    pending_flags_not_yet_known,
    rules,
    run,
)

ALERTS_MD = REPO / "docs" / "alerts.md"
DEPLOY_MD = REPO / "docs" / "deploy.md"
OWNED = [ALERTS_MD, DEPLOY_MD, REPO / "Dockerfile", REPO / ".dockerignore",
         *sorted(p for p in DEPLOY.rglob("*") if p.is_file()),
         *sorted(p for p in (REPO / "tests" / "deploy").rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts)]
EXPORTER_FLAG = re.compile(
    r"--(?:no-)?(?:web|path|scan|process|placement|drift|collector|log|config|accelerator|kubelet)\.[a-z.-]+")
# Prometheus's own flags of the same shape that the docs name (the fleet section).
PROMETHEUS_FLAGS = {"--web.enable-remote-write-receiver"}


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    a = heading.strip().lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")


def test_every_alert_has_a_section_and_a_table_row() -> None:
    text = ALERTS_MD.read_text()
    headings = {_anchor(h): h for h in re.findall(r"^## (.+)$", text, flags=re.M)}
    for rule in rules(RULES):
        if "alert" not in rule:
            continue
        name = rule["alert"]
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in headings, f"docs/alerts.md has no section for {name}"
        assert headings[anchor] == name
        assert f"| [{name}](#{anchor}) |" in text, f"{name} missing from the table"
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "**Means:**" in section and "**Do:**" in section, name


def test_links_between_docs_resolve() -> None:
    deploy_anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", DEPLOY_MD.read_text(), re.M)}
    alerts_anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", ALERTS_MD.read_text(), re.M)}
    for doc, own in ((ALERTS_MD, alerts_anchors), (DEPLOY_MD, deploy_anchors)):
        for target in re.findall(r"\]\(([^)]+)\)", doc.read_text()):
            path, _, anchor = target.partition("#")
            if path.startswith("http"):
                continue
            file = (doc.parent / path).resolve() if path else doc
            assert file.exists(), f"{doc.name}: {target}"
            if anchor:
                anchors = {ALERTS_MD: alerts_anchors, DEPLOY_MD: deploy_anchors}.get(file, own)
                assert anchor in anchors, f"{doc.name}: {target}"


def test_documented_exporter_flags_exist() -> None:
    pytest.importorskip("numa_exporter.cli")
    known = cli_flags() | pending_flags_not_yet_known() | PROMETHEUS_FLAGS
    for doc in (ALERTS_MD, DEPLOY_MD, DEPLOY / "systemd" / "numa-exporter.env",
                REPO / "Dockerfile", DEPLOY / "kubernetes" / "daemonset.yaml"):
        flags = set(EXPORTER_FLAG.findall(doc.read_text()))
        unknown = sorted(f for f in flags if f.rstrip(".") not in known)
        assert not unknown, f"{doc.name}: {unknown}"


def test_container_recipe_is_the_same_everywhere() -> None:
    recipe_doc = DEPLOY_MD.read_text()
    recipe_df = (REPO / "Dockerfile").read_text()
    for needed in ("--pid=host", "--cgroupns=host", "-v /proc:/host/proc:ro",
                   "-v /sys:/host/sys:ro",
                   "--cap-add SYS_PTRACE", "--cap-add DAC_READ_SEARCH", "--cap-drop ALL",
                   "--path.procfs=/host/proc --path.sysfs=/host/sys", "--read-only",
                   "--security-opt no-new-privileges"):
        assert needed in recipe_doc, needed
        assert needed in recipe_df, needed


def test_worked_example_matches_inspect_output() -> None:
    """The `numa-exporter inspect 500` lines quoted in alerts.md are what it prints."""
    if not exporter_available():
        missing("the numa-exporter command")
    root = FIXTURE_ROOTS / "inference"
    if not (root / "udev.json").exists():
        missing(f"fixture root {root}")
    r = run([*exporter_command(), "inspect", "500", f"--path.procfs={root / 'proc'}",
             f"--path.sysfs={root / 'sys'}", f"--accelerator.records={root / 'udev.json'}"])
    assert r.returncode == 0, r.stderr
    actual = {line.rstrip() for line in r.stdout.splitlines()}
    block = ALERTS_MD.read_text().split("$ sudo numa-exporter inspect 500\n", 1)[1]
    block = block.split("```", 1)[0]
    quoted = [line.rstrip() for line in block.splitlines() if line.strip()]
    assert len(quoted) >= 10
    stale = [line for line in quoted if line not in actual]
    assert not stale, "docs/alerts.md quotes lines inspect no longer prints:\n" + "\n".join(stale)
    ratio = re.search(r"remote ratio vs accelerator\s+([\d.]+)", r.stdout)
    assert ratio and f"{float(ratio.group(1)):.1%}" in ALERTS_MD.read_text()


def test_no_internal_references() -> None:
    banned = ("DEVELOPERS" + ".md", "tool " + "library", "/work/" + ".library",
              "/work/" + "shared")
    for path in OWNED:
        text = path.read_text(errors="replace")
        for word in banned:
            assert word not in text, f"{path.relative_to(REPO)} mentions {word}"
