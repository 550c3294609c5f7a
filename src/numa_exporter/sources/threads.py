"""Per-thread readings of one process: last CPU, CPU time and NUMA page migrations.

A scan reads every thread of every selected process, so this path is kept to few system calls
per thread: the ``task`` folder is opened once, each thread's files are opened relative to it
(``openat``), read with one ``read`` each (they are single-record seq files that the kernel
produces whole) and closed.

A thread that has not been on a CPU since the previous reading has not changed what is read
here: ``numa_pages_migrated`` grows only in ``task_numa_fault()``, which runs in the faulting
task itself; utime/stime and the last CPU change only when it runs. Whether it ran is told by
``schedstat`` alone (5 us against 12 us for stat and 14 us for the ~50-line sched): its run
time (``se.sum_exec_runtime``) grows with every accounting update, and a thread gets one on
its way off a CPU; its timeslice count grows each time it is put on one. So each thread's
``schedstat`` is read first, and ``stat`` and ``sched`` only when either counter changed, when
the previous reading found the thread runnable or running (its latest run time may not be
accounted yet), when there is no previous reading, and always where the kernel has no usable
``schedstat`` (no CONFIG_SCHED_INFO, or ``0 0 0`` on kernels before 5.14 without
schedstats). Otherwise the previous reading is returned as it was: the numbers a full read
would have given. (A thread woken onto another CPU that has not run there yet still shows the
CPU it last ran on until it runs.)
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from numa_exporter.parsers.pid_sched import find_pages_migrated
from numa_exporter.parsers.pid_schedstat import parse_schedstat
from numa_exporter.parsers.task_stat import parse_task_stat
from numa_exporter.sources.errors import GONE_ERRNOS, Gone, classify
from numa_exporter.sources.procfs import ProcessFiles

_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_DIR_FLAGS = _FLAGS | os.O_DIRECTORY
_READ = 64 << 10  # above any stat/schedstat/sched record
_RUNNABLE = frozenset({b"R"})  # on a CPU or waiting for one


@dataclass(frozen=True, slots=True)
class ThreadReading:
    """One thread as read in one scan."""

    tid: int
    processor: int | None  # last CPU (stat field 39)
    ticks: int  # utime + stime, clock ticks
    run_ns: int | None  # schedstat field 1 (ns on CPU); None if unavailable
    pages_migrated: int | None  # numa_pages_migrated from task/<tid>/sched, None if absent
    timeslices: int | None = None  # schedstat field 3 (times put on a CPU)
    runnable: bool = False  # stat state R (running or waiting for a CPU) when last read


class _Missing(Exception):
    """A thread file could not be opened or read because it (or its thread) is gone."""


def _read_at(dfd: int, rel: str, source: str, task: str) -> bytes:
    """Return one read of ``rel`` under the task folder; raise _Missing or a SourceError."""
    try:
        fd = os.open(rel, _FLAGS, dir_fd=dfd)
    except OSError as err:
        if err.errno in GONE_ERRNOS:
            raise _Missing from None
        raise classify(source, f"{task}/{rel}", err) from err
    try:
        return os.read(fd, _READ)
    except OSError as err:
        if err.errno in GONE_ERRNOS:
            raise _Missing from None
        raise classify(source, f"{task}/{rel}", err) from err
    finally:
        os.close(fd)


def _exists(dfd: int, name: str, task: str) -> bool:
    """Return whether ``task/<name>`` still exists."""
    try:
        os.stat(name, dir_fd=dfd)
    except OSError as err:
        if err.errno in GONE_ERRNOS:
            return False
        raise classify("task", f"{task}/{name}", err) from err
    return True


def read_threads(
    files: ProcessFiles,
    previous: Mapping[int, ThreadReading],
    parse_error: Callable[[str, str], None],
) -> list[ThreadReading]:
    """Return a reading of each thread of the process, by tid.

    ``previous`` is the last scan's readings of this process (empty at first); a thread
    that was not on a CPU since is returned as it was read then. A thread that exits
    while it is read is left out; a malformed stat, schedstat or sched is reported through
    ``parse_error(source, path)``. Raises Gone when the process is gone, Denied when the
    thread list or a thread's file is not readable, and another SourceError for other errors.
    """
    task = str(files.path / "task")
    try:
        dfd = os.open(task, _DIR_FLAGS)
    except OSError as err:
        raise classify("task", task, err) from err
    try:
        try:
            names = os.listdir(dfd)
        except OSError as err:
            raise classify("task", task, err) from err
        tids = sorted(int(n) for n in names if n.isascii() and n.isdigit() and len(n) <= 10)
        if not tids:  # a live process always lists at least its leader
            raise Gone("task", task, OSError(errno.ESRCH, "no threads"))
        out: list[ThreadReading] = []
        schedstat = sched = True  # the kernel has the file (until a thread shows it has not)
        vanished = False
        for tid in tids:
            name = str(tid)
            prev = previous.get(tid)
            run_ns = slices = None
            if schedstat:
                try:
                    counters = parse_schedstat(
                        _read_at(dfd, name + "/schedstat", "schedstat", task))
                except _Missing:
                    if not _exists(dfd, name, task):
                        vanished = True
                        continue
                    schedstat = False  # CONFIG_SCHED_INFO off
                    counters = None
                else:
                    if counters is None:
                        parse_error("schedstat", f"{task}/{name}/schedstat")
                    elif counters.run_ns:  # 0: not accounted (or never ran)
                        run_ns, slices = counters.run_ns, counters.timeslices
                        if (prev is not None and prev.run_ns == run_ns
                                and prev.timeslices == slices and not prev.runnable):
                            out.append(prev)  # not on a CPU since: nothing changed
                            continue
            try:
                stat = parse_task_stat(_read_at(dfd, name + "/stat", "task_stat", task))
            except _Missing:
                if tid == files.pid:  # the leader's entry stays while any thread lives
                    raise Gone("task_stat", f"{task}/{name}/stat") from None
                vanished = True
                continue
            if stat is None:
                parse_error("task_stat", f"{task}/{name}/stat")
                continue
            migrated: int | None = None
            if sched:
                try:
                    migrated, bad = find_pages_migrated(
                        _read_at(dfd, name + "/sched", "sched", task))
                    if bad:
                        parse_error("sched", f"{task}/{name}/sched")
                except _Missing:
                    if not _exists(dfd, name, task):
                        vanished = True
                        continue
                    sched = False  # CONFIG_SCHED_DEBUG off
            out.append(ThreadReading(tid, stat.processor, stat.ticks, run_ns, migrated,
                                     slices, stat.state in _RUNNABLE))
        if vanished and not _exists(dfd, f"{files.pid}/stat", task):
            raise Gone("task", f"{task}/{files.pid}")
        return out
    finally:
        os.close(dfd)
