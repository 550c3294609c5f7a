"""Offline checks on the captured real-kernel roots (tests/fixtures/realkernel/, no QEMU).

The roots were copied from a live multi-node guest by tools/refresh-fixtures; these tests
run fast on any host: the kernel's files agree among themselves (numa_maps vs numastat -p),
and ``numa-exporter inspect`` over each root reports the kernel's bytes per node and a remote
ratio in the range the placement implies.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .results import MiB, close, numa_maps_node_bytes, numastat_by_pid_mib

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "realkernel"
CASES = sorted(d.name for d in FIXTURES.glob("*") if (d / "expected.json").is_file())


def _expected(case: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / case / "expected.json").read_text()))


def test_fixture_roots_exist() -> None:
    """tools/refresh-fixtures has been run (the roots are committed)."""
    assert len(CASES) >= 8, f"expected real-kernel fixture roots in {FIXTURES}, found {CASES}"


@pytest.mark.parametrize("case", CASES)
def test_root_is_complete(case: str) -> None:
    """Every file the exporter reads for a process and for the nodes is in the root."""
    root = FIXTURES / case
    for pid in _expected(case)["pids"]:
        for name in ("numa_maps", "status", "stat", "sched"):
            assert (root / "proc" / str(pid) / name).is_file(), f"{case}: proc/{pid}/{name}"
        tasks = list((root / "proc" / str(pid) / "task").iterdir())
        assert tasks and all((t / "stat").is_file() and (t / "sched").is_file() for t in tasks)
    node = root / "sys/devices/system/node"
    for name in ("online", "possible", "has_cpu", "has_memory"):
        assert (node / name).is_file()
    for n in ("node0", "node1"):
        for name in ("cpulist", "distance", "meminfo", "numastat", "vmstat"):
            assert (node / n / name).is_file(), f"{case}: {n}/{name}"
        assert (node / n / "hugepages/hugepages-2048kB/nr_hugepages").is_file()
    assert (root / "proc/vmstat").is_file()
    assert (root / "proc/sys/kernel/numa_balancing").is_file()


@pytest.mark.parametrize("case", CASES)
def test_numa_maps_agree_with_numastat(case: str) -> None:
    """The kernel's own numa_maps sums match numastat -p taken at the same moment."""
    root = FIXTURES / case
    nst = numastat_by_pid_mib((root / "cmd" / "numastat_p.txt").read_text())
    for pid in _expected(case)["pids"]:
        nm = numa_maps_node_bytes((root / "proc" / str(pid) / "numa_maps").read_text())
        for node, mib in nst[pid].items():
            assert close(nm.get(node, 0), mib * MiB), (case, pid, node, nm, nst[pid])


def _inspect(root: Path, pid: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "numa_exporter", "inspect", str(pid), "--json",
         f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, f"inspect {pid} exited {proc.returncode}: {proc.stderr}"
    return dict(json.loads(proc.stdout))


@pytest.mark.parametrize("case", CASES)
def test_inspect_reports_kernel_bytes_and_ratio(case: str) -> None:
    """``numa-exporter inspect`` over the root: bytes per node equal numa_maps; ratio in range."""
    root = FIXTURES / case
    exp = _expected(case)
    for pid in exp["pids"]:
        got = _inspect(root, pid)
        per_node = {int(n): sum(kinds.values()) for n, kinds in got["memory_bytes"].items()}
        want = {int(n): v for n, v in exp["node_bytes"][str(pid)].items()}
        assert {n: v for n, v in per_node.items() if v} == want, (case, pid, per_node, want)
    lo, hi = exp["intended_remote_ratio"]
    ratio = _inspect(root, exp["pid"])["remote_ratio"]
    assert lo <= ratio <= hi, f"{case}: remote_ratio {ratio} not in [{lo}, {hi}]"
