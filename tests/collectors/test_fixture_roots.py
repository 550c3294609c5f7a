"""Scanner and collector on fixture roots, checked against hand-derived EXPECTED.json."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS, fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.numa_maps import NumaMaps
from numa_exporter.readers.process_files import HoldMeter, read_numa_maps
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import Denied, Gone
from numa_exporter.sources.procfs import ProcessFiles

ROOT_NAMES = ("two_node", "four_node", "no_balancing", "grace_hopper")
# node numastat field -> the counter it is exported as (written out, not derived)
NUMASTAT_NAMES = {
    "numa_hit": "numa_node_hit_pages_total",
    "numa_miss": "numa_node_miss_pages_total",
    "numa_foreign": "numa_node_foreign_pages_total",
    "interleave_hit": "numa_node_interleave_hit_pages_total",
    "local_node": "numa_node_local_pages_total",
    "other_node": "numa_node_other_pages_total",
}


_config = functools.partial(fixture_config, detail_above=0)


def _expected(root: str) -> dict[str, Any]:
    return dict(json.loads((ROOTS / root / "EXPECTED.json").read_text()))


def _scanned(e: dict[str, Any]) -> bool:
    """Return whether a fixture process is read when no error is injected."""
    return e["outcome"] in ("scanned", "denied_when_injected")


def _scan(root: str, **kw: Any) -> tuple[Scanner, Snapshot]:
    s = Scanner(_config(root, **kw))
    return s, s.scan()


def _exposition(snap: Snapshot, config: Config) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, config))
    return generate_latest(reg).decode()


@pytest.mark.parametrize("root", ROOT_NAMES)
def test_per_process_bytes_threads_and_policies(root: str) -> None:
    exp = _expected(root)
    _, snap = _scan(root)
    got = {p.pid: p for p in snap.processes}
    scanned = {int(pid) for pid, e in exp["processes"].items() if _scanned(e)}
    assert set(got) == scanned
    for pid in scanned:
        e = exp["processes"][str(pid)]
        p = got[pid]
        mem = {(str(n), k.value): b for (n, k), b in p.memory.items() if b}
        want = {(n, k): b for n, kinds in e["memory_bytes"].items() for k, b in kinds.items() if b}
        assert mem == want, pid
        assert {str(n): c for n, c in p.threads_by_node.items()} == {
            n: c for n, c in e["threads_by_node"].items() if c}, pid
        assert {k: v for k, v in p.policy_bytes.items() if v} == {
            k: v for k, v in e["policy_bytes"].items() if v}, pid
        assert p.pages_migrated == e["pages_migrated"], pid
        assert p.comm == e["comm"]
        assert p.start_time == pytest.approx(e["start_time_seconds"], abs=0.01)
        assert p.rss_bytes == e["vm_rss_bytes"]


@pytest.mark.parametrize("root", ROOT_NAMES)
def test_outcome_counts(root: str) -> None:
    exp = _expected(root)
    _, snap = _scan(root)
    outcomes = [e["outcome"] for e in exp["processes"].values()]
    assert snap.stats.states["scanned"] == sum(map(_scanned, exp["processes"].values()))
    assert snap.stats.states["gone"] == outcomes.count("gone")
    assert snap.stats.states["denied"] == 0


def test_real_captures_agree_with_numastat_p() -> None:
    """Each real capture's per-node totals equal what numastat -p printed in the same guest."""
    exp = _expected("two_node")
    _, snap = _scan("two_node")
    got = {p.pid: p for p in snap.processes}
    checked = 0
    for pid, e in exp["processes"].items():
        if "numastat_p_mb" not in e:
            continue
        nb = got[int(pid)].node_bytes()
        for node in (0, 1):
            mb = round(nb.get(node, 0) / 2**20, 2)
            assert mb == pytest.approx(e["numastat_p_mb"]["Total"][f"node{node}"], abs=0.011)
        checked += 1
    assert checked == 5


