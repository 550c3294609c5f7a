"""Parsers are total: any bytes give a result (errors counted), in bounded work."""

from __future__ import annotations

import hashlib

from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.memory_numa_stat import parse_memory_numa_stat
from numa_exporter.parsers.node_distance import parse_node_distance
from numa_exporter.parsers.node_meminfo import parse_node_meminfo
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.parsers.proc_cgroup import parse_proc_cgroup
from numa_exporter.parsers.vmstat import parse_vmstat

STAT_TAIL = b" S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 " \
            b"29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50\n"


def test_superscript_digit_in_cpus_allowed_list_is_an_error_not_a_raise() -> None:
    st = parse_pid_status(b"Name:\tx\nCpus_allowed_list:\t\xc2\xb2\nVmRSS:\t4 kB\n")
    assert st.cpus_allowed is None
    assert st.error_count == 1
    assert st.vm_rss == 4096


def test_non_ascii_digits_are_not_numbers() -> None:
    # Arabic-Indic three: str.isdigit() and int() accept it; the kernel never prints it
    assert parse_cpulist("\u0663") is None
    assert parse_cpulist(b"\xd9\xa3") is None
    st = parse_pid_status("Tgid:\t\u0663\nVmRSS:\t\u0663 kB\n".encode())
    assert st.tgid is None and st.vm_rss is None and st.error_count == 2
    assert parse_vmstat("numa_hit \u0663\n".encode()).error_count == 1


def test_cpu_ids_above_nr_cpus_are_errors() -> None:
    assert parse_cpulist(b"0-8191") == frozenset(range(8192))
    assert parse_cpulist(b"8192") is None
    assert parse_cpulist(b"0-65536") is None
    assert parse_cpulist(b"0-" + b"9" * 5000) is None  # beyond int()'s digit limit


def test_node_ids_above_max_numnodes_are_errors() -> None:
    st = parse_pid_status(b"Mems_allowed_list:\t0-1024\nCpus_allowed_list:\t0-1024\n")
    assert st.mems_allowed is None
    assert st.cpus_allowed == frozenset(range(1025))
    assert st.error_count == 1


def test_many_wide_ranges_are_cheap_and_bounded() -> None:
    """Ten thousand 0-8191 ranges: the same ids, no per-id loop (old code: seconds)."""
    assert parse_cpulist(b"0-8191," * 9000 + b"0") == frozenset(range(8192))
    assert parse_cpulist(b"0-65536," * 10000) is None


def test_underscores_and_signs_are_not_numbers() -> None:
    # int() accepts "1_000", "+5" and " 7 "; the kernel prints none of them
    assert parse_pid_stat(b"12 (x)" + STAT_TAIL.replace(b" 13 ", b" 1_3 ")) is None
    assert parse_pid_stat(b"+12 (x)" + STAT_TAIL) is None
    assert parse_cpulist(b"+1") is None
    assert parse_cpulist(b"1_0") is None


def test_huge_numbers_in_stat_do_not_raise() -> None:
    assert parse_pid_stat(b"12 (x)" + STAT_TAIL.replace(b" 13 ", b" " + b"9" * 5000 + b" "))\
        is None


def marked(shown: str, raw: bytes) -> str:
    """The label a changed name gets: its escaped text, "~#" and 80 bits of BLAKE2b."""
    return shown + "~#" + hashlib.blake2b(raw, digest_size=10).hexdigest()


def test_stat_comm_with_undecodable_bytes_is_escaped() -> None:
    st = parse_pid_stat(b"12 (bad\xff\xfe)" + STAT_TAIL)
    assert st is not None
    assert st.comm == marked("bad\\xff\\xfe", b"bad\xff\xfe")
    st.comm.encode("utf-8")


def test_stat_comm_with_control_characters_and_parens() -> None:
    st = parse_pid_stat(b"12 (a) b\n\x1bc)" + STAT_TAIL)
    assert st is not None and st.comm == marked("a) b\\x0a\\x1bc", b"a) b\n\x1bc")
    assert st.utime == 11 and st.starttime == 19 and st.processor == 36


def test_status_name_with_undecodable_bytes_is_escaped() -> None:
    st = parse_pid_status(b"Name:\tbad\xff\xfe\nVmRSS:\t81920 kB\n")
    assert st.name == marked("bad\\xff\\xfe", b"bad\xff\xfe")
    assert st.vm_rss == 81920 * 1024


def test_negative_counters_are_errors() -> None:
    vm = parse_vmstat(b"numa_hit -5\nnuma_miss 7\n")
    assert vm.values == {"numa_miss": 7} and vm.error_count == 1
    mi = parse_node_meminfo(b"Node 0 MemFree: -4 kB\nNode 0 MemTotal: 8 kB\n")
    assert mi.bytes == {"MemTotal": 8192} and mi.error_count == 1


def test_vmstat_names_are_ascii_metric_name_parts() -> None:
    # "é" is alphanumeric to str.isalnum(); it would make an invalid metric name
    vm = parse_vmstat("numa_é 1\nnuma_hit 2\n".encode())
    assert vm.values == {"numa_hit": 2} and vm.error_count == 1


def test_node_meminfo_field_names_are_ascii() -> None:
    mi = parse_node_meminfo("Node 0 Mem\u00e9: 1 kB\nNode x MemFree: 1 kB\n"
                            "Node 0 Active(anon): 2 kB\n".encode())
    assert mi.bytes == {"Active(anon)": 2048} and mi.error_count == 2


def test_distance_rows_are_bounded() -> None:
    assert parse_node_distance(b"10 20\n") == (10, 20)
    assert parse_node_distance(b"10 " * 1025) is None
    assert parse_node_distance("10 \u0663".encode()) is None


def test_memory_numa_stat_node_ids_are_bounded() -> None:
    ns = parse_memory_numa_stat(b"anon N0=4096 N1024=4096\nfile N0=8192\n")
    assert ns.nodes == {"file": {0: 8192}} and ns.error_count == 1


def test_cgroup_paths_keep_undecodable_bytes_for_opening_them() -> None:
    cg = parse_proc_cgroup(b"0::/user.slice/bad\xff.scope\n")
    assert cg.v2_path is not None
    assert cg.v2_path.encode("utf-8", "surrogateescape") == b"/user.slice/bad\xff.scope"
    assert cg.unit == "bad\udcff.scope"
