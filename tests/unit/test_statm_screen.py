"""Screening by statm where no hugetlb page is in use (issue 14: the fixed cost of a scan)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.model.snapshot import HugePages, SystemSample
from numa_exporter.model.topology import build_topology
from numa_exporter.parsers.pid_statm import PidStatm, parse_pid_statm
from numa_exporter.readers import process_files
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.process_files import read_status
from numa_exporter.scan.scanner import no_hugetlb_in_use
from numa_exporter.sources.procfs import ProcFS

MiB = 1 << 20
STATUS = (b"Name:\tbig\nTgid:\t7\nUid:\t0\t0\t0\t0\nThreads:\t1\nVmRSS:\t  {rss} kB\n"
          b"RssAnon:\t  {rss} kB\nRssFile:\t0 kB\nRssShmem:\t0 kB\nHugetlbPages:\t0 kB\n")


def test_parse_statm() -> None:
    assert parse_pid_statm(b"1000 300 20 1 0 500 0\n") == PidStatm(1000, 300)
    assert parse_pid_statm(b"0 0 0 0 0 0 0\n") == PidStatm(0, 0)
    for bad in (b"", b"1 2 3", b"1 2 3 4 5 6 x", b"1 2 3 4 5 6 7 8", b"-1 2 3 4 5 6 7",
                b"1" * 21 + b" 2 3 4 5 6 7"):
        assert parse_pid_statm(bad) is None


def _proc(tmp_path: Path, statm: bytes | None, rss_kb: int) -> ProcFS:
    d = tmp_path / "7"
    d.mkdir()
    (d / "status").write_bytes(STATUS.replace(b"{rss}", str(rss_kb).encode()))
    if statm is not None:
        (d / "statm").write_bytes(statm)
    return ProcFS(tmp_path)


def test_small_processes_stop_at_statm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _proc(tmp_path, b"1000 10 0 0 0 10 0\n", 40)
    files = proc.process(7)
    read: list[str] = []
    real = files.status

    def status() -> bytes:
        read.append("status")
        return real()

    monkeypatch.setattr(files, "status", status)
    assert read_status(files, 64 * MiB, ErrorReporter(), statm=True) is None
    assert read == []  # decided by statm
    assert read_status(files, 64 * MiB, ErrorReporter(), statm=False) is None
    assert read == ["status"]


KTHREAD_STATUS = b"Name:\tkworker/0:1\nUmask:\t0000\nState:\tI (idle)\nTgid:\t7\nKthread:\t1\n"
ZOMBIE_LEADER_STATUS = b"Name:\tleader\nState:\tZ (zombie)\nTgid:\t7\nKthread:\t0\n"


@pytest.mark.parametrize(("status", "kthread"), [(KTHREAD_STATUS, True),
                                                 (ZOMBIE_LEADER_STATUS, False)])
def test_statm_without_an_mm_leaves_kernel_thread_or_zombie_leader_to_status(
        tmp_path: Path, status: bytes, kthread: bool) -> None:
    """A statm of size 0 is a kernel thread or a process whose main thread exited (issue 15
    #7): status's Kthread line tells them apart, so the zombie leader is not passed over."""
    files = _proc(tmp_path, b"0 0 0 0 0 0 0\n", 0).process(7)
    (tmp_path / "7" / "status").write_bytes(status)
    st = read_status(files, 64 * MiB, ErrorReporter(), statm=True)
    assert st is not None and st.vm_rss is None
    assert st.kthread is kthread


@pytest.mark.parametrize("statm", [None, b"garbage\n"])
def test_missing_or_bad_statm_leaves_it_to_status(tmp_path: Path, statm: bytes | None
                                                  ) -> None:
    files = _proc(tmp_path, statm, 128 * 1024).process(7)
    st = read_status(files, 64 * MiB, ErrorReporter(), statm=True)
    assert st is not None and st.vm_rss == 128 * MiB


def test_big_by_statm_is_read_from_status(tmp_path: Path) -> None:
    files = _proc(tmp_path, b"40000 33000 0 0 0 33000 0\n", 132_000).process(7)
    st = read_status(files, 64 * MiB, ErrorReporter(), statm=True)
    assert st is not None and st.vm_rss == 132_000 * 1024 and st.name == "big"
    assert process_files.PAGE_SIZE > 0


def _system(free: int | None) -> SystemSample:
    topo = build_topology(None, {0: frozenset({0}), 1: frozenset({1})}, {})
    return SystemSample(topology=topo, hugepages={
        n: {2048: HugePages(4, free, 0)} for n in topo.nodes})


def test_statm_screening_only_where_no_hugetlb_page_is_in_use() -> None:
    assert no_hugetlb_in_use(_system(4))
    assert not no_hugetlb_in_use(_system(3))  # one page in use somewhere
    assert not no_hugetlb_in_use(_system(None))  # unreadable: not known
    assert not no_hugetlb_in_use(SystemSample())  # not read at all


def _statm_by_split(data: bytes) -> PidStatm | None:
    """The split-and-isdigit reading of a statm line the compiled pattern replaced."""
    fields = data.split()
    if len(fields) != 7 or not all(0 < len(f) <= 20 and f.isdigit() for f in fields):
        return None
    return PidStatm(int(fields[0]), int(fields[1]))


@given(st.lists(st.sampled_from([b"0", b"7", b"12", b"1" * 20, b"1" * 21, b" ", b"\t", b"\n",
                                 b"\v", b"-", b"+", b"x", b"\xd9\xa3", b"1_0", b"\x1c"]),
                max_size=24).map(b"".join))
@settings(max_examples=3000)
def test_statm_pattern_reads_as_split_did(data: bytes) -> None:
    assert parse_pid_statm(data) == _statm_by_split(data)