def test_remote_ratio_follows_thread_home() -> None:
    exp = _expected("two_node")
    _, snap = _scan("two_node")
    online = frozenset(c for cpus in exp["topology"]["cpus"].values() for c in cpus)
    for p in snap.processes:
        e = exp["processes"][str(p.pid)]
        # a process whose threads are bound to fewer CPUs than the host's has its home from
        # that binding (intent before observation); else from where its threads ran
        allowed = parse_cpulist(e["cpus_allowed_list"] or "")
        bound = bool(allowed) and allowed != online
        assert p.home.source == ("binding" if bound else "threads"), p.pid
        assert sorted(p.home.nodes) == e["thread_nodes"]
        assert p.locality.remote_bytes == e["bytes_outside_thread_nodes"]
        assert p.locality.remote_ratio == pytest.approx(e["bytes_outside_thread_nodes_ratio"],
                                                        abs=1e-6)


def test_malformed_input_is_counted_and_the_rest_goes_on() -> None:
    exp = _expected("two_node")["processes"]["303"]
    scanner, snap = _scan("two_node")
    errs = exp["numa_maps_errors"]
    n = snap.stats.parse_errors["numa_maps"]
    assert errs["certain"] <= n <= errs["certain"] + errs["debatable"]
    assert snap.stats.parse_errors["status"] == exp["status_errors"]
    assert 303 in {p.pid for p in snap.processes}
    # counted again on the next scan (it is still malformed), logged only once
    snap2 = scanner.scan()
    assert snap2.stats.parse_errors["numa_maps"] == 2 * n


def test_system_metrics_match_expected() -> None:
    exp = _expected("two_node")
    cfg = _config("two_node")
    _, snap = _scan("two_node")
    text = _exposition(snap, cfg)
    for node, e in exp["nodes"].items():
        mem = "numa_node_memory_bytes"
        assert values(text, mem, node=node, field="MemTotal")[0][1] == e["mem_total_bytes"]
        assert values(text, mem, node=node, field="MemFree")[0][1] == e["mem_free_bytes"]
        assert set(e["numastat"]) == set(NUMASTAT_NAMES)
        for field, v in e["numastat"].items():
            name = NUMASTAT_NAMES[field]
            assert values(text, name, node=node)[0][1] == v, name
        for size, h in e["hugepages"].items():
            for state in ("total", "free", "surplus"):
                got = values(text, "numa_node_hugepages", node=node, page_size_bytes=size,
                             state=state)
                assert got[0][1] == h[state]
    for field, v in exp["vmstat"].items():
        assert values(text, f"numa_vmstat_{field}_total")[0][1] == v, field
    assert values(text, "numa_balancing_mode")[0][1] == exp["balancing"]["mode"]
    assert values(text, "numa_balancing_promote_rate_limit_bytes_per_second")[0][1] == (
        exp["balancing"]["promote_rate_limit_bytes_per_second"])


@pytest.mark.parametrize("root", ["two_node", "four_node"])
def test_distances_and_memory_only_nodes(root: str) -> None:
    exp = _expected(root)["topology"]
    cfg = _config(root)
    _, snap = _scan(root)
    text = _exposition(snap, cfg)
    nodes = exp["nodes"]
    for a, row in exp["distance"].items():
        for b, d in zip(nodes, row, strict=True):
            assert values(text, "numa_node_distance", node=a, to_node=str(b))[0][1] == d
    for n, cpus in exp["cpus"].items():
        assert values(text, "numa_node_cpus", node=n)[0][1] == len(cpus)


def test_no_balancing_kernel_has_no_mode_metric() -> None:
    cfg = _config("no_balancing")
    _, snap = _scan("no_balancing")
    text = _exposition(snap, cfg)
    assert values(text, "numa_balancing_mode") == []
    assert snap.stats.read_errors == {}


