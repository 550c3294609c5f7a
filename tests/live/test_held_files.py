"""Small per-process files read through held descriptors (issue 14: the fixed cost of a scan).

A held descriptor must never serve what a fresh open would not: a process's memory growing
shows at the next read, and a reaped process reads as gone.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from numa_exporter.parsers.pid_statm import parse_pid_statm
from numa_exporter.sources.errors import Gone
from numa_exporter.sources.held import HeldFiles
from numa_exporter.sources.procfs import ProcFS

PROC = Path("/proc")
CHILD = ("import sys\n"
         "sys.stdin.readline()\n"
         "b = bytearray(64 << 20)\n"
         "for i in range(0, len(b), 4096): b[i] = 1\n"
         "print('grown', flush=True)\n"
         "sys.stdin.readline()\n")

live = pytest.mark.skipif(not ProcFS(PROC).is_live(), reason="needs a live procfs")


@live
def test_held_read_follows_the_process_and_ends_gone() -> None:
    proc = ProcFS(PROC)
    assert proc.hold_files()
    assert proc.held is not None
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        files = proc.process(child.pid)
        before = parse_pid_statm(files.statm())
        assert before is not None
        assert len(proc.held) == 1  # the descriptor is kept
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "grown\n"
        after = parse_pid_statm(proc.process(child.pid).statm())
        assert after is not None
        assert after.resident_pages - before.resident_pages >= (60 << 20) // 4096
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(10)
        with pytest.raises(Gone):  # reaped: ESRCH on the held descriptor, ENOENT on reopen
            files.statm()
        assert proc.held.reopened == 1
        assert len(proc.held) == 0
    finally:
        child.kill()
        child.wait()


@live
def test_retain_closes_what_is_no_longer_listed() -> None:
    held = HeldFiles(lambda: 8)
    held.read(1, "/proc/self/statm", "statm", whole=True)
    held.read(2, "/proc/self/status", "status", whole=True)
    held.retain(frozenset({2}))
    assert len(held) == 1
    held.close()
    assert len(held) == 0


@live
def test_budget_bounds_the_descriptors_held() -> None:
    held = HeldFiles(lambda: 1)
    a = held.read(1, "/proc/self/statm", "statm", whole=True)
    b = held.read(1, "/proc/self/stat", "stat")
    assert parse_pid_statm(a) is not None
    assert b.startswith(b"%d (" % os.getpid())  # read and closed: over the budget
    assert len(held) == 1
    held.close()


def test_fixture_trees_are_read_by_path(tmp_path: Path) -> None:
    d = tmp_path / "7"
    d.mkdir()
    (d / "statm").write_bytes(b"10 5 0 0 0 5 0\n")
    proc = ProcFS(tmp_path)
    assert not proc.hold_files()  # a replaced or deleted fixture file must be seen as such
    files = proc.process(7)
    assert files.statm() == b"10 5 0 0 0 5 0\n"
    (d / "statm").unlink()
    (d / "statm").write_bytes(b"10 6 0 0 0 5 0\n")
    assert files.statm() == b"10 6 0 0 0 5 0\n"


@live
def test_long_cmdline_is_read_whole_through_a_held_descriptor() -> None:
    """A command line longer than one read (32 KiB) comes whole, as by path."""
    arg = "a" * 100_000
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; print('up', flush=True); sys.stdin.readline()", arg],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        proc = ProcFS(PROC)
        assert proc.hold_files()
        first = proc.process(child.pid).cmdline()
        again = proc.process(child.pid).cmdline()  # through the held descriptor
        assert first == again == Path(f"/proc/{child.pid}/cmdline").read_bytes()
        assert first.endswith(arg.encode() + b"\0")
    finally:
        child.kill()
        child.wait()


@live
def test_dropped_holder_closes_its_descriptors() -> None:
    held = HeldFiles(lambda: 8)
    held.read(os.getpid(), "/proc/self/statm", "statm", whole=True)
    fd = next(iter(held._fds.values()))[1]
    os.fstat(fd)  # open
    del held
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)
