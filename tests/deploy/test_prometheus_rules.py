"""Alerting and recording rules: promtool check/test, and that the tests can fail.

promtool's unit tests in deploy/prometheus/tests/ give every alert a firing case and series
that must not fire; exp_alerts lists every alert expected, so an extra one fails the test.
The mutation tests below check that claim for each alert: the suite must fail when the alert
can never fire, and when it fires at once (its ``for:`` removed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import (
    DEPLOY,
    RECORDING,
    REPO,
    RULES,
    alert_cases,
    break_alert,
    known_series_name,
    metric_names,
    require_tool,
    rules,
    run,
)
from .helpers import load_yaml as load

pytestmark = pytest.mark.prometheus

PROM = DEPLOY / "prometheus"
UNIT_TESTS = sorted((PROM / "tests").glob("*.test.yml"))

EXPECTED_ALERTS = {
    "NumaProcessRemoteMemoryHigh", "NumaProcessPlacementDrift", "NumaProcessPageMigrationHigh",
    "NumaHostPageMigrationHigh", "NumaBalancingWithStrictBinding", "NumaAcceleratorNodeMismatch",
    "NumaExporterDown", "NumaExporterScanStale", "NumaExporterScanSlow",
    "NumaExporterParseErrors", "NumaExporterPermissionDenied", "NumaProcessMemoryOffPolicyNodes",
    "NumaProcessScanStale", "NumaExporterWebRefusing", "NumaProcessRemoteAccessesWhilePlacedLocal",
    "NumaProcessHotMemoryRemote", "NumaCgroupHotMemoryRemote",
    "NumaProcessThreadsOutsideBinding",
}
def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules(RULES) if "alert" in r}


def test_every_documented_alert_exists_with_severity_and_runbook() -> None:
    got = alerts()
    assert set(got) == EXPECTED_ALERTS
    for name, rule in got.items():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name
        ann = rule["annotations"]
        assert {"summary", "description", "runbook", "runbook_url"} <= set(ann), name
        assert ann["runbook_url"] == f"docs/alerts.md#{name.lower()}", name
        assert "for" in rule, f"{name} has no for: (it would page on one bad scrape)"


def test_process_alerts_point_to_inspect_and_the_dropin() -> None:
    for name in ("NumaProcessRemoteMemoryHigh", "NumaProcessPlacementDrift",
                 "NumaAcceleratorNodeMismatch", "NumaProcessPageMigrationHigh",
                 "NumaProcessMemoryOffPolicyNodes"):
        runbook = alerts()[name]["annotations"]["runbook"]
        assert "numa-exporter inspect {{ $labels.pid }}" in runbook, name
        assert "deploy/systemd/inference-numa-binding.conf" in runbook, name


def test_rule_expressions_use_only_metrics_from_the_spec() -> None:
    for path in (RULES, RECORDING):
        for rule in rules(path):
            names = metric_names(rule["expr"])
            assert names, rule
            unknown = sorted(n for n in names if not known_series_name(n))
            assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"


def test_metric_name_check_catches_a_misspelt_metric() -> None:
    assert metric_names('rate(numa_proces_pages_migrated_total{pid="1"}[5m]) > 3') == {
        "numa_proces_pages_migrated_total"}
    assert not known_series_name("numa_proces_pages_migrated_total")
    assert known_series_name("numa_vmstat_pgmigrate_success_total")
    assert known_series_name("numa_node_miss_pages_total")


def test_promtool_check_rules_and_config() -> None:
    promtool = require_tool("promtool")
    r = run([promtool, "check", "rules", str(RULES), str(RECORDING)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == 2, r.stdout
    r = run([promtool, "check", "config", str(PROM / "prometheus.yml")])
    assert r.returncode == 0, r.stdout + r.stderr
    # the config's rule_files glob finds both rule files
    assert r.stdout.count("SUCCESS") >= 3, r.stdout


def test_documented_promtool_commands_work_as_written() -> None:
    """docs/deploy.md's promtool commands, run verbatim from the repository root.

    `promtool check rules deploy/prometheus/*.yml` used to catch prometheus.yml and fail.
    """
    require_tool("promtool")
    block = (REPO / "docs" / "deploy.md").read_text().split("\n## Prometheus\n", 1)[1]
    commands = [ln for ln in block.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
                if ln.startswith("promtool ")]
    assert [c.split()[1:3] for c in commands] == [
        ["check", "config"], ["check", "rules"], ["test", "rules"]]
    for cmd in commands:
        r = run(["sh", "-c", cmd], cwd=REPO, timeout=300)
        assert r.returncode == 0, f"{cmd}:\n{r.stdout}{r.stderr}"
    checked = run(["sh", "-c", commands[1]], cwd=REPO).stdout
    assert f"Checking deploy/prometheus/rules/{RULES.name}" in checked, checked
    assert f"Checking deploy/prometheus/rules/{RECORDING.name}" in checked, checked


def test_promtool_check_rules_rejects_a_bad_expression(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(RULES.read_text().replace("> 0.5", "> > 0.5", 1))
    r = run([promtool, "check", "rules", str(bad)])
    assert r.returncode != 0, r.stdout


def test_promtool_unit_tests_pass() -> None:
    promtool = require_tool("promtool")
    assert len(UNIT_TESTS) >= 4
    r = run([promtool, "test", "rules", *map(str, UNIT_TESTS)], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(UNIT_TESTS), r.stdout


def test_every_alert_has_firing_and_silent_cases() -> None:
    """Each alert appears in a unit test at an eval_time with exp_alerts and one without."""
    seen, tested = alert_cases(UNIT_TESTS)
    for name in EXPECTED_ALERTS:
        assert seen.get(name) == {"fires", "silent"}, f"{name}: {seen.get(name)}"
    recorded = {r["record"] for r in rules(RECORDING)}
    assert recorded <= tested, sorted(recorded - tested)


def _mutated_suite(tmp_path: Path, alert: str, change: str) -> Path:
    doc = break_alert(load(RULES), alert, change)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "rules" / RECORDING.name).write_text(RECORDING.read_text())
    for other in sorted(RULES.parent.glob("*.yml")):  # rule files of other unit tests
        if other.name not in (RULES.name, RECORDING.name):
            (tmp_path / "rules" / other.name).write_text(other.read_text())
    tests = tmp_path / "tests"
    tests.mkdir()
    for path in UNIT_TESTS:
        (tests / path.name).write_text(path.read_text())
    return tests


@pytest.mark.parametrize("change", ["never", "no-for"])
@pytest.mark.parametrize("alert", sorted(EXPECTED_ALERTS))
def test_unit_tests_fail_when_an_alert_is_broken(tmp_path: Path, alert: str, change: str) -> None:
    promtool = require_tool("promtool")
    tests = _mutated_suite(tmp_path, alert, change)
    r = run([promtool, "test", "rules", *map(str, sorted(tests.glob("*.test.yml")))], timeout=300)
    assert r.returncode != 0, f"promtool tests still pass with {alert} changed ({change})"
    assert alert in r.stdout + r.stderr