class CountingReader:
    """A placement reader that counts calls and can fail for chosen pids."""

    def __init__(self, fail: dict[int, type[Exception]] | None = None) -> None:
        self.calls: list[int] = []
        self.fail = fail or {}

    def __call__(self, files: ProcessFiles, deadline: Deadline = NEVER,
                 hold: HoldMeter | None = None) -> NumaMaps:
        self.calls.append(files.pid)
        exc = self.fail.get(files.pid)
        if exc is not None:
            raise exc("numa_maps", str(files.path / "numa_maps"))
        return read_numa_maps(files, deadline, hold)


def test_denied_process_is_counted_and_not_retried() -> None:
    reader = CountingReader({304: Denied})
    scanner = Scanner(_config("two_node"), placement=reader)
    first = scanner.scan()
    assert first.stats.states["denied"] == 1
    assert 304 not in {p.pid for p in first.processes}
    second = scanner.scan()
    assert second.stats.states["denied"] == 1
    assert reader.calls.count(304) == 1  # not read again while it is the same process
    # the read error was counted when the read failed; a scan that reads nothing adds none
    assert second.stats.read_errors[("numa_maps", "denied")] == 1


def test_process_vanishing_mid_read_is_skipped() -> None:
    reader = CountingReader({300: Gone})
    scanner = Scanner(_config("two_node"), placement=reader)
    snap = scanner.scan()
    assert 300 not in {p.pid for p in snap.processes}
    assert snap.stats.states["gone"] == 1  # 300 vanished while read (302 is only partial)
    assert snap.stats.states["scanned"] == 8


def test_scrape_never_reads_proc() -> None:
    reader = CountingReader()
    cfg = _config("two_node")
    scanner = Scanner(cfg, placement=reader)
    snap = scanner.scan()
    n = len(reader.calls)
    for _ in range(3):
        _exposition(snap, cfg)
    assert len(reader.calls) == n


def test_budget_leaves_the_rest_for_the_next_scan() -> None:
    t = [0.0]

    def clock() -> float:
        t[0] += 0.1
        return t[0]

    scanner = Scanner(_config("two_node", scan_budget=1.0), clock=clock)
    first = scanner.scan()
    assert first.stats.budget_skipped_total > 0
    left = list(scanner.state.pending)
    # a read given up at its deadline goes after the others (it cannot starve them), and
    # is then read to the end (progress is certain for it)
    given_up = [st.key.pid for st in scanner.table if st.abandoned]
    assert len(given_up) == 1
    seen_first = {id(p) for p in first.processes}
    second = scanner.scan()
    done = [p.pid for p in second.processes if id(p) not in seen_first]  # read this time
    assert done and set(done) <= set(left)  # the leftovers go first, in their order
    others = [p for p in left if p not in given_up]
    assert done[:-1] == others[: len(done) - 1]
    assert done[-1] == given_up[0]


def test_selection_by_size_top_and_regex() -> None:
    import re

    exp = _expected("two_node")["processes"]
    _, big = _scan("two_node", min_resident=100 << 20)
    assert {p.pid for p in big.processes} == {
        int(pid) for pid, e in exp.items()
        if _scanned(e) and e["vm_rss_bytes"] + e["status_hugetlb_bytes"] >= 100 << 20}
    _, top = _scan("two_node", top=2)
    assert len(top.processes) == 2
    _, inc = _scan("two_node", include=re.compile("^split"))
    assert [p.pid for p in inc.processes] == [300]
    _, exc = _scan("two_node", exclude=re.compile("numatouch"))
    assert all(p.comm != "numatouch" for p in exc.processes)


def test_collector_output_is_promtool_clean(tmp_path: Path) -> None:
    from tests.e2e.test_daemon import promtool_check

    for root in ROOT_NAMES:
        cfg = _config(root)
        _, snap = _scan(root)
        promtool_check(_exposition(snap, cfg), tmp_path)
