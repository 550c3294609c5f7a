"""DAMON's physical-address mode (``--collector.damon.mode``): choosing the operation set,
one paddr kdamond over every node's memory blocks, and the host's hot and idle bytes by
node. The DAMON tree is the fake 6.12 layout of test_damon_sysfs.py (regular files; what the
kernel creates on a write the fixture creates before); the node tree mirrors 6.12's
``/sys/devices/system/{node,memory}`` with the guest bed's block size (128 MiB) and a
smaller, made-up block numbering. Never the host's own DAMON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.unit.test_damon_sysfs import BOOT, _kdamond, _snapshot, _tree

from numa_exporter.model.hot_memory import NodeRange, bytes_by_node, merge_blocks
from numa_exporter.parsers.block_size_bytes import parse_block_size_bytes
from numa_exporter.readers.hot_memory import node_hot_idle
from numa_exporter.readers.node_memory import read_node_ranges
from numa_exporter.sources.damon import DamonSettings, DamonSysfs, DamonUnavailable, Region

MIB = 1 << 20
BLOCK = 128 * MIB


def _driver(tmp: Path, mode: str = "auto", slots: int = 1) -> DamonSysfs:
    return DamonSysfs(tmp / "sys", tmp / "run", DamonSettings(mode=mode, slots=slots), BOOT,
                      sleep=lambda _: None)


def _avail(admin: Path, text: str) -> None:
    (admin / "kdamonds/0/contexts/0/avail_operations").write_text(text)


def _regions_dirs(admin: Path, n: int) -> Path:
    """Create targets/0/regions/{nr_regions, i/start, i/end}, as the kernel does when
    nr_regions is written."""
    regions = admin / "kdamonds/0/contexts/0/targets/0/regions"
    regions.mkdir(parents=True, exist_ok=True)
    (regions / "nr_regions").write_text("0\n")
    for i in range(n):
        (regions / str(i)).mkdir(exist_ok=True)
        for name in ("start", "end"):
            (regions / str(i) / name).write_text("0\n")
    return regions


@pytest.mark.parametrize(("avail", "mode", "want"), [
    ("vaddr\nfvaddr\npaddr\n", "auto", "vaddr"),
    ("paddr\n", "auto", "paddr"),  # DAMON_PADDR without DAMON_VADDR
    ("vaddr\nfvaddr\npaddr\n", "paddr", "paddr"),
    (None, "auto", "vaddr"),  # before 5.19: no avail_operations; vaddr assumed
])
def test_auto_takes_vaddr_where_listed_else_paddr(tmp_path: Path, avail: str | None,
                                                   mode: str, want: str) -> None:
    admin = _tree(tmp_path, 0)
    _kdamond(admin, 0)
    if avail is not None:
        _avail(admin, avail)
    d = _driver(tmp_path, mode)
    assert d.claim() == [0]
    assert d.ops == want
    assert (admin / "kdamonds/0/contexts/0/operations").read_text() == want
    assert json.loads((tmp_path / "run/damon.json").read_text())["operations"] == want


def test_a_forced_mode_the_kernel_lacks_is_absent_and_undone(tmp_path: Path) -> None:
    admin = _tree(tmp_path, 0)
    _kdamond(admin, 0)
    _avail(admin, "paddr\n")
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path, "vaddr").claim()
    assert got.value.reason == "absent" and "vaddr" in str(got.value)
    # its own, never started kdamond is removed again: nobody else had one
    assert (admin / "kdamonds/nr_kdamonds").read_text() == "0"
    assert not (tmp_path / "run/damon.json").exists()


def test_paddr_creates_one_kdamond_whatever_the_process_count(tmp_path: Path) -> None:
    admin = _tree(tmp_path, 0)
    _kdamond(admin, 0)
    _avail(admin, "paddr\n")
    assert _driver(tmp_path, "auto", slots=4).claim() == [0]
    assert (admin / "kdamonds/nr_kdamonds").read_text() == "1"


def _paddr_running(tmp_path: Path, ranges: list[tuple[int, int]]) -> tuple[Path, DamonSysfs]:
    admin = _tree(tmp_path, 0)
    kd = _kdamond(admin, 0)
    _avail(admin, "paddr\n")
    _regions_dirs(admin, len(ranges))
    d = _driver(tmp_path)
    d.claim()
    (kd / "pid").write_text("4343\n")  # the kernel starts kdamond.0 on "on"
    d.watch_physical(0, ranges)
    return admin, d


def test_watch_physical_writes_each_range_and_starts(tmp_path: Path) -> None:
    ranges = [(0, 8 * BLOCK), (8 * BLOCK, 16 * BLOCK), (32 * BLOCK, 40 * BLOCK)]
    admin, d = _paddr_running(tmp_path, ranges)
    regions = admin / "kdamonds/0/contexts/0/targets/0/regions"
    assert (admin / "kdamonds/0/state").read_text() == "on"
    assert (regions / "nr_regions").read_text() == "3"
    got = [(int((regions / str(i) / "start").read_text()),
            int((regions / str(i) / "end").read_text())) for i in range(3)]
    assert got == ranges
    with pytest.raises(DamonUnavailable):  # a paddr kdamond is never pointed at a pid
        d.watch(0, 1)


def test_own_paddr_kdamond_recognised_after_restart_and_stopped(tmp_path: Path) -> None:
    admin, _ = _paddr_running(tmp_path, [(0, BLOCK)])
    again = _driver(tmp_path)  # a new exporter, same boot, auto
    assert again.claim() == [0] and again.ops == "paddr"
    again.release()
    assert (admin / "kdamonds/0/state").read_text() == "off"
    # stopped, configured as the exporter left it (paddr): still its own
    assert _driver(tmp_path).claim() == [0]


def test_a_foreign_paddr_kdamond_is_left_untouched(tmp_path: Path) -> None:
    # this host's own reclaim kdamond: paddr, running, not the exporter's
    admin = _tree(tmp_path, 1)
    _kdamond(admin, 0, state="on", pid=77, operations="paddr")
    _avail(admin, "paddr\n")
    before = _snapshot(tmp_path / "sys")
    d = _driver(tmp_path, "paddr")
    with pytest.raises(DamonUnavailable) as got:
        d.claim()
    assert got.value.reason == "foreign"
    with pytest.raises(DamonUnavailable):
        d.watch_physical(0, [(0, BLOCK)])
    d.release()
    assert _snapshot(tmp_path / "sys") == before


# --- node ranges ---------------------------------------------------------------------------

def _node_tree(tmp: Path, blocks: dict[int, list[int]], offline: tuple[int, ...] = (),
               size: str = "8000000\n") -> Path:
    sysfs = tmp / "sys"
    mem = sysfs / "devices/system/memory"
    mem.mkdir(parents=True, exist_ok=True)
    (mem / "block_size_bytes").write_text(size)
    for node, bs in blocks.items():
        nd = sysfs / "devices/system/node" / f"node{node}"
        (nd / "cpu0").mkdir(parents=True, exist_ok=True)  # not a memory block
        (nd / "meminfo").write_text("")
        for b in bs:
            (mem / f"memory{b}").mkdir(exist_ok=True)
            (mem / f"memory{b}/state").write_text("offline\n" if b in offline else "online\n")
            (nd / f"memory{b}").symlink_to(mem / f"memory{b}")
    return sysfs


def test_node_ranges_merge_contiguous_online_blocks(tmp_path: Path) -> None:
    # node 0: blocks 0-7 and 32-39 (a hole below 4 GiB, as x86 has); node 1: 8-15, 17 offline
    sysfs = _node_tree(tmp_path, {0: [*range(8), *range(32, 40)], 1: [*range(8, 16), 17]},
                       offline=(17,))
    assert read_node_ranges(sysfs) == [
        NodeRange(0, 0, 8 * BLOCK), NodeRange(1, 8 * BLOCK, 16 * BLOCK),
        NodeRange(0, 32 * BLOCK, 40 * BLOCK)]


def test_node_ranges_empty_without_memory_blocks(tmp_path: Path) -> None:
    assert read_node_ranges(tmp_path / "sys") == []
    sysfs = _node_tree(tmp_path, {0: [0]}, size="zz\n")
    assert read_node_ranges(sysfs) == []


def test_block_listed_under_two_nodes_counts_once() -> None:
    assert merge_blocks({1: [0, 1], 0: [1, 2]}, 10) == [
        NodeRange(1, 0, 10), NodeRange(0, 10, 30)]


@pytest.mark.parametrize(("data", "want"), [
    (b"8000000\n", 128 * MIB), (b"80000000\n", 2 << 30), (b"0x1000\n", 4096),
    (b"0\n", None), (b"", None), (b"-8000000\n", None), (b"8 000\n", None),
    (b"1" * 17, None),
])
def test_parse_block_size_bytes(data: bytes, want: int | None) -> None:
    assert parse_block_size_bytes(data) == want


# --- the host's hot and idle bytes by node ----------------------------------------------------

RANGES = [NodeRange(0, 0, 100), NodeRange(1, 100, 200), NodeRange(0, 300, 400)]


def test_a_region_over_two_nodes_is_split_at_the_boundary() -> None:
    assert bytes_by_node(50, 130, RANGES) == {0: 50.0, 1: 30.0}
    assert bytes_by_node(190, 310, RANGES) == {1: 10.0, 0: 10.0}  # the hole counts for none


def test_node_hot_idle_joins_regions_to_nodes() -> None:
    regions = [Region(0, 60, 0, 9), Region(60, 140, 20, 1),  # hot over the node boundary
               Region(140, 200, 3, 0),  # accessed, below a 0.25 threshold: neither
               Region(300, 400, 0, 30), Region(5, 5, 20, 0)]  # empty: skipped
    got = node_hot_idle(regions, RANGES, max_accesses=20, threshold=0.25, now=7.0)
    assert got.hot == {0: 40.0, 1: 40.0}
    assert got.idle == {0: 160.0}
    assert got.regions == 5 and got.monotonic == 7.0


# --- the worker in paddr mode, on the same fake trees -----------------------------------------

def test_worker_paddr_round_reads_hot_and_idle_by_node(tmp_path: Path) -> None:
    from numa_exporter.collectors.damon import emit
    from numa_exporter.model.snapshot import Snapshot
    from numa_exporter.scan.damon import HotMemoryMonitor

    sysfs = _node_tree(tmp_path, {0: [0, 1], 1: [2]})
    admin = _tree(tmp_path, 0)
    kd = _kdamond(admin, 0)
    _avail(admin, "paddr\n")
    _regions_dirs(admin, 2)
    d = _driver(tmp_path)
    d.claim()
    (kd / "pid").write_text("4343\n")
    tried = kd / "contexts/0/schemes/0/tried_regions"
    # hot over the last 64 MiB of node 0 and the first 64 MiB of node 1; the rest idle
    for i, (start, end, acc) in enumerate([(0, 192 * MIB, 0), (192 * MIB, 320 * MIB, 20),
                                           (320 * MIB, 384 * MIB, 0)]):
        (tried / str(i)).mkdir(parents=True)
        for name, v in (("start", start), ("end", end), ("nr_accesses", acc), ("age", 2)):
            (tried / str(i) / name).write_text(f"{v}\n")
    m = HotMemoryMonitor(d, None, threshold=0.05, node_ranges=lambda: read_node_ranges(sysfs))
    m.round()
    regions = kd / "contexts/0/targets/0/regions"
    assert (regions / "nr_regions").read_text() == "2"  # node 0's two blocks are one range
    assert (regions / "1" / "start").read_text() == str(2 * BLOCK)
    st = m.status()
    assert st.state == "monitoring" and st.nodes is not None
    assert st.nodes.hot == {0: 64.0 * MIB, 1: 64.0 * MIB}
    assert st.nodes.idle == {0: 192.0 * MIB, 1: 64.0 * MIB}
    text = {m.name: [(s.labels, s.value) for s in m.samples]
            for m in emit(Snapshot(damon=st))}
    assert text["numa_node_hot_memory_bytes"] == [({"node": "0"}, 64.0 * MIB),
                                                  ({"node": "1"}, 64.0 * MIB)]
    assert text["numa_node_idle_memory_bytes"][1] == ({"node": "1"}, 64.0 * MIB)


def test_worker_paddr_without_memory_blocks_is_absent(tmp_path: Path) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor

    admin = _tree(tmp_path, 0)
    _kdamond(admin, 0)
    _avail(admin, "paddr\n")
    d = _driver(tmp_path)
    d.claim()
    m = HotMemoryMonitor(d, None, threshold=0.05)
    with pytest.raises(DamonUnavailable) as got:
        m.round()
    assert got.value.reason == "absent"
    assert (admin / "kdamonds/0/state").read_text() == "off\n"  # never written


def test_node_ranges_of_the_captured_6_12_guest() -> None:
    # tests/fixtures/memory_blocks: what the 2-node 6.12 guest shows (README there)
    root = Path(__file__).resolve().parents[1] / "fixtures/memory_blocks/6.12-2node/sys"
    assert read_node_ranges(root) == [NodeRange(0, 0, 1 << 30), NodeRange(1, 1 << 30, 2 << 30)]


def test_mode_flag_reaches_the_driver_settings(tmp_path: Path) -> None:
    from numa_exporter.cli import build_parser, config_from_args
    from numa_exporter.daemon import hot_memory_monitor

    p = build_parser()
    ns = p.parse_args(["--collector.damon", "--collector.damon.mode=paddr",
                       f"--path.sysfs={tmp_path}", f"--collector.damon.run-dir={tmp_path}"])
    cfg, _ = config_from_args(ns, p)
    assert cfg.damon_mode == "paddr"
    monitor, _ = hot_memory_monitor(cfg)
    assert monitor is not None and monitor.driver.settings.mode == "paddr"
    assert build_parser().parse_args([]).damon_mode == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--collector.damon.mode=fvaddr"])
