"""A real Prometheus scraping real exporters: every dashboard query and rule expression runs.

Three exporters are started (scan interval 1s): on the two_node fixture root, on the
inference fixture root (accelerators from its udev records) and on this machine's /proc.
Prometheus (Debian's binary, own config and storage, loopback ports, scrape and rule
evaluation every 1s) scrapes them and loads both rule files. Then:

* every rule is loaded, evaluated without error, and its expression parses via the API;
* every dashboard query, with the Grafana variables substituted, parses and returns data
  from at least one exporter - except the targets in PARSE_ONLY, whose metrics no exporter
  here can produce (listed with the reason);
* the template variables' label_values queries find the exporters and their processes;
* alerts that the inference fixture's bindings must trigger are pending.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import (
    FIXTURE_ROOTS,
    RECORDING,
    RULES,
    dashboard,
    exporter_available,
    exporter_command,
    free_port,
    http_get,
    missing,
    panel_targets,
    require_tool,
    rules,
    running,
    substitute,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e]

RATE_INTERVAL = "10s"  # what $__rate_interval would be at a 1s scrape interval, with margin

# (panel title, refId) -> why no exporter here has data for it. Parse-only.
PARSE_ONLY = {
    ("Bytes arriving / leaving per node", "A"):
        "numa_process_node_arrived_bytes_total needs resident bytes to move between scans: the "
        "fixture roots are static; this host has data only when a process grows meanwhile",
    ("Bytes arriving / leaving per node", "B"):
        "numa_process_node_departed_bytes_total: as above",
    ("Sampling error of the remote ratio", "A"):
        "numa_process_remote_memory_ratio_stderr > 0: only sampled placement reads have it",
    ("Sampling error of the remote ratio", "B"):
        "numa_process_placement_sampled_pages: only sampled placement reads have it",
}


@dataclass
class Stack:
    prom: str                                   # http://127.0.0.1:port
    instances: dict[str, str] = field(default_factory=dict)  # name -> instance label
    logs: dict[str, Path] = field(default_factory=dict)

    def api(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.prom}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        status, body = http_get(url, timeout=10)
        assert status in (200, 400, 422), f"{url}: HTTP {status} {body[:300]!r}"
        doc = json.loads(body)
        assert isinstance(doc, dict)
        return doc

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("query", query=expr)

    def query_range(self, expr: str, seconds: int = 20) -> dict[str, Any]:
        end = time.time()
        return self.api("query_range", query=expr, start=f"{end - seconds:.3f}",
                        end=f"{end:.3f}", step="1")


def _exporters() -> dict[str, list[str]]:
    two, inf = FIXTURE_ROOTS / "two_node", FIXTURE_ROOTS / "inference"
    for root in (two, inf):
        if not (root / "proc").is_dir() or not (root / "sys").is_dir():
            missing(f"fixture root {root}")
    records = inf / "udev.json"
    if not records.is_file():
        missing(f"accelerator records {records}")
    return {
        "two_node": [f"--path.procfs={two / 'proc'}", f"--path.sysfs={two / 'sys'}"],
        "inference": [f"--path.procfs={inf / 'proc'}", f"--path.sysfs={inf / 'sys'}",
                      f"--accelerator.records={records}"],
        "real": ["--process.min-resident=0"],
    }


def _wait(what: str, check: Any, stack: Stack, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        time.sleep(0.5)
    logs = "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-2000:]}"
                     for n, p in stack.logs.items())
    pytest.fail(f"timed out waiting for {what}: {last}\n{logs}", pytrace=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus = require_tool("prometheus")
    if not exporter_available():
        missing("the numa-exporter command (pip install -e .)")
    exporters = _exporters()
    tmp = tmp_path_factory.mktemp("live")
    with ExitStack() as es:
        s = Stack(prom="")
        targets = []
        for name, args in exporters.items():
            port = free_port()
            log = tmp / f"exporter-{name}.log"
            s.logs[f"exporter {name}"] = log
            cmd = [*exporter_command(), f"--web.listen-address=127.0.0.1:{port}",
                   "--scan.interval=1s", "--log.format=json", *args]
            es.enter_context(running(cmd, log, f"http://127.0.0.1:{port}/metrics",
                                     what=f"exporter on {name}",
                                     ready_body=b"numa_exporter_scans_total 1"))
            s.instances[name] = f"127.0.0.1:{port}"
            targets.append({"targets": [f"127.0.0.1:{port}"], "labels": {"root": name}})
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(RULES), str(RECORDING)],
            "scrape_configs": [{"job_name": "numa-exporter", "static_configs": targets}],
        }
        cfg = tmp / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        port = free_port()
        s.prom = f"http://127.0.0.1:{port}"
        log = tmp / "prometheus.log"
        s.logs["prometheus"] = log
        es.enter_context(running(
            [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
             "--log.level=warn"],
            log, f"{s.prom}/-/ready", what="prometheus", timeout=60))

        def scraped() -> bool | str:
            r = s.query("count_over_time(numa_exporter_scans_total[1m]) >= 6")
            got = {x["metric"]["instance"] for x in r["data"]["result"]}
            return True if got == set(s.instances.values()) else f"scraped enough: {got}"

        def rules_ran() -> bool | str:
            groups = s.api("rules")["data"]["groups"]
            pending = [r["name"] for g in groups for r in g["rules"]
                       if r.get("lastEvaluation", "").startswith("0001")]
            return True if groups and not pending else f"not evaluated yet: {pending}"

        def recorded() -> bool | str:
            r = s.query("instance_node:numa_node_miss_pages:rate5m")
            return True if r["data"]["result"] else "no recorded series yet"

        _wait("six scrapes of every exporter", scraped, s)
        _wait("every rule to be evaluated", rules_ran, s)
        _wait("recording rules", recorded, s)
        yield s


def _escape(instance: str) -> str:
    """Return ``instance`` as a regex inside a PromQL string, as Grafana escapes it."""
    return re.escape(instance).replace("\\", "\\\\")


def test_rules_are_loaded_and_healthy(stack: Stack) -> None:
    groups = stack.api("rules")["data"]["groups"]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    want = {r.get("alert") or r["record"] for path in (RULES, RECORDING) for r in rules(path)}
    assert set(loaded) == want
    bad = {n: r.get("lastError") for n, r in loaded.items() if r["health"] != "ok"}
    assert not bad, bad


def test_every_rule_expression_parses(stack: Stack) -> None:
    for path in (RULES, RECORDING):
        for rule in rules(path):
            r = stack.query(rule["expr"])
            assert r["status"] == "success", (rule.get("alert") or rule["record"], r)


def test_recording_rules_have_data(stack: Stack) -> None:
    """Each recorded series exists for some exporter (the miss ratio only where pages are
    allocated: the fixture roots are static, so it comes from this host)."""
    for rule in rules(RECORDING):
        r = stack.query(rule["record"])
        got = {x["metric"].get("instance") for x in r["data"]["result"]}
        assert got & set(stack.instances.values()), f"{rule['record']} has no data"
    inst = stack.instances["two_node"]
    r = stack.query(f'instance_node:numa_node_miss_pages:rate5m{{instance="{inst}"}}')
    assert sorted(x["metric"]["node"] for x in r["data"]["result"]) == ["0", "1"]


def test_bindings_of_the_inference_fixture_make_alerts_pending(stack: Stack) -> None:
    """The fixture's vllm (pid 500) is bound away from its GPU with balancing on."""
    inst = stack.instances["inference"]

    def pending() -> bool | str:
        alerts = stack.api("alerts")["data"]["alerts"]
        got = {(a["labels"]["alertname"], a["labels"].get("pid")) for a in alerts
               if a["labels"].get("instance") == inst and a["state"] in ("pending", "firing")}
        want = {("NumaBalancingWithStrictBinding", "500"), ("NumaAcceleratorNodeMismatch", "500")}
        return True if want <= got else f"pending/firing: {sorted(got)}"

    _wait("alerts on the inference fixture", pending, stack, timeout=30)
    # and nothing fires for the exporter itself: it is up and scanning
    alerts = stack.api("alerts")["data"]["alerts"]
    names = {a["labels"]["alertname"] for a in alerts}
    assert not names & {"NumaExporterDown", "NumaExporterScanStale"}, names


