"""Small parsers on files captured from real kernels (tests/fixtures/realkernel, cgroup/real).

Every expected value below was read off the fixture file by eye; none is computed.
"""

from __future__ import annotations

from pathlib import Path

from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.memory_numa_stat import parse_memory_numa_stat
from numa_exporter.parsers.memory_stat import parse_memory_stat
from numa_exporter.parsers.node_distance import parse_node_distance
from numa_exporter.parsers.node_meminfo import parse_node_meminfo
from numa_exporter.parsers.numa_balancing import parse_numa_balancing, parse_sysctl_int
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.parsers.proc_cgroup import parse_proc_cgroup
from numa_exporter.parsers.proc_stat import parse_btime
from numa_exporter.parsers.vmstat import parse_vmstat

FIX = Path(__file__).resolve().parents[1] / "fixtures"
LOCAL = FIX / "realkernel" / "local"
NODE = LOCAL / "sys" / "devices" / "system" / "node"
CPUSET = FIX / "realkernel" / "cgroup_cpuset"
REAL_CG = FIX / "cgroup" / "real"


def _read(p: Path) -> bytes:
    return p.read_bytes()


def test_status_of_a_bound_process() -> None:
    st = parse_pid_status(_read(LOCAL / "proc" / "132" / "status"))
    assert st.error_count == 0
    assert st.name == "rkwork"
    assert (st.tgid, st.uid, st.threads) == (132, 0, 1)
    assert st.vm_rss == 132456 * 1024
    assert st.rss_anon == 130968 * 1024
    assert st.rss_file == 1488 * 1024
    assert st.rss_shmem == 0
    assert st.hugetlb == 0
    assert st.cpus_allowed == frozenset({1})
    assert st.mems_allowed == frozenset({0, 1})


def test_status_of_a_cpuset_bound_process_and_hugetlb() -> None:
    st = parse_pid_status(_read(CPUSET / "proc" / "164" / "status"))
    assert st.error_count == 0
    assert (st.tgid, st.vm_rss) == (164, 132316 * 1024)
    assert st.cpus_allowed == frozenset({0})
    assert st.mems_allowed == frozenset({1})
    huge = next((FIX / "realkernel" / "hugetlb_remote" / "proc").glob("[0-9]*/status"))
    assert parse_pid_status(_read(huge)).hugetlb == 65536 * 1024


def test_stat_of_a_process() -> None:
    st = parse_pid_stat(_read(LOCAL / "proc" / "132" / "stat"))
    assert st is not None
    assert (st.pid, st.comm, st.state, st.ppid) == (132, "rkwork", "S", 124)
    assert (st.utime, st.stime, st.num_threads, st.starttime) == (10, 68, 1, 997)
    assert st.processor == 1


def test_stat_of_a_thread() -> None:
    """A thread's exit_signal (field 38) is -1; its last CPU is field 39."""
    st = parse_pid_stat(_read(FIX / "realkernel" / "split_threads" / "proc" / "150" / "task"
                              / "151" / "stat"))
    assert st is not None
    assert (st.pid, st.ppid, st.utime, st.stime) == (151, 124, 1, 38)
    assert (st.num_threads, st.starttime, st.processor) == (3, 2224, 0)


def test_proc_stat_btime() -> None:
    assert parse_btime(_read(LOCAL / "proc" / "stat")) == 1796231614


def test_numa_balancing_sysctls() -> None:
    kernel = LOCAL / "proc" / "sys" / "kernel"
    assert parse_numa_balancing(_read(kernel / "numa_balancing")) == 0
    assert parse_sysctl_int(_read(kernel / "numa_balancing_promote_rate_limit_MBps")) == 65536


def test_proc_vmstat() -> None:
    vm = parse_vmstat(_read(LOCAL / "proc" / "vmstat"))
    assert vm.error_count == 0 and vm.first_error_line is None
    assert len(vm.values) == 173  # one per line of the file
    assert vm.values["nr_free_pages"] == 450266
    assert vm.numa_counters()["numa_hit"] == 84518
    assert vm.values["numa_interleave"] == 627
    assert vm.values["numa_local"] == 50031
    assert vm.values["numa_other"] == 34487
    assert vm.values["numa_pte_updates"] == 512
    assert vm.values["numa_pages_migrated"] == 0
    assert "nr_free_pages" not in vm.numa_counters()


def test_node_numastat() -> None:
    ns = parse_vmstat(_read(NODE / "node1" / "numastat"))
    assert ns.error_count == 0
    assert ns.values == {"numa_hit": 72348, "numa_miss": 0, "numa_foreign": 0,
                         "interleave_hit": 270, "local_node": 38143, "other_node": 34205}


