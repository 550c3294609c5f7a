"""The collector registry: each collector emits exactly its declared families, flags gate them,
the exporter's own histogram is a prometheus-client Histogram fed by the scanner."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS, fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors import binding as binding_collector
from numa_exporter.collectors import health, registry, scrape
from numa_exporter.collectors.registry import COLLECTORS
from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.config import Config
from numa_exporter.model import binding as binding_model
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.scan.scanner import Scanner

# The switchable collectors, written out: a collector lost from the registry fails here.
NAMES = {"process", "binding", "drift", "accelerator", "cgroup", "kubernetes", "vmstat", "node",
         "balancing", "tiers", "damon"}


_config = functools.partial(fixture_config, pins=True, detail_above=0)


def _scan(root: str, **kw: Any) -> tuple[Config, Snapshot]:
    cfg = _config(root, **kw)
    return cfg, Scanner(cfg, accelerators=accelerator_source(cfg)).scan()


def _exposition(snap: Snapshot, config: Config) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, config))
    return generate_latest(reg).decode()


def _families(text: str) -> set[str]:
    """Return the family names of an exposition as prometheus-client names them."""
    out: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            out.add(name.removesuffix("_total") if kind == "counter" else name)
    return out


def _spec_of(metric: Metric, specs: tuple[MetricSpec, ...]) -> MetricSpec | None:
    for s in specs:
        if s.pattern:
            rx = re.escape(s.family_name).replace(re.escape("<field>"), "[a-z0-9_]+")
            if re.fullmatch(rx, metric.name) and metric.type == s.type:
                return s
        elif metric.name in (s.family_name, s.name) and metric.type in (
                s.type, "gauge" if s.type == "info" else s.type):
            return s
    return None


def test_switchable_collectors_are_the_flags() -> None:
    assert set(COLLECTORS) == NAMES
    assert len(COLLECTORS) == len(NAMES)
    from numa_exporter.cli import build_parser

    flags = {o.removeprefix("--collector.") for a in build_parser()._actions
             for o in a.option_strings if o.startswith("--collector.")}
    assert {f for f in flags if "." not in f} == NAMES  # damon.* are its settings
    defaults = vars(build_parser().parse_args([]))
    assert {c for c in NAMES if not defaults[f"collector_{c}"]} == {"damon"} == registry.DEFAULT_OFF


def _with_hot(snap: Snapshot) -> Snapshot:
    """Return ``snap`` as the damon worker would leave it: the first process watched."""
    from numa_exporter.model.hot_memory import DamonStatus, HotMemory, NodeHotMemory

    p = snap.processes[0]
    hot = HotMemory(p.pid, p.start_time, {0: 3 * 4096.0, 1: 4096.0}, 10, 2, 1.0)
    # and the paddr mode's host-wide bytes (both modes at once only here, for the check
    # that every family is emitted somewhere)
    nodes = NodeHotMemory({1: 8 * 4096.0}, {0: 64 * 4096.0, 1: 4096.0}, 12, 1.0)
    return dataclasses.replace(
        snap, processes=(dataclasses.replace(p, hot=hot), *snap.processes[1:]),
        damon=DamonStatus("monitoring", {p.pid: hot}, {"busy": 1}, nodes,
                          modules_blocked={"damon_reclaim": True}))


def test_spec_names_are_unique_and_namespaced() -> None:
    names = [s.name for s in registry.SPECS]
    assert len(names) == len(set(names))
    for s in registry.SPECS:
        assert s.name.startswith("numa_"), s.name
        assert (s.type == "counter") == s.name.endswith("_total"), s.name
        assert (s.type == "info") == s.name.endswith("_info"), s.name
        assert "Value from the last completed scan" not in s.help, s.name


@pytest.mark.parametrize("root", ["two_node", "inference"])
def test_each_collector_emits_only_its_declared_families(root: str) -> None:
    _, snap = _scan(root)
    for c in registry.ALL:
        for metric in c.emit(snap):
            assert _spec_of(metric, c.specs) is not None, (c.name, metric.name)


def test_every_declared_family_is_emitted_on_some_fixture_root(tmp_path: Path) -> None:
    from tests.collectors.test_weighted_interleave_root import weighted_root

    # two_node with the weighted interleave files of 6.9+ kernels (6.16's auto included)
    weighted = weighted_root(tmp_path, {"node0": b"3\n", "node1": b"1\n", "auto": b"false\n"})
    seen: set[str] = set()
    # Debian 7.3's capture: node reclaim counters in node<N>/vmstat (7.1+)
    linux73 = Path(__file__).resolve().parents[1] / "fixtures/realkernel-7.3/membind_remote"
    for root in ("two_node", "four_node", "inference", "grace_hopper", str(weighted),
                 str(linux73)):
        cfg, snap = _scan(root)
        if root == "two_node":  # hot memory needs the damon worker (a QEMU guest's DAMON)
            snap = _with_hot(snap)
        for c in registry.ALL:
            for metric in c.emit(snap):
                spec = _spec_of(metric, c.specs)
                assert spec is not None
                seen.add(spec.name)
        # the per-collector success/duration families come from the SnapshotCollector
        exposed = _families(_exposition(snap, cfg))
        seen |= {s.name for s in scrape.SPECS if s.family_name in exposed}
    # the liveness families are read per scrape from the running daemon, not a snapshot
    live = CollectorRegistry(auto_describe=False)
    live.register(health.HealthCollector(lambda: health.Liveness(True, 0, 0, 0)))
    exposed = _families(generate_latest(live).decode())
    seen |= {s.name for s in health.SPECS if s.family_name in exposed}
    assert seen == {s.name for s in registry.SPECS}


def test_disabling_a_collector_removes_exactly_its_families() -> None:
    cfg, snap = _scan("inference")
    snap = _with_hot(snap)
    everything = _families(_exposition(snap, cfg))
    for name in NAMES:
        own = {m.name for m in registry.get(name).emit(snap)}
        assert own, name
        off = _families(_exposition(snap, dataclasses.replace(
            cfg, collectors=frozenset(NAMES - {name}))))
        assert not own & off, name
        assert everything - own <= off, name
    only_exporter = _families(_exposition(snap, dataclasses.replace(cfg,
                                                                     collectors=frozenset())))
    assert only_exporter and all(n.startswith("numa_exporter_") for n in only_exporter)


def test_enabled_follows_the_collector_set() -> None:
    cfg = Config()
    assert cfg.collectors is None and cfg.enabled("node")  # None: every collector
    assert not dataclasses.replace(cfg, collectors=frozenset({"process"})).enabled("node")


def _enabled_names(tree: ast.AST) -> set[str]:
    """Return the string literals passed to any ``*.enabled(...)`` call in ``tree``."""
    return {call.args[0].value for call in ast.walk(tree)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "enabled" and call.args
            and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)}


def test_every_collector_name_the_code_asks_about_exists() -> None:
    """Config cannot check names (it does not import the registry): this does, statically."""
    src = Path(binding_model.__file__).resolve().parents[1]
    asked: set[str] = set()
    for path in src.rglob("*.py"):
        asked |= _enabled_names(ast.parse(path.read_text(), str(path)))
    assert asked, "no enabled() call found: the check reads nothing"
    assert asked <= set(COLLECTORS), asked - set(COLLECTORS)
    # the check itself can fail: a typo'd name is caught
    typo = ast.parse('config.enabled("nodes")')
    assert not _enabled_names(typo) <= set(COLLECTORS)


def test_process_read_histogram_counts_every_read_and_is_frozen_per_snapshot() -> None:
    t = [0.0]

    def clock() -> float:  # every call advances 0.1 s: each read spans a few calls
        t[0] += 0.1
        return t[0]

    cfg = _config("two_node", scan_budget=1e9)
    scanner = Scanner(cfg, clock=clock)
    first = scanner.scan()
    second = scanner.scan()
    exp = json.loads((ROOTS / "two_node" / "EXPECTED.json").read_text())
    reads = sum(e["outcome"] in ("scanned", "denied_when_injected")
                for e in exp["processes"].values())
    assert reads == 9
    name = "numa_exporter_process_read_duration_seconds"
    for snap, n in ((first, reads), (second, 2 * reads)):
        text = _exposition(snap, cfg)
        assert values(text, f"{name}_count")[0][1] == n
        buckets = {lab["le"]: v for lab, v in values(text, f"{name}_bucket")}
        assert buckets["0.1"] == 0 and buckets["+Inf"] == n
        assert buckets["2.5"] == n
        total = values(text, f"{name}_sum")[0][1]
        assert 0.1 * n < total < 2.5 * n


def test_placement_method_timestamps_and_sampling_error_are_exposed() -> None:
    cfg, snap = _scan("two_node")
    full, other = snap.processes[0], snap.processes[1]
    sampled = dataclasses.replace(other, method="sampled", samples=4096,
                                  remote_ratio_stderr=0.0125,
                                  last_scan_timestamp=1_700_000_000.5,
                                  next_scan_timestamp=1_700_000_060.0)
    unknown_err = dataclasses.replace(snap.processes[2], method="sampled", samples=64)
    text = _exposition(dataclasses.replace(snap, processes=(full, sampled, unknown_err)), cfg)
    f, s, u = (str(p.pid) for p in (full, sampled, unknown_err))

    def one(metric: str, pid: str, **labels: str) -> float | None:
        found = values(text, metric, pid=pid, **labels)
        assert len(found) <= 1
        return found[0][1] if found else None

    assert one("numa_process_placement_info", f, method="full") == 1
    assert one("numa_process_placement_info", s, method="sampled") == 1
    assert one("numa_process_placement_info", s, method="full") is None
    assert one("numa_process_remote_memory_ratio_stderr", f) == 0
    assert one("numa_process_remote_memory_ratio_stderr", s) == 0.0125
    assert one("numa_process_remote_memory_ratio_stderr", u) is None
    assert one("numa_process_placement_sampled_pages", f) is None
    assert one("numa_process_placement_sampled_pages", s) == 4096
    assert one("numa_process_last_scan_timestamp_seconds", s) == 1_700_000_000.5
    assert one("numa_process_next_scan_timestamp_seconds", s) == 1_700_000_060.0
    # the scanner stamps each read with the scan's wall clock
    assert one("numa_process_last_scan_timestamp_seconds", f) == full.last_scan_timestamp
    assert full.last_scan_timestamp is not None and full.last_scan_timestamp > 1.7e9


def test_every_mismatch_reason_of_the_model_is_explained() -> None:
    explained = set(binding_collector.REASONS)
    assert set(binding_model.REASONS) <= explained
    assert "memory_off_policy_nodes" in explained
    for reason in explained:
        assert reason in binding_collector.MISMATCH.help
