"""Kernel features detected at start, from what the roots hold and what the kernel answers;
never from a version number (issue 35).

The roots are the captures of Debian's 5.10 and 7.3 guests (tests/fixtures/realkernel-5.10,
realkernel-7.3) and synthetic trees; the probes ask the running kernel for things every Linux
refuses or accepts, whatever its version.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.readers.kernel_features import (
    FEATURES,
    damon_stat_running,
    describe,
    detect,
)
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.kernel_probe import ioctl_known, mbind_mode_known
from numa_exporter.sources.procfs import ProcFS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: _IOWR('f', 99, 104 bytes): no kernel has an ioctl of that number on /proc/PID/maps
NO_SUCH_IOCTL = (3 << 30) | (104 << 16) | (ord("f") << 8) | 99


def _root(tmp: Path, generation: str, scenario: str = "membind_remote") -> Path:
    """Return a copy of a captured root of ``generation`` (writable, for additions)."""
    src = FIXTURES / f"realkernel-{generation}" / scenario
    if not (src / "expected.json").exists():
        pytest.fail(f"{src} missing: tools/refresh-fixtures --kernel {generation}")
    dest = tmp / f"{generation}-{scenario}"
    shutil.copytree(src, dest)
    return dest


def test_an_unknown_ioctl_reads_absent_and_a_missing_file_unknown(tmp_path: Path) -> None:
    assert ioctl_known(Path("/proc/self/maps"), NO_SUCH_IOCTL) is False
    assert ioctl_known(tmp_path / "nothing", NO_SUCH_IOCTL) is None


def test_mbind_probe_refuses_an_unknown_mode_and_takes_bind() -> None:
    if mbind_mode_known(2) is None:
        pytest.skip("no mbind(2) here (not Linux x86-64/arm64, or no NUMA)")
    assert mbind_mode_known(2) is True  # MPOL_BIND: every NUMA kernel has it
    assert mbind_mode_known(99) is False


def test_510_capture_lacks_tiering_promotion_and_node_reclaim(tmp_path: Path) -> None:
    """Debian 5.10's own vmstat and node vmstat: no pgpromote_success (balancing mode 2 came
    in 5.18), no pgscan_* per node (7.1); the fixture root holds no memory_tiering, DAMON or
    weighted interleave folders; the ioctls and mbind are not asked of a fixture root."""
    root = _root(tmp_path, "5.10")
    found = detect(ProcFS(root / "proc"), root / "sys")
    assert list(found) == [f.name for f in FEATURES]
    assert found["balancing_tiering"] is False and found["node_reclaim"] is False
    assert found["memory_tiers"] is False and found["damon_sysfs"] is False
    assert found["weighted_interleave"] is False
    assert found["pagemap_scan"] is None and found["procmap_query"] is None
    assert found["preferred_many"] is None


def test_73_capture_has_tiering_promotion_and_node_reclaim(tmp_path: Path) -> None:
    root = _root(tmp_path, "7.3")
    found = detect(ProcFS(root / "proc"), root / "sys")
    assert found["balancing_tiering"] is True and found["node_reclaim"] is True


def test_folders_present_read_present(tmp_path: Path) -> None:
    root = _root(tmp_path, "5.10")
    for rel in ("devices/virtual/memory_tiering/memory_tier4", "kernel/mm/damon/admin",
                "kernel/mm/mempolicy/weighted_interleave"):
        (root / "sys" / rel).mkdir(parents=True)
    found = detect(ProcFS(root / "proc"), root / "sys")
    assert found["memory_tiers"] and found["damon_sysfs"] and found["weighted_interleave"]


def test_describe_says_each_absent_feature_with_what_goes_without_it() -> None:
    got = describe({"memory_tiers": False, "pagemap_scan": True, "procmap_query": None,
                    "node_reclaim": False})
    assert got["present"] == "pagemap_scan" and got["unknown"] == "procmap_query"
    assert got["absent"].startswith("memory_tiers (6.1+: no numa_node_memory_tier")
    assert "node_reclaim (7.1+:" in got["absent"]


def _scrape(root: Path) -> str:
    cfg = fixture_config(root, detail_above=0)
    snap = Scanner(cfg).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return generate_latest(reg).decode()


def test_features_exported_and_tier_bytes_absent_without_memory_tiers(tmp_path: Path
                                                                      ) -> None:
    """On the 5.10 capture the features found absent read 0 and, with no memory tiers, the
    process has no numa_process_tier_memory_bytes (before: all its bytes as tier="none");
    the same root given a memory tier 4 of both nodes gets its bytes in tier 4."""
    root = _root(tmp_path, "5.10")
    pid = str(json.loads((root / "expected.json").read_text())["pid"])
    text = _scrape(root)
    got = {lv["feature"]: v for lv, v in values(text, "numa_exporter_kernel_feature_available")}
    assert got == {"memory_tiers": 0.0, "balancing_tiering": 0.0, "damon_sysfs": 0.0,
                   "weighted_interleave": 0.0, "node_reclaim": 0.0}
    assert values(text, "numa_process_tier_memory_bytes", pid=pid) == []
    assert values(text, "numa_process_remote_memory_bytes", pid=pid)  # the process is read
    tier = root / "sys/devices/virtual/memory_tiering/memory_tier4"
    tier.mkdir(parents=True)
    (tier / "nodelist").write_text("0-1\n")
    tiered = {lv["tier"] for lv, _ in values(_scrape(root), "numa_process_tier_memory_bytes",
                                             pid=pid)}
    assert tiered == {"4"}


def test_damon_stat_running_read_from_its_module_parameter(tmp_path: Path) -> None:
    """7.3's DAMON_STAT (Y at boot) is told from its module parameter; absent or N: not."""
    assert damon_stat_running(tmp_path) is False
    param = tmp_path / "module/damon_stat/parameters/enabled"
    param.parent.mkdir(parents=True)
    param.write_text("N\n")
    assert damon_stat_running(tmp_path) is False
    param.write_text("Y\n")
    assert damon_stat_running(tmp_path) is True
