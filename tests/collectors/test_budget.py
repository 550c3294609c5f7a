"""The scan budget: what it counts, reads abandoned at the deadline, series that never vanish."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from tests.conftest import ROOTS

from numa_exporter.config import Config
from numa_exporter.model.snapshot import SystemSample
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner


class FakeClock:
    """A monotonic clock that only moves when told (``step`` per call, plus ``jump``)."""

    def __init__(self, step: float = 0.0) -> None:
        self.t = 0.0
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def _config(root: Path, **kw: object) -> Config:
    kw.setdefault("min_resident", 0)
    return Config(roots=Roots(root / "proc", root / "sys"), **kw)  # type: ignore[arg-type]


def test_budget_counts_process_time_not_the_system_read() -> None:
    # the help says "time one scan may spend on processes": a slow system read (vmstat,
    # node files) or /proc listing must not use it up (it did: 0 processes read)
    clock = FakeClock()
    scanner = Scanner(_config(ROOTS / "two_node", scan_budget=1.0), clock=clock)
    real = scanner._read_system

    def slow_system() -> SystemSample:
        clock.t += 5.0
        return real()

    scanner._read_system = slow_system  # type: ignore[method-assign]
    snap = scanner.scan()
    assert snap.stats.states["scanned"] >= 8
    assert snap.stats.budget_skipped_total == 0


def test_processes_left_over_keep_their_last_values_and_timestamp() -> None:
    clock = FakeClock(step=0.1)
    walls = iter(float(t) for t in range(1000, 2000, 10))
    scanner = Scanner(_config(ROOTS / "two_node", scan_budget=100.0), clock=clock,
                      wall=lambda: next(walls))
    first = scanner.scan()  # everything fits
    assert first.stats.budget_skipped_total == 0
    by_pid = {p.pid: p for p in first.processes}
    scanner.config = _config(ROOTS / "two_node", scan_budget=1.0)
    second = scanner.scan()
    assert second.stats.budget_skipped_total > 0
    # no series vanished: every process of the first scan is served again
    assert {p.pid for p in second.processes} == set(by_pid)
    kept = [p for p in second.processes if p.last_scan_timestamp == by_pid[p.pid]
            .last_scan_timestamp]
    read = [p for p in second.processes if p not in kept]
    assert kept and read
    assert second.stats.states["kept"] == len(kept)
    for p in kept:  # the values are those of the last read, marked with its time
        assert p.memory == by_pid[p.pid].memory
        assert p.last_scan_timestamp is not None
        assert p.last_scan_timestamp < max(q.last_scan_timestamp or 0 for q in read)


@pytest.fixture
def big_root(tmp_path: Path) -> Path:
    """Return a copy of two_node whose process 300 has a 20,000-line numa_maps."""
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    maps = root / "proc" / "300" / "numa_maps"
    line = maps.read_bytes().splitlines(keepends=True)[0]
    addr = int(line.split()[0], 16)
    lines = [b"%x" % (addr + i * 0x10000) + line[line.index(b" "):] for i in range(20_000)]
    maps.unlink()
    maps.write_bytes(b"".join(lines))
    return root


def test_a_slow_read_is_abandoned_at_the_deadline_and_finished_next_scan(big_root: Path
                                                                          ) -> None:
    clock = FakeClock(step=0.001)  # every look at the clock costs 1 ms
    scanner = Scanner(_config(big_root, scan_budget=0.01,
                                      include=re.compile("^split")), clock=clock)
    first = scanner.scan()
    assert first.stats.states["scanned"] == 0
    assert scanner.state.pending == [300]
    assert first.stats.budget_skipped_total == 1
    # next scan it goes first and, having been abandoned, is read to the end
    second = scanner.scan()
    assert [p.pid for p in second.processes] == [300]
    assert second.stats.states["scanned"] == 1


def test_a_read_in_progress_is_abandoned_when_the_exporter_stops(big_root: Path) -> None:
    clock = FakeClock(step=0.0)
    scanner = Scanner(_config(big_root, scan_budget=100.0, include=re.compile("^split")),
                      clock=clock)
    lines_read = 0
    real = scanner.proc.process

    def counting(pid: int):  # type: ignore[no-untyped-def]
        files = real(pid)
        orig = files.numa_maps

        def numa_maps():  # type: ignore[no-untyped-def]
            nonlocal lines_read
            for line in orig():
                lines_read += 1
                if lines_read == 3:
                    scanner.stop_event.set()  # SIGTERM arrives mid-read
                yield line

        files.numa_maps = numa_maps  # type: ignore[method-assign]
        return files

    scanner.proc.process = counting  # type: ignore[method-assign]
    snap = scanner.scan()
    assert snap.stats.states["scanned"] == 0
    assert lines_read < 6  # it did not read the rest of the file (~25 reads of 64 KiB)


def test_one_exception_anywhere_costs_one_process_not_the_scan() -> None:
    scanner = Scanner(_config(ROOTS / "two_node"))
    real = scanner.proc.process

    def boom(pid: int):  # type: ignore[no-untyped-def]
        files = real(pid)
        if pid == 300:
            def bad() -> bytes:
                raise ValueError("Exceeds the limit (4300 digits) for integer string")
            files.cgroup = bad  # type: ignore[method-assign]
        return files

    scanner.proc.process = boom  # type: ignore[method-assign]
    snap = scanner.scan()
    assert snap.stats.scans == 1
    assert 300 not in {p.pid for p in snap.processes}
    assert snap.stats.states["scanned"] >= 7
    assert snap.stats.read_errors[("process", "error")] == 1
    # and a failure of the system read leaves the processes served
    scanner._read_system_real = scanner._read_system  # type: ignore[attr-defined]
    import numa_exporter.scan.scanner as sc

    orig = sc.read_system

    def broken(*a: object, **k: object) -> SystemSample:
        raise IndexError("parser bug")

    sc.read_system = broken  # type: ignore[assignment]
    try:
        snap = scanner.scan()
    finally:
        sc.read_system = orig
    assert snap.stats.scans == 2 and snap.stats.states["scanned"] >= 7
    assert snap.stats.read_errors[("system", "error")] == 1


def test_node_ids_outside_the_topology_are_errors_not_series(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    maps = root / "proc" / "300" / "numa_maps"
    text = maps.read_bytes()
    maps.unlink()
    first = text.splitlines(keepends=True)[0]
    maps.write_bytes(first.rstrip(b"\n") + b" N4000=7\n" + text)
    scanner = Scanner(_config(root))
    snap = scanner.scan()
    (p,) = [p for p in snap.processes if p.pid == 300]
    assert {n for n, _ in p.memory} <= {0, 1}
    assert snap.stats.parse_errors["numa_maps"] >= 1


def test_boot_time_unreadable_once_is_read_again(tmp_path: Path) -> None:
    # a failed read of /proc/stat was cached as 0 for good: start times became seconds
    # since boot and every process looked old enough to be warm
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    stat = root / "proc" / "stat"
    saved = stat.read_bytes()
    stat.unlink()
    scanner = Scanner(_config(root))
    first = scanner.scan()
    assert first.stats.read_errors[("stat", "gone")] >= 1
    stat.write_bytes(saved)
    btime = int(saved.split(b"btime")[1].split()[0])
    second = scanner.scan()
    (p,) = [p for p in second.processes if p.pid == 139]
    assert p.start_time > btime
