"""Per-thread readings: the sched file is skipped only when the answer cannot have changed."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.pid_sched import (
    NumaFaultsLine,
    SchedFaults,
    find_pages_migrated,
    parse_pid_sched,
)
from numa_exporter.parsers.task_stat import parse_task_stat
from numa_exporter.readers.threads import SchedGate, ThreadReading, read_threads
from numa_exporter.sources import threads as threads_mod
from numa_exporter.sources.errors import Denied, Gone
from numa_exporter.sources.procfs import ProcFS

PID = 300


@dataclass
class Task:
    """What the kernel would show for one thread of a fixture process."""

    tid: int
    state: str = "S"
    cpu: int = 0
    utime: int = 10
    stime: int = 2
    run_ns: int = 5_000_000
    slices: int = 40
    migrated: int = 0


def stat_line(t: Task, comm: str = "w (1) x") -> bytes:
    fields = [t.state, "1", str(PID), str(PID), "0", "-1", "4194368", "10", "0", "0", "0",
              str(t.utime), str(t.stime), "0", "0", "20", "0", "2", "0", "9000", "1000",
              "100", "18446744073709551615", "1", "1", "0", "0", "0", "0", "0", "0", "0",
              "0", "0", "0", "17", str(t.cpu), "0", "0", "0", "0", "0"]
    return f"{t.tid} ({comm}) {' '.join(fields)}\n".encode()


def sched_text(t: Task) -> bytes:
    return (f"w ({t.tid}, #threads: 2)\n" + "-" * 67 + "\n"
            f"se.sum_exec_runtime                          :        {t.run_ns / 1e6:.6f}\n"
            f"nr_switches                                  :                 {t.slices}\n"
            f"mm->numa_scan_seq                            :                    3\n"
            f"numa_pages_migrated                          :{t.migrated:>21}\n"
            f"numa_preferred_nid                           :                    1\n"
            f"total_numa_faults                            :                   12\n"
            "current_node=1, numa_group_id=0\n"
            "numa_faults node=0 task_private=1 task_shared=0 group_private=0 group_shared=0\n"
            ).encode()


def write(root: Path, tasks: list[Task], schedstat: str = "real") -> None:
    """Write proc/<PID>/task/<tid>/{stat,schedstat,sched}; schedstat 'real', 'zero', 'none'."""
    for t in tasks:
        d = root / str(PID) / "task" / str(t.tid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stat").write_bytes(stat_line(t))
        (d / "sched").write_bytes(sched_text(t))
        if schedstat == "real":
            (d / "schedstat").write_bytes(f"{t.run_ns} 1234 {t.slices}\n".encode())
        elif schedstat == "zero":
            (d / "schedstat").write_bytes(b"0 0 0\n")


# the fault block sched_text() writes, as the parser must give it back
FAULTS = SchedFaults("current", 1, 0, (NumaFaultsLine(0, 1, 0, 0, 0),))


def full(t: Task, schedstat: bool = True) -> ThreadReading:
    """Return what a reading that reads every file gives for the task."""
    return ThreadReading(t.tid, t.cpu, t.utime + t.stime, t.run_ns if schedstat else None,
                         t.migrated, t.slices if schedstat else None, t.state == "R", FAULTS)


class Errors(list[tuple[str, str]]):
    def __call__(self, source: str, path: str) -> None:
        self.append((source, path))


def test_first_reading_reads_every_file(tmp_path: Path) -> None:
    tasks = [Task(PID, migrated=7, cpu=3), Task(PID + 1, state="R", migrated=9, cpu=1)]
    write(tmp_path, tasks)
    errors = Errors()
    got = read_threads(ProcFS(tmp_path).process(PID), {}, errors)
    assert got == [full(t) for t in tasks]
    assert errors == []


def test_idle_thread_keeps_its_reading_and_a_thread_that_ran_is_read(tmp_path: Path) -> None:
    idle, busy = Task(PID, migrated=7), Task(PID + 1, migrated=9)
    write(tmp_path, [idle, busy])
    files = ProcFS(tmp_path).process(PID)
    prev = {r.tid: r for r in read_threads(files, {}, Errors())}
    # the fixture breaks the kernel's rule on purpose: the idle thread's sched changes
    # without its schedstat, which shows that the file was not read again
    idle2 = replace(idle, migrated=1000)
    busy2 = replace(busy, run_ns=busy.run_ns + 1, migrated=12, cpu=2, utime=30)
    write(tmp_path, [idle2, busy2])
    got = read_threads(files, prev, Errors())
    assert got[0] is prev[PID]
    assert got[1] == full(busy2)


@pytest.mark.parametrize("change", ["slices", "runnable_before", "no_previous"])
def test_sched_is_read_when_the_thread_may_have_run(tmp_path: Path, change: str) -> None:
    t = Task(PID, migrated=7, state="R" if change == "runnable_before" else "S")
    write(tmp_path, [t])
    files = ProcFS(tmp_path).process(PID)
    prev = {r.tid: r for r in read_threads(files, {}, Errors())}
    t2 = replace(t, migrated=8, state="S")
    if change == "slices":  # put on a CPU, its run time not accounted yet
        t2 = replace(t2, slices=t.slices + 1)
    write(tmp_path, [t2])
    got = read_threads(files, {} if change == "no_previous" else prev, Errors())
    assert got == [full(t2)]


@pytest.mark.parametrize("schedstat", ["none", "zero"])
def test_without_usable_schedstat_sched_is_always_read(tmp_path: Path, schedstat: str) -> None:
    t = Task(PID, migrated=7)
    write(tmp_path, [t], schedstat)
    files = ProcFS(tmp_path).process(PID)
    prev = {r.tid: r for r in read_threads(files, {}, Errors())}
    assert prev[PID] == full(t, schedstat=False)
    t2 = replace(t, migrated=8)
    write(tmp_path, [t2], schedstat)
    assert read_threads(files, prev, Errors()) == [full(t2, schedstat=False)]


def test_without_sched_file_the_counter_is_absent(tmp_path: Path) -> None:
    write(tmp_path, [Task(PID), Task(PID + 1)])
    for tid in (PID, PID + 1):
        (tmp_path / str(PID) / "task" / str(tid) / "sched").unlink()
    got = read_threads(ProcFS(tmp_path).process(PID), {}, Errors())
    assert [(r.tid, r.pages_migrated) for r in got] == [(PID, None), (PID + 1, None)]


def test_malformed_files_are_reported(tmp_path: Path) -> None:
    write(tmp_path, [Task(PID), Task(PID + 1), Task(PID + 2)])
    task = tmp_path / str(PID) / "task"
    (task / str(PID + 1) / "stat").write_bytes(b"garbage\n")
    (task / str(PID + 2) / "schedstat").write_bytes(b"12 x 3\n")
    (task / str(PID + 2) / "sched").write_bytes(b"numa_pages_migrated : -5\n")
    errors = Errors()
    got = read_threads(ProcFS(tmp_path).process(PID), {}, errors)
    assert [r.tid for r in got] == [PID, PID + 2]
    assert got[1].run_ns is None and got[1].pages_migrated is None
    assert [s for s, _ in errors] == ["task_stat", "schedstat", "sched"]
    assert errors[0][1].endswith(f"/task/{PID + 1}/stat")


def test_vanished_thread_is_skipped_vanished_process_is_gone(tmp_path: Path) -> None:
    write(tmp_path, [Task(PID), Task(PID + 1), Task(PID + 2)])
    task = tmp_path / str(PID) / "task"
    for name in ("stat", "schedstat", "sched"):  # exited: its folder empties
        (task / str(PID + 1) / name).unlink()
    files = ProcFS(tmp_path).process(PID)
    assert [r.tid for r in read_threads(files, {}, Errors())] == [PID, PID + 2]
    for name in ("stat", "schedstat", "sched"):
        (task / str(PID) / name).unlink()
    with pytest.raises(Gone):  # the leader went too: the process is gone
        read_threads(files, {}, Errors())
    with pytest.raises(Gone):
        read_threads(ProcFS(tmp_path).process(PID + 50), {}, Errors())


def test_listing_denied_is_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, [Task(PID)])
    real_open = os.open

    def deny_task(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith("/task"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(threads_mod.os, "open", deny_task)
    with pytest.raises(Denied):
        read_threads(ProcFS(tmp_path).process(PID), {}, Errors())


# --- the skip never changes the answer --------------------------------------------------
# A model of the kernel: numa_pages_migrated, utime/stime and the last CPU change only while
# a thread runs; running adds run time on the way off the CPU (or at a tick) and a timeslice
# each time it is put on one. Waking puts a thread on a runqueue (state R), maybe on another
# CPU, before it runs.

STEP = st.sampled_from(["idle", "run", "run_on", "wake", "sleep", "exit", "spawn"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), STEP, st.integers(0, 5)), max_size=25))
def test_skipping_sched_gives_what_a_full_read_gives(tmp_path_factory: pytest.TempPathFactory,
                                                     steps: list[tuple[int, str, int]]) -> None:
    root = tmp_path_factory.mktemp("proc")
    tasks = {PID: Task(PID), PID + 1: Task(PID + 1)}
    files = ProcFS(root).process(PID)
    prev: dict[int, ThreadReading] = {}
    woken_since_run: set[int] = set()
    for who, step, n in steps:
        tid = PID + who
        t = tasks.get(tid)
        if step == "spawn" and t is None:
            tasks[tid] = Task(tid, run_ns=100 + n, slices=1, state="R")
        elif t is not None and step == "run":  # ran and is still on a CPU
            tasks[tid] = replace(t, state="R", slices=t.slices + 1, migrated=t.migrated + n,
                                 utime=t.utime + n)
            woken_since_run.discard(tid)
        elif t is not None and step == "run_on":  # a tick while it runs
            tasks[tid] = replace(t, state="R", run_ns=t.run_ns + 1 + n,
                                 migrated=t.migrated + n)
            woken_since_run.discard(tid)
        elif t is not None and step == "sleep" and t.state == "R":  # off the CPU: accounted
            tasks[tid] = replace(t, state="S", run_ns=t.run_ns + 1 + n)
        elif t is not None and step == "wake" and t.state != "R":  # queued, maybe elsewhere
            tasks[tid] = replace(t, state="R", cpu=n % 4)
            woken_since_run.add(tid)
        elif t is not None and step == "exit" and tid != PID:
            del tasks[tid]
            woken_since_run.discard(tid)
        for d in (root / str(PID) / "task").glob("*") if (root / str(PID)).exists() else ():
            if int(d.name) not in tasks:
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
        write(root, list(tasks.values()))
        skipped = read_threads(files, prev, Errors())
        fresh = read_threads(files, {}, Errors())
        assert [r.tid for r in skipped] == [r.tid for r in fresh]
        for a, b in zip(skipped, fresh, strict=True):
            assert (a.pages_migrated, a.ticks, a.run_ns, a.timeslices) == (
                b.pages_migrated, b.ticks, b.run_ns, b.timeslices)
            if a.tid not in woken_since_run:
                assert a == b
        prev = {r.tid: r for r in skipped}


@pytest.mark.parametrize(
    ("data", "expect"),
    [
        (b"numa_pages_migrated : 12\n", (12, False)),
        (b"x\nnuma_pages_migrated                          :                   33\ny\n",
         (33, False)),
        (b"numa_pages_migrated_total : 4\nnuma_pages_migrated : 5\n", (5, False)),
        (b"a numa_pages_migrated : 4\n", (None, False)),
        (b"numa_pages_migrated : x\n", (None, True)),
        (b"numa_pages_migrated : " + b"9" * 21 + b"\n", (None, True)),
        (b"numa_pages_migrated :", (None, True)),
        (b"", (None, False)),
    ],
)
def test_find_pages_migrated(data: bytes, expect: tuple[int | None, bool]) -> None:
    assert find_pages_migrated(data) == expect
    assert parse_pid_sched(data).numa_pages_migrated == expect[0]


@pytest.mark.parametrize(
    "data",
    [b"", b"1 (a) S", b"1 a) S 1 2 3 4 5 6 7 8 9 10 11 12 13", b"1 (a) S " + b"x " * 50],
)
def test_malformed_task_stat(data: bytes) -> None:
    assert parse_task_stat(data) is None


def test_task_stat_with_parentheses_in_comm() -> None:
    s = parse_task_stat(stat_line(Task(5, state="D", cpu=7, utime=3, stime=4), "a) (b"))
    assert s is not None and (s.state, s.ticks, s.processor) == (b"D", 7, 7)


LEGACY_SCHED = (b"w (300, #threads: 2)\n" + b"-" * 67 + b"\n"
                b"se.sum_exec_runtime                          :        5.000000\n"
                b"numa_migrations, 0\n"
                b"numa_faults_memory, 0, 0, 1, 0, -1\n")


def test_a_legacy_sched_closes_the_gate_and_is_not_read_again(tmp_path: Path) -> None:
    """3.13-4.1 reset numa_pages_migrated on each read: after the first such file, no
    thread's sched is read (the second thread's is a folder: reading it would fail)."""
    tasks = [Task(PID), Task(PID + 1)]
    write(tmp_path, tasks)
    first = tmp_path / str(PID) / "task" / str(PID) / "sched"
    first.write_bytes(LEGACY_SCHED)
    second = tmp_path / str(PID) / "task" / str(PID + 1) / "sched"
    second.unlink()
    second.mkdir()
    gate = SchedGate()
    errors = Errors()
    got = read_threads(ProcFS(tmp_path).process(PID), {}, errors, gate)
    assert gate.refused and not gate.read and errors == []
    assert [r.pages_migrated for r in got] == [None, None]
    assert got[0].faults == SchedFaults("legacy") and got[1].faults is None
    # a later process on the same kernel: not read at all
    again = read_threads(ProcFS(tmp_path).process(PID), {}, errors, gate)
    assert all(r.faults is None and r.pages_migrated is None for r in again)


def test_faults_are_not_parsed_with_the_gate_off(tmp_path: Path) -> None:
    write(tmp_path, [Task(PID, migrated=5)])
    got = read_threads(ProcFS(tmp_path).process(PID), {}, Errors(), SchedGate(faults=False))
    assert got == [replace(full(Task(PID, migrated=5)), faults=None)]


def test_a_stopped_pass_resumes_where_it_stopped(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # 300 threads, a deadline after the first look at the clock: the pass stops with the
    # threads read so far, and the next one reads only the rest (no thread read twice)
    from numa_exporter.readers.threads import CHECK_EVERY
    from numa_exporter.sources.deadline import Deadline, Expired

    tasks = [Task(PID + i) for i in range(300)]
    write(tmp_path, tasks)
    files = ProcFS(tmp_path).process(PID)
    reads: list[str] = []
    real = threads_mod.TaskDir.read

    def counting(self, rel: str, source: str) -> bytes:  # type: ignore[no-untyped-def]
        reads.append(rel)
        return real(self, rel, source)

    monkeypatch.setattr(threads_mod.TaskDir, "read", counting)
    looks = 0

    def clock() -> float:  # past the deadline at the first look only
        nonlocal looks
        looks += 1
        return 1.0 if looks == 1 else 0.0

    deadline = Deadline(1.0, clock=clock)
    with pytest.raises(Expired) as info:
        read_threads(files, {}, Errors(), deadline=deadline)
    part = info.value.partial
    assert isinstance(part, dict) and len(part) == CHECK_EVERY - 1
    got = read_threads(files, {}, Errors(), deadline=deadline, done=part)
    assert got == [full(t) for t in tasks]
    stats = [r for r in reads if r.endswith("/stat")]
    assert len(stats) == len(set(stats)) == 300
