"""The scan budget: what it counts, reads abandoned at the deadline, series that never vanish."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from tests.conftest import ROOTS, FakeClock, fixture_config

from numa_exporter.model.snapshot import SystemSample
from numa_exporter.scan.scanner import Scanner


def test_budget_counts_process_time_not_the_system_read() -> None:
    # the help says "time one scan may spend on processes": a slow system read (vmstat,
    # node files) or /proc listing must not use it up (it did: 0 processes read)
    clock = FakeClock()
    scanner = Scanner(fixture_config(ROOTS / "two_node", scan_budget=1.0), clock=clock)
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
    scanner = Scanner(fixture_config(ROOTS / "two_node", scan_budget=100.0), clock=clock,
                      wall=lambda: next(walls))
    first = scanner.scan()  # everything fits
    assert first.stats.budget_skipped_total == 0
    by_pid = {p.pid: p for p in first.processes}
    scanner.config = fixture_config(ROOTS / "two_node", scan_budget=1.0)
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
    scanner = Scanner(fixture_config(big_root, scan_budget=0.01,
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
    scanner = Scanner(fixture_config(big_root, scan_budget=100.0, include=re.compile("^split")),
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
    scanner = Scanner(fixture_config(ROOTS / "two_node"))
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
    scanner = Scanner(fixture_config(root))
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
    scanner = Scanner(fixture_config(root))
    first = scanner.scan()
    assert first.stats.read_errors[("stat", "gone")] >= 1
    stat.write_bytes(saved)
    btime = int(saved.split(b"btime")[1].split()[0])
    second = scanner.scan()
    (p,) = [p for p in second.processes if p.pid == 139]
    assert p.start_time > btime


def test_one_slow_process_cannot_starve_the_rest(big_root: Path) -> None:
    # process 300's numa_maps read takes ~150 ms here; the scan has 50 ms.
    # Each read gets a share of the time left; the slow one, given up at its share, goes
    # after the others and is then read to the end: everyone is read every scan but the
    # slow one, which is read every other scan.
    from numa_exporter.parsers.numa_maps import parse_numa_maps
    from numa_exporter.readers.process_files import read_numa_maps

    reads: dict[int, int] = {}

    clock = FakeClock(step=0.0001)

    def counting(files, deadline, hold=None):  # type: ignore[no-untyped-def]
        reads[files.pid] = reads.get(files.pid, 0) + 1
        if files.pid != 300:
            return read_numa_maps(files, deadline, hold)

        def slow(chunks):  # type: ignore[no-untyped-def]
            for chunk in chunks:
                clock.t += 0.005  # each of its ~30 chunks takes 5 ms: ~150 ms in all
                yield chunk

        return parse_numa_maps(deadline.each(slow(files.numa_maps())))

    walls = iter(float(t) for t in range(1000, 2000, 10))
    now = [0.0]

    def wall() -> float:
        now[0] = next(walls)
        return now[0]

    scanner = Scanner(fixture_config(big_root, scan_budget=0.05, process_budget=0.0), clock=clock,
                      placement=counting, wall=wall)
    per_scan: list[set[int]] = []
    served: set[int] = set()
    for _ in range(6):
        snap = scanner.scan()
        started = snap.stats.timestamp - 10  # one wall reading per scan start and end
        served |= {p.pid for p in snap.processes}
        per_scan.append({p.pid for p in snap.processes if p.last_scan_timestamp == started})
    normal = served - {300}
    assert len(normal) >= 5, (per_scan, served, reads)
    for got in per_scan[1:]:  # from the second scan on (the first meets 300 unknown)
        assert normal <= got, (normal - got)
    assert sum(1 for got in per_scan if 300 in got) >= 2  # progress for the slow one
    assert reads[300] >= 3  # given up, then read to the end


def test_a_thread_read_stopped_at_the_deadline_resumes_next_scan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # process 300 with 600 threads; the scan's deadline falls inside its thread read: the
    # read is given up with the threads read so far kept, and the next scan reads the rest
    from numa_exporter.sources import threads as threads_mod

    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    task = root / "proc" / "300" / "task"
    for tid in range(1000, 1600):
        shutil.copytree(task / "310", task / str(tid))
    reads: list[str] = []
    real = threads_mod.TaskDir.read

    def counting(self, rel: str, source: str) -> bytes:  # type: ignore[no-untyped-def]
        reads.append(rel)
        return real(self, rel, source)

    monkeypatch.setattr(threads_mod.TaskDir, "read", counting)
    clock = FakeClock(step=0.0001)
    scanner = Scanner(fixture_config(root, scan_budget=0.0008, process_budget=0.0,
                              include=re.compile("^splitter$")), clock=clock)
    first = scanner.scan()
    assert first.stats.states["scanned"] == 0 and scanner.state.pending == [300]
    done_first = {r.split("/")[0] for r in reads if r.endswith("/stat")}
    assert 0 < len(done_first) < 602
    second = scanner.scan()
    assert [p.pid for p in second.processes] == [300]
    stats = [r.split("/")[0] for r in reads if r.endswith("/stat")]
    assert len(stats) == len(set(stats)) == 602  # every thread read once over the two scans
    assert sum(second.processes[0].threads_by_node.values()) == 602
