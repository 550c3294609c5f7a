"""Weighted interleave on a fixture root: the two_node root (real 6.1 captures) copied, with
the weights a 6.12 kernel prints under /sys/kernel/mm/mempolicy/weighted_interleave and
weighted-interleave lines in the numa_maps of two processes. Expected values by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS, fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.scan.scanner import Scanner

# 2 MiB on each node under weights 3:1 (pid 130)
LINES_130 = (b"7f1000000000 weighted interleave:0-1 anon=1024 dirty=1024 active=0 N0=512 "
             b"N1=512 kernelpagesize_kB=4\n")
# 300/100 pages under 0-1 (conforms to 3:1), 100/300 under node 1 alone (pid 139)
LINES_139 = (b"7f1000000000 weighted interleave:0-1 anon=400 dirty=400 N0=300 N1=100 "
             b"kernelpagesize_kB=4\n"
             b"7f2000000000 weighted interleave:1 anon=400 dirty=400 N0=100 N1=300 "
             b"kernelpagesize_kB=4\n")


def weighted_root(tmp: Path, weights: dict[str, bytes] | None) -> Path:
    """Return a copy of two_node with these weight files (None: no folder, before 6.9)."""
    root = tmp / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    if weights is not None:
        wi = root / "sys" / "kernel" / "mm" / "mempolicy" / "weighted_interleave"
        wi.mkdir(parents=True)
        for name, data in weights.items():
            (wi / name).write_bytes(data)
    for pid, lines in (("130", LINES_130), ("139", LINES_139)):
        maps = root / "proc" / pid / "numa_maps"
        maps.write_bytes(maps.read_bytes() + lines)
    return root


def _scrape(root: Path) -> tuple[str, Scanner]:
    cfg = fixture_config(root)
    s = Scanner(cfg)
    snap = s.scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return generate_latest(reg).decode(), s


def _one(text: str, name: str, **labels: str) -> float | None:
    got = values(text, name, **labels)
    assert len(got) <= 1, got
    return got[0][1] if got else None


DEV = "numa_process_weighted_interleave_deviation_ratio"
WEIGHT = "numa_node_weighted_interleave_weight"


def test_weights_and_deviation(tmp_path: Path) -> None:
    text, _ = _scrape(weighted_root(tmp_path, {"node0": b"3\n", "node1": b"1\n"}))
    assert _one(text, WEIGHT, node="0") == 3
    assert _one(text, WEIGHT, node="1") == 1
    assert _one(text, "numa_weighted_interleave_auto") is None  # 6.12: no auto file
    assert _one(text, DEV, pid="130") == 0.25  # (|1/2 - 3/4| + |1/2 - 1/4|) / 2
    assert _one(text, DEV, pid="139") == pytest.approx(0.125)  # (100 + 100) / 800 / 2
    assert _one(text, DEV, pid="159") is None  # no weighted-interleave pages


def test_auto_where_present(tmp_path: Path) -> None:
    files = {"node0": b"2\n", "node1": b"5\n", "auto": b"true\n"}
    text, _ = _scrape(weighted_root(tmp_path, files))
    assert _one(text, "numa_weighted_interleave_auto") == 1
    # pid 130: 1/2 each against 2/7, 5/7: (3/14 + 3/14) / 2 = 3/14
    assert _one(text, DEV, pid="130") == pytest.approx(3 / 14)


def test_before_6_9_nothing(tmp_path: Path) -> None:
    text, _ = _scrape(weighted_root(tmp_path, None))
    assert f"# HELP {WEIGHT}" not in text and f"# HELP {DEV}" not in text


def test_malformed_weight_is_counted_and_the_rest_serves(tmp_path: Path) -> None:
    text, _ = _scrape(weighted_root(tmp_path, {"node0": b"3\n", "node1": b"0\n"}))
    assert _one(text, WEIGHT, node="0") == 3
    assert _one(text, WEIGHT, node="1") is None
    assert _one(text, DEV, pid="130") is None  # node 1's weight unknown: no guess
    errs = values(text, "numa_exporter_parse_errors_total", source="weighted_interleave")
    assert errs and errs[0][1] == 1
    # the rest of the process is served: its home is node 1 (its thread), where the 6.1
    # capture has 268492800 anonymous and 65536 file bytes, plus the 512 weighted pages
    assert _one(text, "numa_process_local_memory_bytes", pid="130") == (
        268492800 + 65536 + 512 * 4096)