def test_template_variables_find_instances_and_processes(stack: Stack) -> None:
    r = stack.api("label/instance/values", **{"match[]": "numa_process_remote_memory_ratio"})
    assert set(r["data"]) == set(stack.instances.values())
    for name, inst in stack.instances.items():
        sel = f'numa_process_info{{instance=~"{_escape(inst)}"}}'
        r = stack.api("label/comm/values", **{"match[]": sel})
        assert r["data"], f"no process for $process on {name}"


def _run_target(stack: Stack, target: dict[str, Any], instance: str) -> tuple[str, list[Any]]:
    expr = substitute(target["expr"], {"instance": instance, "process": ".+",
                                       "__rate_interval": RATE_INTERVAL})
    r = stack.query(expr) if target.get("instant") else stack.query_range(expr)
    assert r["status"] == "success", f"{expr}: {r.get('error')}"
    return expr, r["data"]["result"]


def test_every_dashboard_query_parses_and_returns_data(
        stack: Stack, record_property: Any) -> None:
    targets = panel_targets(dashboard())
    assert {(p["title"], t["refId"]) for p, t in targets} >= set(PARSE_ONLY), "stale PARSE_ONLY"
    no_data: list[str] = []
    report: dict[str, list[str]] = {}
    for panel, target in targets:
        key = (panel["title"], target["refId"])
        _run_target(stack, target, ".+")  # "All" parses too
        with_data = [name for name, inst in stack.instances.items()
                     if _run_target(stack, target, _escape(inst))[1]]
        report[f"{key[0]} [{key[1]}]"] = with_data
        if key in PARSE_ONLY:
            fixtures = [n for n in with_data if n != "real"]
            assert not fixtures, f"{key} now has data on {fixtures}: remove it from PARSE_ONLY"
        elif not with_data:
            no_data.append(f"{key[0]} [{key[1]}]: {target['expr']}")
    record_property("panel_data", json.dumps(report))
    for k, v in report.items():
        print(f"{k}: {', '.join(v) or 'parse-only'}")
    assert not no_data, "queries without data:\n" + "\n".join(no_data)
