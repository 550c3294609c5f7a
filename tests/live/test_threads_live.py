"""Per-thread readings on this machine's /proc: idle threads are skipped and every counter
equals a full read; the real stat and schedstat parse."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from numa_exporter.parsers.pid_sched import parse_pid_sched
from numa_exporter.parsers.pid_schedstat import parse_schedstat
from numa_exporter.parsers.task_stat import parse_task_stat
from numa_exporter.readers.threads import read_threads
from numa_exporter.sources.procfs import ProcFS


class Errors(list[tuple[str, str]]):
    def __call__(self, source: str, path: str) -> None:
        self.append((source, path))


def _until_sleeping(tids: set[int], tries: int = 500) -> None:
    """Return once every thread in ``tids`` shows state S in its stat (polled)."""
    task = Path("/proc/self/task")
    for _ in range(tries):
        stats = [parse_task_stat((task / str(t) / "stat").read_bytes()) for t in tids]
        if all(s is not None and s.state == b"S" for s in stats):
            return
        time.sleep(0.01)
    pytest.fail("the idle threads never blocked")


def _until_ran(tid: int, since: int | None, tries: int = 500) -> None:
    """Return once thread ``tid`` of this process has run past ``since`` ns of CPU time (its
    schedstat, polled)."""
    path = Path(f"/proc/self/task/{tid}/schedstat")
    for _ in range(tries):
        if since is None or int(path.read_text().split()[0]) > since:
            return
        time.sleep(0.01)
    pytest.fail("the reading thread's run time never moved")


def test_real_threads_skip_changes_nothing() -> None:
    """On the real kernel: idle threads are skipped and every counter equals a full read."""
    stop = threading.Event()
    started = threading.Barrier(5)

    def idle() -> None:
        started.wait()
        stop.wait()

    workers = [threading.Thread(target=idle) for _ in range(4)]
    for w in workers:
        w.start()
    started.wait()
    _until_sleeping({w.native_id for w in workers if w.native_id is not None})
    try:
        files = ProcFS(Path("/proc")).process(os.getpid())
        errors = Errors()
        first = read_threads(files, {}, errors)
        if first and first[0].run_ns is None:
            pytest.skip("this kernel has no usable schedstat")
        prev = {r.tid: r for r in first}
        me = threading.get_native_id()
        _until_ran(me, prev[me].run_ns)  # the reading thread ran since; the idle ones not
        skipped = read_threads(files, prev, errors)
        fresh = read_threads(files, {}, errors)
        assert errors == []
        idle_tids = {w.native_id for w in workers}
        by_tid = {r.tid: r for r in skipped}
        assert idle_tids <= set(by_tid)
        assert all(by_tid[t] is prev[t] for t in idle_tids)  # their files were not read
        fresh_by = {r.tid: r for r in fresh}
        for tid in idle_tids:
            assert fresh_by[tid] == by_tid[tid]
        for tid, r in by_tid.items():
            if tid in fresh_by:
                full_sched = parse_pid_sched(
                    (Path("/proc") / str(os.getpid()) / "task" / str(tid) / "sched")
                    .read_bytes())
                assert r.pages_migrated == full_sched.numa_pages_migrated
    finally:
        stop.set()
        for w in workers:
            w.join()


def test_real_stat_and_schedstat_parse() -> None:
    me = Path("/proc/self")
    s = parse_task_stat((me / "stat").read_bytes())
    assert s is not None and s.state == b"R" and s.processor is not None
    if (me / "schedstat").exists():
        assert parse_schedstat((me / "schedstat").read_bytes()) is not None