def test_node_meminfo() -> None:
    mi = parse_node_meminfo(_read(NODE / "node1" / "meminfo"))
    assert mi.error_count == 0
    assert len(mi.bytes) == 33 and len(mi.counts) == 3
    assert mi.bytes["MemTotal"] == 1031588 * 1024
    assert mi.bytes["MemFree"] == 872976 * 1024
    assert mi.bytes["Inactive(anon)"] == 131872 * 1024
    assert mi.bytes["AnonPages"] == 131912 * 1024
    assert mi.bytes["FileHugePages"] == 0
    assert mi.counts == {"HugePages_Total": 0, "HugePages_Free": 0, "HugePages_Surp": 0}


def test_node_distance() -> None:
    assert parse_node_distance(_read(NODE / "node0" / "distance")) == (10, 20)
    assert parse_node_distance(_read(NODE / "node1" / "distance")) == (20, 10)


def test_cpulists() -> None:
    assert parse_cpulist(_read(NODE / "node0" / "cpulist")) == frozenset({0})
    assert parse_cpulist(_read(NODE / "node1" / "cpulist")) == frozenset({1})
    assert parse_cpulist(_read(NODE / "online")) == frozenset({0, 1})
    assert parse_cpulist(_read(NODE / "possible")) == frozenset({0, 1})
    assert parse_cpulist(_read(LOCAL / "sys" / "devices" / "system" / "cpu" / "online")) \
        == frozenset({0, 1})


def test_proc_cgroup_v2_and_hybrid() -> None:
    v2 = parse_proc_cgroup(_read(CPUSET / "proc" / "164" / "cgroup"))
    assert (v2.v2_path, v2.v1_paths, v2.error_count) == ("/rk-cpuset", {}, 0)
    assert v2.unit is None
    hy = parse_proc_cgroup(_read(REAL_CG / "hybrid-proc-self-cgroup"))
    assert hy.error_count == 0
    assert hy.v2_path == "/"
    assert hy.v1_paths == {
        "name=systemd": "/", "pids": "/", "blkio": "/", "freezer": "/", "devices": "/",
        "memory": "/process_api/b14a196b958a561607a4018321822ee4", "cpuset": "/",
        "cpuacct": "/", "cpu": "/"}
    assert hy.path_for("memory") == "/process_api/b14a196b958a561607a4018321822ee4"
    assert hy.path_for("hugetlb") == "/"


def test_memory_stat_v2_and_v1() -> None:
    v2 = parse_memory_stat(_read(CPUSET / "sys" / "fs" / "cgroup" / "rk-cpuset" / "memory.stat"))
    assert v2.error_count == 0 and len(v2.values) == 51
    assert v2.values["anon"] == 134328320
    assert v2.values["file"] == 4096
    assert v2.values["kernel"] == 327680
    assert v2.values["pagetables"] == 299008
    assert v2.numa_balancing_counters() == {}  # this kernel prints none
    v1 = parse_memory_stat(_read(REAL_CG / "v1-child-memory.stat"))
    assert v1.error_count == 0 and len(v1.values) == 42
    assert v1.values["cache"] == 25149440
    assert v1.values["rss"] == 1933312
    assert v1.values["mapped_file"] == 122880
    assert v1.values["workingset_refault_file"] == 15393
    assert v1.values["hierarchical_memory_limit"] == 9223372036854771712


def test_memory_numa_stat_v2() -> None:
    ns = parse_memory_numa_stat(
        _read(CPUSET / "sys" / "fs" / "cgroup" / "rk-cpuset" / "memory.numa_stat"))
    assert (ns.version, ns.in_pages, ns.error_count) == (2, False, 0)
    assert len(ns.nodes) == 27
    assert ns.nodes["anon"] == {0: 0, 1: 134328320}
    assert ns.nodes["file"] == {0: 0, 1: 4096}
    assert ns.nodes["pagetables"] == {0: 0, 1: 299008}
    assert ns.nodes["slab_unreclaimable"] == {0: 2176, 1: 5440}
    assert "workingset_refault_file" in ns.nodes
    assert "workingset_refault_file" not in ns.amounts()  # an event count, not memory
    assert ns.node_ids() == frozenset({0, 1})


def test_memory_numa_stat_v1_in_pages() -> None:
    ns = parse_memory_numa_stat(_read(REAL_CG / "v1-child-memory.numa_stat"))
    assert (ns.version, ns.in_pages, ns.error_count) == (1, True, 0)
    assert ns.totals == {"total": 6585, "file": 6139, "anon": 446, "unevictable": 0,
                         "hierarchical_total": 6585, "hierarchical_file": 6139,
                         "hierarchical_anon": 446, "hierarchical_unevictable": 0}
    assert ns.nodes["anon"] == {0: 446}
    assert ns.in_bytes(4096).nodes["file"] == {0: 6139 * 4096}
