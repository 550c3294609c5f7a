"""Patterns matched on comm where the resident size decides nothing (issue 14: the fixed
cost of a scan): the same name status shows, status read only for the processes kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from numa_exporter.parsers.pid_comm import parse_pid_comm
from numa_exporter.parsers.pid_status import parse_pid_status_name
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.process_files import StatusMemo, read_status
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.procfs import ProcFS

STATUS = (b"Name:\t%s\nTgid:\t7\nThreads:\t1\nVmRSS:\t  400 kB\nRssAnon:\t  400 kB\n"
          b"RssFile:\t0 kB\nRssShmem:\t0 kB\nHugetlbPages:\t0 kB\n")


@pytest.mark.parametrize(("comm", "status_name"), [
    (b"sshd\n", b"sshd"),
    (b"a\\b\n", b"a\\\\b"),  # status escapes a backslash
    (b"two\nlines\n", b"two\\nlines"),  # and a newline
    (b" pad\t\n", b" pad\t"),  # both strip the blanks around the name
    (b"\xff\x01x\n", b"\xff\x01x"),  # bytes that are not text: label_text on both
    (b"", b""),
])
def test_comm_reads_as_the_status_name(comm: bytes, status_name: bytes) -> None:
    assert parse_pid_comm(comm) == parse_pid_status_name(b"Name:\t" + status_name + b"\n")


def _tree(tmp_path: Path, statm: bytes, name: bytes) -> ProcFS:
    d = tmp_path / "7"
    d.mkdir()
    (d / "statm").write_bytes(statm)
    (d / "comm").write_bytes(name + b"\n")
    (d / "status").write_bytes(STATUS % name)
    (d / "cmdline").write_bytes(name + b"\0--flag\0")
    return ProcFS(tmp_path)


def _count_status(monkeypatch: pytest.MonkeyPatch, files: object) -> list[str]:
    read: list[str] = []
    real = files.status  # type: ignore[attr-defined]

    def status() -> bytes:
        read.append("status")
        return bytes(real())

    monkeypatch.setattr(files, "status", status)
    return read


def test_refused_name_stops_at_comm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _tree(tmp_path, b"1000 100 0 0 0 100 0\n", b"other").process(7)
    read = _count_status(monkeypatch, files)
    seen: list[str] = []
    assert read_status(files, 0, ErrorReporter(),
                       lambda n: bool(seen.append(n)) or n == "wanted") is None
    assert read == [] and seen == ["other"]


def test_kept_name_reads_status_once_and_asks_once(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    files = _tree(tmp_path, b"1000 100 0 0 0 100 0\n", b"wanted").process(7)
    read = _count_status(monkeypatch, files)
    seen: list[str] = []
    st = read_status(files, 0, ErrorReporter(), lambda n: bool(seen.append(n)) or True)
    assert st is not None and st.name == "wanted" and st.vm_rss == 400 * 1024
    assert read == ["status"] and seen == ["wanted"]


def test_no_mm_leaves_kernel_thread_to_status(tmp_path: Path) -> None:
    files = _tree(tmp_path, b"0 0 0 0 0 0 0\n", b"kworker/0:1").process(7)
    (tmp_path / "7" / "status").write_bytes(b"Name:\tkworker/0:1\nTgid:\t7\nKthread:\t1\n")
    st = read_status(files, 0, ErrorReporter(), lambda n: False)
    assert st is not None and st.kthread is True  # a kernel thread: not counted as skipped


def test_bad_statm_leaves_the_name_to_status(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    files = _tree(tmp_path, b"garbage\n", b"other").process(7)
    read = _count_status(monkeypatch, files)
    assert read_status(files, 0, ErrorReporter(), lambda n: n == "wanted") is None
    assert read == ["status"]


def test_unreadable_comm_leaves_the_name_to_status(tmp_path: Path) -> None:
    proc = _tree(tmp_path, b"1000 100 0 0 0 100 0\n", b"wanted")
    (tmp_path / "7" / "comm").unlink()
    st = read_status(proc.process(7), 0, ErrorReporter(), lambda n: n == "wanted")
    assert st is not None and st.name == "wanted"


live = pytest.mark.skipif(not ProcFS(Path("/proc")).is_live(), reason="needs a live procfs")
PR_SET_NAME = 15


@live
def test_live_comm_is_the_status_name_of_every_process() -> None:
    """On this host, every process with an mm, and one that names itself with a backslash
    and a newline (any user can), shows the same name in comm as in status."""
    name = b"x\\y\nz w"
    child = subprocess.Popen([sys.executable, "-c",
                              "import ctypes, sys\n"
                              f"ctypes.CDLL(None).prctl({PR_SET_NAME}, {name!r}, 0, 0, 0)\n"
                              "print('named', flush=True)\nsys.stdin.readline()\n"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"named\n"
        proc = ProcFS(Path("/proc"))
        compared = 0
        for pid in proc.pids():
            files = proc.process(pid)
            try:
                comm, status = files.comm(), files.status()
            except SourceError:
                continue  # exited meanwhile
            if b"\nVmRSS:" not in status:
                continue  # no mm: status decides for those
            assert parse_pid_comm(comm) == parse_pid_status_name(status), pid
            compared += 1
        assert compared >= 2
        assert parse_pid_comm(proc.process(child.pid).comm()) == parse_pid_status_name(
            proc.process(child.pid).status())
        assert "\\n" in parse_pid_comm(proc.process(child.pid).comm())
    finally:
        child.kill()
        child.wait()


def test_a_status_of_the_same_bytes_is_not_parsed_again(tmp_path: Path) -> None:
    """Issue 34 item 2 (the per-process fixed cost): with a memo, a status whose bytes did
    not change since the last scan gives the last parse back (the same object); changed
    bytes are parsed afresh, and a malformed line is counted at every read either way."""
    files = _tree(tmp_path, b"100 100 0 0 0 0 0\n", b"sleeper").process(7)
    memo: StatusMemo = {}
    errors = ErrorReporter()
    first = read_status(files, 0, errors, memo=memo)
    again = read_status(files, 0, errors, memo=memo)
    assert first is not None and again is first
    (tmp_path / "7" / "status").write_bytes((STATUS % b"sleeper").replace(b"400", b"800"))
    grown = read_status(files, 0, errors, memo=memo)
    assert grown is not None and grown is not first and grown.vm_rss == 800 * 1024
    (tmp_path / "7" / "status").write_bytes(STATUS % b"sleeper" + b"Threads:\tx\n")
    for _ in range(2):
        read_status(files, 0, errors, memo=memo)
    assert errors.parse_errors.get("status") == 2
