"""The series budget (docs/series-budget.md): the table is the registry's, the default is
fleet-safe on the 8-node fixture, and nothing the shipped alerts, recording rules and
dashboard use is lost at the default.

* the document's tables are what ``tools/series_budget.py`` generates from the specs;
* the real daemon over HTTP, at its default flags, on ``eight_node`` (8 nodes, 200 watched
  processes): at most 4,000 series, ``numa_exporter_series`` adds up to what is served, and
  each per-process family stays within the table's bound at N=8;
* on the fixture roots that have a process at or above 1 GiB, every metric name the rules
  and the dashboard use that the full breakdown serves is served at the default too;
* every rule that applies to processes of any size (no 1 GiB floor in its expression)
  uses summary-level families only, so it fires for small processes as before.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.conftest import Daemon, fixture_config

from numa_exporter.collectors.registry import SPECS
from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.config_file import load_pins
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.scan.scanner import Scanner

from .helpers import (
    FIXTURE_ROOTS,
    KUBERNETES_RULES,
    RECORDING,
    REPO,
    RULES,
    dashboard,
    metric_names,
    panel_targets,
    rules,
)

sys.path.insert(0, str(REPO / "tools"))
import series_budget

EIGHT = FIXTURE_ROOTS / "eight_node"
FLOOR = "1073741824"  # the process alerts' resident-bytes floor
# Rules that sum a full-level family over processes on purpose, and why that is right.
SUMS_OF_DETAIL: dict[str, str] = {}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ')
PID = re.compile(r'pid="(\d+)"')
# What numa_exporter_series does not count: the per-scrape families (the process's own, the
# web server's, the scan loop's health, the scrape size) and the per-collector families.
NOT_COUNTED = ("process_", "python_", "numa_exporter_web_", "numa_exporter_scrape_bytes",
               "numa_exporter_scan_loop_up", "numa_exporter_scan_failures_total",
               "numa_exporter_log_write_errors_total", "numa_exporter_collector_",
               "numa_exporter_series")


def _shipped_exprs() -> list[tuple[str, str]]:
    """Return (name, expr) of every rule and dashboard query."""
    out = [(r.get("alert") or r["record"], r["expr"])
           for path in (RULES, RECORDING, KUBERNETES_RULES) for r in rules(path)]
    out += [(f"{p['title']} [{t['refId']}]", t["expr"]) for p, t in panel_targets(dashboard())]
    return out


def _served(text: str) -> set[str]:
    """Return the sample names of an exposition (``_total`` kept, histogram parts too)."""
    return {m.group(1) for line in text.splitlines() if (m := SAMPLE.match(line))}


def _exposition(root: str, detail_above: int) -> str:
    base = FIXTURE_ROOTS / root
    kw: dict[str, Any] = {}
    if (base / "config.toml").exists():
        kw["home_pins"], kw["accelerator_pins"] = load_pins(base / "config.toml")
    if (base / "udev.json").exists():
        kw["accelerator_records"] = base / "udev.json"
    cfg = fixture_config(base, rootfs=True,
                         detail_above=detail_above, **kw)
    snap = Scanner(cfg, accelerators=accelerator_source(cfg)).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return generate_latest(reg).decode()


def test_document_tables_are_generated_from_the_registry() -> None:
    text = series_budget.DOC.read_text()
    assert series_budget.BEGIN in text and series_budget.END in text
    assert series_budget.replace(text) == text, "run tools/series_budget.py --write"


def test_default_is_fleet_safe_on_eight_nodes_with_200_processes(start_daemon: Any) -> None:
    d: Daemon = start_daemon(f"--path.procfs={EIGHT / 'proc'}",
                             f"--path.sysfs={EIGHT / 'sys'}", "--scan.interval=1s")
    text = d.wait_scans(6, timeout=120)  # drift baselines taken: every family present
    samples = [m for line in text.splitlines() if (m := SAMPLE.match(line))]
    assert len({line for line in text.splitlines() if SAMPLE.match(line)}) == len(samples)
    pids = {p for m in samples if m.group(1) == "numa_process_info"
            for p in PID.findall(m.group(2) or "")}
    assert len(pids) == 200, "the fixture's 200 processes are all watched"
    assert len(samples) <= 4000, f"{len(samples)} series at the default flags"
    # the self-metric accounts for every collector family served, which is all but these
    declared = sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("numa_exporter_series{"))
    own = [m for m in samples if not m.group(1).startswith(NOT_COUNTED)]
    assert declared == len(own)
    # numa_exporter_scrape_bytes is the size of the snapshot part: all but the per-scrape
    # families, which follow it (a scan may publish between the rendering and the read of
    # the size: polled, a few scrapes)
    for _ in range(10):
        body = d.metrics().encode()
        head = body[:body.index(b"# HELP process_")]
        size = re.search(rb'^numa_exporter_scrape_bytes\{encoding="identity",format="text"\} '
                         rb"(\S+)$", body, re.M)
        assert size is not None
        if float(size.group(1)) == len(head):
            break
    else:
        pytest.fail(f"numa_exporter_scrape_bytes {size.group(1)!r}, rendered {len(head)}")
    # each per-process family within the table's bound for N=8
    per: Counter[tuple[str, str]] = Counter()
    for m in samples:
        for pid in PID.findall(m.group(2) or ""):
            per[(m.group(1), pid)] += 1
    bounds = {s.name: series_budget.at(s, 8) for s in SPECS if "pid" in s.labels}
    over = {k: n for k, n in per.items() if n > bounds.get(k[0], n)}
    assert not over, over


@pytest.mark.parametrize("root", ["eight_node", "kubernetes", "inference", "two_node"])
def test_default_keeps_every_name_the_rules_and_dashboard_use(root: str) -> None:
    used = set().union(*(metric_names(e) for _, e in _shipped_exprs()))
    full = _served(_exposition(root, 0)) & used
    default = _served(_exposition(root, Config().detail_above)) & used
    assert full - default == set(), f"lost at the default on {root}"
    assert full, "the names test saw no name at all"


def test_rules_for_processes_of_any_size_use_summary_families() -> None:
    level = {s.name: s.level for s in SPECS if "pid" in s.labels}
    bad = {}
    for name, expr in _shipped_exprs():
        if FLOOR in expr or name.endswith("]") or name in SUMS_OF_DETAIL:
            continue  # size-floored rules; dashboard panels; the sums above
        full = {n for n in metric_names(expr) if level.get(n) == "full"}
        if full:
            bad[name] = full
    assert not bad, bad


def test_summary_level_leaves_out_breakdowns_and_zeros(tmp_path: Path) -> None:
    """On eight_node: a 4.8 GiB worker keeps its per-node bytes by kind and zero gauges, a
    small service keeps its totals and its bytes per node summed over kinds; hint faults on
    nodes at 0 are gone for both."""
    text = _exposition("eight_node", Config().detail_above)
    lines = text.splitlines()

    def has(name: str, pid: str) -> bool:
        return any(line.startswith(name + "{") and f'pid="{pid}"' in line for line in lines)

    assert has("numa_process_memory_bytes", "1000")
    assert not has("numa_process_policy_memory_bytes", "1100")
    small = [line for line in lines if line.startswith("numa_process_memory_bytes{")
             and 'pid="1100"' in line]
    assert small and all('kind="all"' in line for line in small), small
    worker = [line for line in lines if line.startswith("numa_process_memory_bytes{")
              and 'pid="1000"' in line]
    assert not any('kind="all"' in line for line in worker), worker
    assert has("numa_process_remote_memory_ratio", "1100")
    assert has("numa_process_cpus_bound", "1000") and not has("numa_process_cpus_bound", "1100")
    faults = [line for line in lines if line.startswith("numa_process_hint_faults{")
              and 'pid="1000"' in line]
    assert len(faults) == 2, faults  # nodes 0 and 1 of 8; the six at 0 are left out


def _memory(text: str) -> dict[str, dict[str, float]]:
    """Return bytes per node by pid of numa_process_memory_bytes, summed over kinds."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line.startswith("numa_process_memory_bytes{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            per = out.setdefault(labels["pid"], {})
            per[labels["node"]] = per.get(labels["node"], 0.0) + float(line.split()[-1])
    return out


def test_every_watched_process_serves_its_bytes_per_node_at_the_default() -> None:
    """Issue 34 #3: on eight_node, each of the 200 watched processes has its bytes per node
    at the default flags, summed over kinds where it is a summary: the same bytes per node
    as the full breakdown; and a summary process stays within 20 series at N=8."""
    default = _exposition("eight_node", Config().detail_above)
    full = _exposition("eight_node", 0)
    pids = {p for line in default.splitlines() if line.startswith("numa_process_info{")
            for p in PID.findall(line)}
    assert len(pids) == 200
    assert set(_memory(default)) == pids
    assert _memory(default) == _memory(full)
    per: Counter[str] = Counter(p for line in default.splitlines()
                                if SAMPLE.match(line) for p in PID.findall(line))
    at_full = {p for line in default.splitlines()
               if line.startswith("numa_process_policy_memory_bytes{")
               for p in PID.findall(line)}
    # the ten largest (the 8 workers and two services) are at full detail, the rest summary
    assert len(at_full) == Config().detail_top
    assert max(n for p, n in per.items() if p not in at_full) <= 20
    assert series_budget.healthy_summary(8) <= 20


def test_dashboard_panels_of_full_detail_families_say_why_not_every_process() -> None:
    level = {s.name: s.level for s in SPECS if "pid" in s.labels}
    silent = set()
    for panel, target in panel_targets(dashboard()):
        if (any(level.get(n) == "full" for n in metric_names(target["expr"]))
                and "--process.detail-top" not in panel.get("description", "")):
            silent.add(panel["title"])
    assert not silent, silent
