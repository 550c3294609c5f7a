"""Offline checks on the captured real-kernel roots (no QEMU): tests/fixtures/realkernel/
(Debian 6.1) and tests/fixtures/realkernel-6.12/ (Debian 6.12, the same scenarios where the
files differ between the generations).

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

BASE = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURES = BASE / "realkernel"
# case names are relative to BASE: "realkernel/<scenario>", "realkernel-6.12/<scenario>"
CASES = sorted(f"{d.parent.name}/{d.name}" for top in ("realkernel", "realkernel-6.12")
               for d in (BASE / top).glob("*") if (d / "expected.json").is_file())


def _expected(case: str) -> dict[str, Any]:
    return dict(json.loads((BASE / case / "expected.json").read_text()))


def test_fixture_roots_exist() -> None:
    """tools/refresh-fixtures has been run for both kernels (the roots are committed)."""
    old = [c for c in CASES if c.startswith("realkernel/")]
    new = [c for c in CASES if c.startswith("realkernel-6.12/")]
    assert len(old) >= 8, f"expected real-kernel fixture roots in {FIXTURES}, found {old}"
    assert len(new) >= 3, f"expected 6.12 fixture roots, found {new}"
    for case in new:
        assert _expected(case)["kernel"].startswith("6.12."), case


@pytest.mark.parametrize("case", CASES)
def test_root_is_complete(case: str) -> None:
    """Every file the exporter reads for a process and for the nodes is in the root."""
    root = BASE / case
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
    root = BASE / case
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
    root = BASE / case
    exp = _expected(case)
    for pid in exp["pids"]:
        got = _inspect(root, pid)
        per_node = {int(n): sum(kinds.values()) for n, kinds in got["memory_bytes"].items()}
        want = {int(n): v for n, v in exp["node_bytes"][str(pid)].items()}
        assert {n: v for n, v in per_node.items() if v} == want, (case, pid, per_node, want)
    lo, hi = exp["intended_remote_ratio"]
    ratio = _inspect(root, exp["pid"])["remote_ratio"]
    assert lo <= ratio <= hi, f"{case}: remote_ratio {ratio} not in [{lo}, {hi}]"


@pytest.mark.parametrize("scenario", ["membind_remote", "interleave", "balancing_on"])
def test_both_generations_print_the_numa_lines_the_exporter_reads(scenario: str) -> None:
    """The captures of the same scenario on 6.1 and 6.12: the vmstat NUMA counters the
    exporter exports keep their names (6.12 adds pgdemote_khugepaged), every task's sched has
    the NUMA lines parsed the same way, and numa_maps parses without an error on both."""
    from numa_exporter.parsers.numa_maps import parse_numa_maps
    from numa_exporter.parsers.pid_sched import parse_pid_sched
    from numa_exporter.parsers.vmstat import parse_vmstat

    roots = {k: BASE / top / scenario for k, top in (("6.1", "realkernel"),
                                                     ("6.12", "realkernel-6.12"))}
    numa = {k: set(parse_vmstat((r / "proc/vmstat").read_bytes()).numa_counters())
            for k, r in roots.items()}
    # the same names, but for the demotion counter 6.12 added (khugepaged demotes too)
    assert numa["6.1"] and numa["6.12"] - numa["6.1"] == {"pgdemote_khugepaged"}
    assert numa["6.1"] <= numa["6.12"], numa["6.1"] - numa["6.12"]
    keys = {k: set(parse_vmstat((r / "proc/vmstat").read_bytes()).values)
            for k, r in roots.items()}
    assert keys["6.1"] < keys["6.12"]  # 6.12 adds keys (pgdemote_khugepaged, ...)
    for k, r in roots.items():
        pid = _expected(f"{r.parent.name}/{scenario}")["pid"]
        for sched in (r / "proc" / str(pid) / "task").glob("*/sched"):
            got = parse_pid_sched(sched.read_bytes())
            assert got.error_count == 0 and got.numa_format != "absent", (k, sched)
            assert got.current_node is not None and set(got.numa_faults) == {0, 1}, (k, got)
        maps = (r / "proc" / str(pid) / "numa_maps").read_bytes()
        parsed = parse_numa_maps(maps.splitlines(keepends=True))
        assert parsed.error_count == 0 and parsed.mappings > 0, k
