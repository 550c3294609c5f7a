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

from .results import MiB, close, kernel_page_bytes, numa_maps_node_bytes, numastat_by_pid_mib

BASE = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURES = BASE / "realkernel"
# case names are relative to BASE: "realkernel/<scenario>", "realkernel-6.12/<scenario>"
#: the capture folder of each kernel generation (6.1 the full set, the others three scenarios)
TOPS = {"5.10": "realkernel-5.10", "6.1": "realkernel", "6.12": "realkernel-6.12",
        "7.3": "realkernel-7.3"}
CASES = sorted(f"{d.parent.name}/{d.name}" for top in TOPS.values()
               for d in (BASE / top).glob("*") if (d / "expected.json").is_file())


def _expected(case: str) -> dict[str, Any]:
    return dict(json.loads((BASE / case / "expected.json").read_text()))


def test_fixture_roots_exist() -> None:
    """tools/refresh-fixtures has been run for every kernel (the roots are committed)."""
    old = [c for c in CASES if c.startswith("realkernel/")]
    assert len(old) >= 8, f"expected real-kernel fixture roots in {FIXTURES}, found {old}"
    for generation in ("5.10", "6.12", "7.3"):
        new = [c for c in CASES if c.startswith(f"{TOPS[generation]}/")]
        assert len(new) >= 3, f"expected {generation} fixture roots, found {new}"
        for case in new:
            assert _expected(case)["kernel"].startswith(f"{generation}."), case


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
    """``numa-exporter inspect`` over the root: bytes per node equal numa_maps' but for the
    kernel pages 7.x maps into every process ([vvar]: not the process's memory); ratio in
    range."""
    root = BASE / case
    exp = _expected(case)
    for pid in exp["pids"]:
        got = _inspect(root, pid)
        per_node = {int(n): sum(kinds.values()) for n, kinds in got["memory_bytes"].items()}
        kernel = kernel_page_bytes((root / "proc" / str(pid) / "numa_maps").read_text())
        want = {int(n): v - kernel.get(int(n), 0)
                for n, v in exp["node_bytes"][str(pid)].items()}
        want = {n: v for n, v in want.items() if v}
        assert {n: v for n, v in per_node.items() if v} == want, (case, pid, per_node, want)
    lo, hi = exp["intended_remote_ratio"]
    ratio = _inspect(root, exp["pid"])["remote_ratio"]
    assert lo <= ratio <= hi, f"{case}: remote_ratio {ratio} not in [{lo}, {hi}]"


#: vmstat NUMA counters (numa_*, pgmigrate_*, thp_migration_*, pgpromote_*, pgdemote_*) each
#: generation prints beyond 6.1's, and those of 6.1 it lacks, read off the captures: 5.10
#: predates memory tiering (5.18) and demotion counters; 6.12 adds khugepaged's demotions;
#: 7.3 adds proactive reclaim's demotions and the promotion candidates that ignore the rate
#: limit (pgpromote_candidate_nrl)
NUMA_KEYS_VS_61 = {
    "5.10": (set(), {"pgdemote_direct", "pgdemote_kswapd", "pgpromote_candidate",
                     "pgpromote_success"}),
    "6.1": (set(), set()),
    "6.12": ({"pgdemote_khugepaged"}, set()),
    "7.3": ({"pgdemote_khugepaged", "pgdemote_proactive", "pgpromote_candidate_nrl"}, set()),
}


@pytest.mark.parametrize("scenario", ["membind_remote", "interleave", "balancing_on"])
def test_every_generation_prints_the_numa_lines_the_exporter_reads(scenario: str) -> None:
    """The captures of the same scenario on 5.10, 6.1, 6.12 and 7.3: the vmstat NUMA counters
    the exporter exports keep their names (each generation adds or lacks only the ones listed
    above), every task's sched has the NUMA lines parsed the same way, numa_maps parses
    without an error and its bytes per node match the capture's, and the node vmstat and
    numastat files parse."""
    from numa_exporter.parsers.numa_maps import parse_numa_maps
    from numa_exporter.parsers.pid_sched import parse_pid_sched
    from numa_exporter.parsers.vmstat import parse_vmstat

    roots = {k: BASE / top / scenario for k, top in TOPS.items()}
    numa = {k: set(parse_vmstat((r / "proc/vmstat").read_bytes()).numa_counters())
            for k, r in roots.items()}
    for k in roots:
        added, lacking = NUMA_KEYS_VS_61[k]
        assert numa[k] - numa["6.1"] == added and numa["6.1"] - numa[k] == lacking, k
    for k, r in roots.items():
        case = f"{r.parent.name}/{scenario}"
        pid = _expected(case)["pid"]
        for sched in (r / "proc" / str(pid) / "task").glob("*/sched"):
            got = parse_pid_sched(sched.read_bytes())
            assert got.error_count == 0 and got.numa_format != "absent", (k, sched)
            assert got.current_node is not None and set(got.numa_faults) == {0, 1}, (k, got)
        maps = (r / "proc" / str(pid) / "numa_maps").read_bytes()
        parsed = parse_numa_maps(maps.splitlines(keepends=True))
        assert parsed.error_count == 0 and parsed.mappings > 0, k
        for node in (0, 1):
            for name in ("vmstat", "numastat"):
                got_v = parse_vmstat((r / f"sys/devices/system/node/node{node}/{name}")
                                     .read_bytes())
                assert got_v.values and got_v.error_count == 0, (k, node, name)


def test_vmstat_families_stay_within_the_series_budget_on_every_generation() -> None:
    """The pattern families one per vmstat field (numa_vmstat_<field>_total) and per node
    vmstat promotion/demotion field (numa_node_vmstat_<field>_total) stay within the bounds
    the series budget gives them on every captured kernel (7.3 prints 23 and 7 such fields,
    6.12 21 and 5)."""
    from numa_exporter.collectors.tiers import NODE_VMSTAT
    from numa_exporter.collectors.vmstat import FIELD
    from numa_exporter.parsers.vmstat import parse_vmstat
    from numa_exporter.readers.tiers import NODE_VMSTAT_PREFIXES

    bound = dict(FIELD.bounds)["<field>"], dict(NODE_VMSTAT.bounds)["<field>"]
    for k, top in TOPS.items():
        r = BASE / top / "membind_remote"
        fields = len(parse_vmstat((r / "proc/vmstat").read_bytes()).numa_counters())
        node = {f for f in parse_vmstat((r / "sys/devices/system/node/node0/vmstat")
                                        .read_bytes()).values
                if f.startswith(NODE_VMSTAT_PREFIXES)}
        assert fields <= bound[0] and len(node) <= bound[1], (k, fields, sorted(node), bound)
