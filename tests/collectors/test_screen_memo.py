"""A process screened out stays out without its files being read while its CPU clock
stands; a move of the clock, an error or a new config screens it again."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.scan import select as select_mod
from numa_exporter.scan.scanner import Scanner
from numa_exporter.scan.select import MEMO_MAX_AGE, Outcomes, ScreenMemo
from numa_exporter.sources.errors import ReadFailed
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

# two_node: 130, 139, 159, 168 numatouch (~257 MiB); 161 numatouch (928 KiB); 300 splitter;
# 301 policies; 2 kthreadd (a kernel thread); 302 has no status file (an error each read)
PIDS = (130, 139, 159, 161, 168, 2, 300, 301, 302, 303, 304)


def _rename(proc: Path, pid: int, name: str) -> None:
    status = proc / str(pid) / "status"
    text = status.read_text().replace("Name:\tnumatouch", f"Name:\t{name}", 1)
    status.unlink()  # the capture's files may be hard links shared with other tests
    status.write_text(text)
    stat = proc / str(pid) / "stat"
    text = stat.read_text().replace("(numatouch)", f"({name})", 1)
    stat.unlink()
    stat.write_text(text)
    comm = proc / str(pid) / "comm"  # the kernel shows the one name in all three
    comm.unlink(missing_ok=True)
    comm.write_text(f"{name}\n")


@pytest.fixture()
def scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[Scanner, dict[int, int], Path, list[int]]:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    cfg = fixture_config(root,
                         include=re.compile("^splitter$"))
    scanner = Scanner(cfg)
    clocks = {pid: 1_000 + pid for pid in PIDS}
    scanner.reader.cpu_clock = clocks.get
    reads: list[int] = []
    real_status, real_comm = ProcessFiles.status, ProcessFiles.comm

    def spy(self: ProcessFiles) -> bytes:
        reads.append(self.pid)
        return real_status(self)

    def spy_comm(self: ProcessFiles) -> bytes:  # where the size decides nothing, patterns
        reads.append(self.pid)  # are matched on comm before status
        return real_comm(self)

    monkeypatch.setattr(ProcessFiles, "status", spy)
    monkeypatch.setattr(ProcessFiles, "comm", spy_comm)
    return scanner, clocks, root / "proc", reads


def test_screened_out_processes_are_not_read_again_while_their_clock_stands(
        scan: tuple[Scanner, dict[int, int], Path, list[int]]) -> None:
    scanner, _clocks, _proc, reads = scan
    first = scanner.scan()
    assert [p.pid for p in first.processes] == [300]
    assert {130, 139, 2} <= set(reads)
    reads.clear()
    second = scanner.scan()
    assert [p.pid for p in second.processes] == [300]
    # the candidate is screened again (its status feeds its sample); the file-less 302 is
    # tried again (an error is never kept); nothing else is read
    assert set(reads) == {300, 302}
    # the states still partition the processes: a kept verdict counts as skipped again
    assert second.stats.states == first.stats.states


def test_a_process_that_ran_is_screened_again(
        scan: tuple[Scanner, dict[int, int], Path, list[int]]) -> None:
    scanner, clocks, proc, _reads = scan
    scanner.scan()
    _rename(proc, 139, "splitter")
    assert [p.pid for p in scanner.scan().processes] == [300]  # its clock stands
    clocks[139] += 1  # it ran (and renamed itself)
    assert sorted(p.pid for p in scanner.scan().processes) == [139, 300]


def test_without_a_clock_every_process_is_screened(
        scan: tuple[Scanner, dict[int, int], Path, list[int]]) -> None:
    scanner, clocks, proc, reads = scan
    clocks.clear()
    scanner.scan()
    reads.clear()
    _rename(proc, 139, "splitter")
    assert sorted(p.pid for p in scanner.scan().processes) == [139, 300]
    assert {130, 139, 2} <= set(reads)


def test_a_read_error_is_never_kept(
        scan: tuple[Scanner, dict[int, int], Path, list[int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    scanner, clocks, _proc, _reads = scan
    # 302's status is absent while its folder is there: one error a scan already
    base = scanner.scan().stats.read_errors.get(("status", "error"), 0)
    assert base == 1
    real = ProcessFiles.status

    def failing(self: ProcessFiles) -> bytes:
        if self.pid == 139:
            raise ReadFailed("status", f"{self.path}/status", OSError(5, "I/O error"))
        return real(self)

    monkeypatch.setattr(ProcessFiles, "status", failing)
    monkeypatch.setattr(ProcessFiles, "statm", failing)
    clocks[139] += 1  # it ran: screened again, and its status cannot be read
    counts = [scanner.scan().stats.read_errors.get(("status", "error"), 0) for _ in range(3)]
    # its clock stands, but an error is tried again every scan (302's and 139's)
    assert counts == [base + 2, base + 4, base + 6]


def test_a_new_config_screens_everything_again(
        scan: tuple[Scanner, dict[int, int], Path, list[int]]) -> None:
    scanner, _clocks, _proc, reads = scan
    scanner.scan()
    reads.clear()
    scanner.config = replace(scanner.config, include=re.compile("^policies$"))
    assert [p.pid for p in scanner.scan().processes] == [301]
    assert {130, 139, 2} <= set(reads)


def _grow(proc: Path, pid: int, resident_pages: int) -> None:
    """Grow process ``pid`` in its statm and status as another process writing into it
    would: its CPU clock stays where it was."""
    statm = proc / str(pid) / "statm"
    fields = statm.read_text().split() if statm.exists() else ["8000", "0", "0", "1", "0",
                                                                "7000", "0"]
    fields[1] = str(resident_pages)
    statm.unlink(missing_ok=True)
    statm.write_text(" ".join(fields) + "\n")
    status = proc / str(pid) / "status"
    text = re.sub(r"\nVmRSS:\s+\d+ kB", f"\nVmRSS:\t{resident_pages * 4:8d} kB",
                  status.read_text())
    status.unlink()
    status.write_text(text)


@pytest.fixture()
def sized(tmp_path: Path) -> tuple[Scanner, dict[int, int], Path]:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    scanner = Scanner(fixture_config(root, min_resident=64 << 20))
    clocks = {pid: 1_000 + pid for pid in PIDS}
    scanner.reader.cpu_clock = clocks.get
    # the synthetic 304 (8.7 MiB, below --process.min-resident) has no statm: give it one
    # of its status' size
    _grow(root / "proc", 304, 8908 // 4)
    return scanner, clocks, root / "proc"


def test_a_process_grown_while_asleep_is_screened_again(
        sized: tuple[Scanner, dict[int, int], Path]) -> None:
    scanner, _clocks, proc = sized
    assert 304 not in {p.pid for p in scanner.scan().processes}
    assert 304 not in {p.pid for p in scanner.scan().processes}  # verdict kept
    _grow(proc, 304, 100 << 8)  # 100 MiB of 4 KiB pages; its clock has not moved
    assert 304 in {p.pid for p in scanner.scan().processes}


def test_no_verdict_outlives_its_maximum_age(
        sized: tuple[Scanner, dict[int, int], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    scanner, clocks, proc = sized
    memo = ScreenMemo()
    now = [1_000.0]
    screened: list[int] = []
    real = select_mod.screen

    def spy(proc_: ProcFS, pid: int, *a: Any, **k: Any) -> Any:
        screened.append(pid)
        return real(proc_, pid, *a, **k)

    monkeypatch.setattr(select_mod, "screen", spy)

    def once() -> list[int]:
        screened.clear()
        select_mod.select(ProcFS(proc), scanner.config, scanner.errors, (), Outcomes(),
                          memo=memo, clock=clocks.get, mono=lambda: now[0])
        return list(screened)

    assert 304 in once()
    now[0] += MEMO_MAX_AGE - 1
    assert 304 not in once()  # kept: same clock, same size, young enough
    now[0] += 1
    assert 304 in once()  # screened again at the maximum age, though nothing moved
