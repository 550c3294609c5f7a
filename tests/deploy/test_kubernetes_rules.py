"""Kubernetes alerts and fleet recording rules (numa-exporter.kubernetes.yml).

Same checks as test_prometheus_rules.py for the main files: promtool check and unit tests,
every alert with a firing and a silent case, every recorded series tested, and the unit
tests failing when an alert can never fire or fires at once. Metric names are checked
against the exporter's specs plus the Kubernetes families declared in
``numa_exporter.collectors.kubernetes``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from numa_exporter.collectors.kubernetes import SPECS as KUBERNETES_SPECS
from numa_exporter.model.kubernetes import REASONS

from .helpers import (
    DEPLOY,
    KUBERNETES_RULES,
    REPO,
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

TESTS = DEPLOY / "prometheus" / "tests"
UNIT_TEST = TESTS / "kubernetes.test.yml"
ALERTS = {"NumaKubeletMemoryNodesMismatch", "NumaKubeletCpuNodesMismatch",
          "NumaKubeletDeviceNodeMismatch", "NumaKubeletDraDeviceNodeMismatch"}


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules(KUBERNETES_RULES) if "alert" in r}


def _known(name: str) -> bool:
    recorded = {r["record"] for r in rules(KUBERNETES_RULES) if "record" in r}
    return (known_series_name(name) or name in recorded
            or name in {s.name for s in KUBERNETES_SPECS})


def test_alerts_exist_with_severity_runbook_and_pod_labels() -> None:
    got = alerts()
    assert set(got) == ALERTS
    reasons = set()
    for name, rule in got.items():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name
        assert "for" in rule, name
        ann = rule["annotations"]
        assert ann["runbook_url"] == f"docs/alerts.md#{name.lower()}"
        for label in ("namespace", "pod", "container"):
            assert f"$labels.{label}" in ann["summary"], (name, label)
        assert "numa-exporter inspect {{ $labels.pid }}" in ann["runbook"], name
        assert "group_left (namespace, pod, container, uid)" in rule["expr"], name
        reasons |= set(re.findall(r'reason="(kubelet_[a-z_]+)"', rule["expr"]))
    assert reasons == set(REASONS)


def test_expressions_use_known_metrics() -> None:
    for rule in rules(KUBERNETES_RULES):
        names = metric_names(rule["expr"])
        assert names, rule
        unknown = sorted(n for n in names if not _known(n))
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"
    assert not _known("numa_process_kubernetes_infos")


def test_promtool_check_and_unit_tests() -> None:
    promtool = require_tool("promtool")
    r = run([promtool, "check", "rules", str(KUBERNETES_RULES)])
    assert r.returncode == 0 and "SUCCESS: 11 rules found" in r.stdout, r.stdout + r.stderr
    r = run([promtool, "test", "rules", str(UNIT_TEST)], timeout=300)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_alert_fires_and_stays_silent_and_every_record_is_tested() -> None:
    seen, tested = alert_cases([UNIT_TEST])
    assert {n: seen.get(n) for n in ALERTS} == {n: {"fires", "silent"} for n in ALERTS}
    recorded = {r["record"] for r in rules(KUBERNETES_RULES) if "record" in r}
    assert recorded and recorded <= tested, sorted(recorded - tested)


@pytest.mark.parametrize("change", ["never", "no-for"])
@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_unit_tests_fail_when_an_alert_is_broken(tmp_path: Path, alert: str, change: str) -> None:
    promtool = require_tool("promtool")
    doc = break_alert(load(KUBERNETES_RULES), alert, change)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / KUBERNETES_RULES.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / UNIT_TEST.name).write_text(UNIT_TEST.read_text())
    r = run([promtool, "test", "rules", str(tmp_path / "tests" / UNIT_TEST.name)], timeout=300)
    assert r.returncode != 0, f"promtool tests still pass with {alert} changed ({change})"
    assert alert in r.stdout + r.stderr


def test_alerts_are_documented() -> None:
    text = (REPO / "docs" / "alerts.md").read_text()
    for name in ALERTS:
        assert f"| [{name}](#{name.lower()}) |" in text, name
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "**Means:**" in section and "**Do:**" in section, name


def test_the_operator_rule_carries_the_kubernetes_groups() -> None:
    doc = yaml.safe_load((DEPLOY / "kubernetes" / "prometheusrule.yaml").read_text())
    names = {g["name"] for g in doc["spec"]["groups"]}
    assert {"numa-exporter.kubernetes", "numa-exporter.kubernetes.recording"} <= names


def test_documented_kube_state_metrics_join_names_the_pod(tmp_path: Path) -> None:
    """docs/deploy.md's join, on series as numa-exporter and kube-state-metrics write them:
    names come from kube_pod_info even where the node's files gave none."""
    promtool = require_tool("promtool")
    text = (REPO / "docs" / "deploy.md").read_text()
    block = text.split("<!-- ksm-join:begin -->", 1)[1].split("<!-- ksm-join:end -->", 1)[0]
    query = block.split("```promql\n", 1)[1].split("```", 1)[0].strip()
    uid = "8f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6a7b"
    cid = "containerd://" + "c0a1" * 16
    exporter = 'instance="node-a:10061",job="numa-exporter",pid="100"'
    ksm = 'instance="10.0.0.9:8080",job="kube-state-metrics"'
    series = [
        (f"numa_process_remote_memory_ratio{{{exporter}}}", "0.25x5"),
        (f"numa_process_remote_memory_ratio{{{exporter.replace('100', '7')}}}", "0.9x5"),
        (f'numa_process_kubernetes_info{{{exporter},namespace="",pod="",container="app",'
         f'uid="{uid}",container_id="{cid}"}}', "1x5"),
        (f'kube_pod_info{{{ksm},namespace="ml",pod="trainer-0",uid="{uid}",node="node-a",'
         'created_by_kind="StatefulSet",created_by_name="trainer",host_ip="10.0.0.1",'
         'pod_ip="10.1.0.5",priority_class="",host_network="false"}', "1x5"),
        (f'kube_pod_info{{{ksm},namespace="web",pod="front-1",uid="2d1e3f4a-5b6c-4d7e-8f90-'
         'a1b2c3d4e5f6",node="node-b",created_by_kind="ReplicaSet",created_by_name="front",'
         'host_ip="10.0.0.2",pod_ip="10.1.1.7",priority_class="",host_network="false"}',
         "1x5"),
    ]
    want = {"instance": "node-a:10061", "job": "numa-exporter", "pid": "100", "uid": uid,
            "container": "app", "container_id": cid, "namespace": "ml", "pod": "trainer-0",
            "node": "node-a", "created_by_kind": "StatefulSet", "created_by_name": "trainer"}
    labels = "{" + ",".join(f'{k}="{v}"' for k, v in want.items()) + "}"
    doc = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [{"expr": query, "eval_time": "2m",
                              "exp_samples": [{"labels": labels, "value": 0.25}]}]}]}
    path = tmp_path / "ksm.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = run([promtool, "test", "rules", str(path)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
