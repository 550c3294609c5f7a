"""A process whose CPU clock has not moved since its last complete thread reading keeps that
reading without one thread file being opened; anything else reads the threads as before."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources import threads as threads_mod
from numa_exporter.sources.errors import ReadFailed

PID = 139  # two_node: numatouch, one thread on CPU 0 (node 0); no schedstat in the capture


def _set_stat(task: Path, tid: int, *, cpu: int, utime: int, state: str = "S") -> None:
    stat = task / str(tid) / "stat"
    head, _, rest = stat.read_text().partition(") ")
    fields = rest.split()
    fields[3 - 3] = state
    fields[14 - 3] = str(utime)
    fields[39 - 3] = str(cpu)
    stat.unlink()  # the capture's files may be hard links shared with other tests
    stat.write_text(f"{head}) " + " ".join(fields) + "\n")
    # a thread that ran on ``cpu`` was allowed there: its mask says so too
    status = task / str(tid) / "status"
    text = re.sub(r"\nCpus_allowed_list:\t[^\n]*", "\nCpus_allowed_list:\t0-1",
                  status.read_text())
    status.unlink()
    status.write_text(text)


class Clocks:
    """A stand-in process CPU clock: ns by pid, None for an unknown pid."""

    def __init__(self) -> None:
        self.ns: dict[int, int] = {}
        self.fail = False

    def __call__(self, pid: int) -> int | None:
        if self.fail:
            raise ReadFailed("cpu_clock", f"clock of pid {pid}", OSError(5, "I/O error"))
        return self.ns.get(pid)


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[Scanner, Clocks, Path, list[str]]:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    scanner = Scanner(fixture_config(root))
    clocks = Clocks()
    scanner.reader.cpu_clock = clocks
    opened: list[str] = []
    real = threads_mod.TaskDir.read

    def spy(self: threads_mod.TaskDir, rel: str, source: str) -> bytes:
        if self.pid == PID:
            opened.append(rel)
        return real(self, rel, source)

    monkeypatch.setattr(threads_mod.TaskDir, "read", spy)
    return scanner, clocks, root / "proc" / str(PID) / "task", opened


def _sample(scanner: Scanner) -> tuple[dict[int, int], frozenset[int]]:
    (p,) = [p for p in scanner.scan().processes if p.pid == PID]
    return p.threads_by_node, p.home.nodes


def test_unmoved_clock_keeps_the_reading_without_opening_a_thread_file(
        setup: tuple[Scanner, Clocks, Path, list[str]]) -> None:
    scanner, clocks, task, opened = setup
    clocks.ns[PID] = 1_000
    assert _sample(scanner) == ({0: 1}, frozenset({0}))
    assert opened  # the first reading reads the thread
    opened.clear()
    # the files change, but the clock says no thread was on a CPU: only its mask is read
    # (a mask changes while a thread sleeps), no stat, schedstat or sched
    _set_stat(task, PID, cpu=1, utime=999)
    assert _sample(scanner) == ({0: 1}, frozenset({0}))
    assert opened == [f"{PID}/status"]
    # once the clock moves, the thread is read again and its new CPU shows
    clocks.ns[PID] = 2_000
    assert _sample(scanner)[0] == {1: 1}
    assert opened


def test_without_a_clock_every_scan_reads_the_threads(
        setup: tuple[Scanner, Clocks, Path, list[str]]) -> None:
    scanner, _clocks, task, opened = setup  # no clock value for the pid: unknown
    _sample(scanner)
    opened.clear()
    _set_stat(task, PID, cpu=1, utime=999)
    assert _sample(scanner)[0] == {1: 1}
    assert opened


def test_a_thread_waiting_for_a_cpu_is_read_again_though_the_clock_stands(
        setup: tuple[Scanner, Clocks, Path, list[str]]) -> None:
    # a runnable thread can be moved to another CPU's queue before it runs
    scanner, clocks, task, opened = setup
    clocks.ns[PID] = 1_000
    _set_stat(task, PID, cpu=0, utime=16, state="R")
    _sample(scanner)
    opened.clear()
    _set_stat(task, PID, cpu=1, utime=16, state="R")
    assert _sample(scanner)[0] == {1: 1}
    assert opened


def test_a_clock_error_is_counted_and_the_threads_are_read(
        setup: tuple[Scanner, Clocks, Path, list[str]]) -> None:
    scanner, clocks, task, opened = setup
    clocks.ns[PID] = 1_000
    _sample(scanner)
    clocks.fail = True
    opened.clear()
    _set_stat(task, PID, cpu=1, utime=999)
    snap = scanner.scan()
    (p,) = [p for p in snap.processes if p.pid == PID]
    assert p.threads_by_node == {1: 1}
    assert opened
    assert any(key[0] == "cpu_clock" for key in snap.stats.read_errors)
