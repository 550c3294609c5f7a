"""Per-thread readings of one process: last CPU, CPU time and NUMA page migrations.

The bytes come from :class:`~numa_exporter.sources.threads.TaskDir` (one ``openat`` and one
``read`` per thread file).

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

The NUMA hinting-fault block (``numa_faults`` lines) is taken from the same ``sched`` read:
its decayed counts change only in ``task_numa_placement()``, which runs in the task itself,
so a thread that did not run keeps its previous block too. A kernel that prints the legacy
3.13-4.1 form resets ``numa_pages_migrated`` on every read of ``sched``: once a thread shows
that form (or the release says so, :class:`SchedGate`), ``sched`` is not read again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from numa_exporter.model.threads import ThreadReading
from numa_exporter.parsers.pid_sched import SchedFaults, find_numa_faults, find_pages_migrated
from numa_exporter.parsers.pid_schedstat import parse_schedstat
from numa_exporter.parsers.pid_status import parse_pid_status_cpus_allowed
from numa_exporter.parsers.task_stat import parse_task_stat
from numa_exporter.sources.deadline import NEVER, Deadline, Expired
from numa_exporter.sources.errors import Gone
from numa_exporter.sources.procfs import ProcessFiles
from numa_exporter.sources.threads import TaskDir, ThreadMissing, thread_affinity

__all__ = ["SchedGate", "ThreadReading", "read_affinities", "read_threads"]

_RUNNABLE = frozenset({b"R"})  # on a CPU or waiting for one
CHECK_EVERY = 64  # threads read between two looks at the clock


class _Vanished(enum.Enum):
    """A thread that exited while it was read."""

    THREAD = 0


_VANISHED = _Vanished.THREAD


@dataclass(slots=True)
class SchedGate:
    """Whether threads' ``sched`` files are read, and their fault blocks parsed.

    ``read`` turns False for good when a thread's file shows the legacy form (reading it
    resets a counter for every reader) or the kernel release is before 4.2; ``faults`` is
    the tiers collector's switch (the block is not parsed when nothing exports it).
    """

    read: bool = True
    faults: bool = True
    refused: bool = False  # the legacy form was seen (reported once by the caller)


def read_threads(
    files: ProcessFiles,
    previous: Mapping[int, ThreadReading],
    parse_error: Callable[[str, str], None],
    gate: SchedGate | None = None,
    *,
    deadline: Deadline = NEVER,
    done: Mapping[int, ThreadReading] | None = None,
) -> list[ThreadReading]:
    """Return a reading of each thread of the process, by tid.

    ``previous`` is the last scan's readings of this process (empty at first); a thread
    that was not on a CPU since is returned as it was read then. A thread that exits
    while it is read is left out; a malformed stat, schedstat or sched is reported through
    ``parse_error(source, path)``. Raises Gone when the process is gone, Denied when the
    thread list or a thread's file is not readable, and another SourceError for other errors.
    ``gate`` says whether ``sched`` is read and its fault block parsed (default: both); a
    legacy-form file closes it.

    ``deadline`` is checked every :data:`CHECK_EVERY` threads; past it ``Expired`` is raised
    with the readings so far, by tid, as its ``partial``. Passing those back as ``done``
    resumes the pass: threads in ``done`` that are still listed are not read again.
    """
    gate = gate if gate is not None else SchedGate()
    done = done or {}
    with TaskDir(files) as td:
        one = _ThreadPass(files.pid, td, gate, parse_error)
        out: list[ThreadReading] = []
        for i, tid in enumerate(td.tids()):
            kept = done.get(tid)
            if kept is not None:
                out.append(kept)
                continue
            if i % CHECK_EVERY == CHECK_EVERY - 1 and deadline.expired():
                raise Expired(td.path, {t.tid: t for t in out})
            reading = one.thread(tid, previous.get(tid))
            if reading is not None:
                out.append(reading)
        if one.vanished and not td.exists(f"{files.pid}/stat"):
            raise Gone("task", f"{td.path}/{files.pid}")
        return out


class _ThreadPass:
    """One pass over a process's threads: which per-thread files the kernel has (learnt
    from the first thread that lacks one) and whether any thread vanished meanwhile."""

    def __init__(self, pid: int, td: TaskDir, gate: SchedGate,
                 parse_error: Callable[[str, str], None]) -> None:
        self.pid = pid
        self.td = td
        self.task = td.path
        self.gate = gate
        self.parse_error = parse_error
        self.schedstat = True  # the kernel has the file (until a thread shows it has not)
        self.sched = gate.read
        self.vanished = False

    def thread(self, tid: int, prev: ThreadReading | None) -> ThreadReading | None:
        """Return a reading of thread ``tid``: ``prev`` itself when the thread was not on a
        CPU since, None when it vanished or its stat is malformed (reported). Raises Gone
        when the leader's stat is missing (the process is gone)."""
        name = str(tid)
        counters = self._schedstat(name) if self.schedstat else None
        if isinstance(counters, _Vanished):
            return None
        run_ns = slices = None
        if isinstance(counters, tuple):
            run_ns, slices = counters
            if (prev is not None and prev.run_ns == run_ns
                    and prev.timeslices == slices and not prev.runnable):
                return prev  # not on a CPU since: nothing changed
        try:
            stat = parse_task_stat(self.td.read(name + "/stat", "task_stat"))
        except ThreadMissing:
            if tid == self.pid:  # the leader's entry stays while any thread lives
                raise Gone("task_stat", f"{self.task}/{name}/stat") from None
            self.vanished = True
            return None
        if stat is None:
            self.parse_error("task_stat", f"{self.task}/{name}/stat")
            return None
        sched = self._sched(name) if self.sched else (None, None)
        if isinstance(sched, _Vanished):
            return None
        migrated, faults = sched
        return ThreadReading(tid, stat.processor, stat.ticks, run_ns, migrated,
                             slices, stat.state in _RUNNABLE, faults)

    def _schedstat(self, name: str) -> tuple[int, int] | _Vanished | None:
        """Return the thread's (run ns, timeslices), None when they are not usable
        (not accounted, malformed: reported, or no such file on this kernel: not read
        again this pass), or ``_VANISHED``."""
        try:
            counters = parse_schedstat(self.td.read(name + "/schedstat", "schedstat"))
        except ThreadMissing:
            if not self.td.exists(name):
                self.vanished = True
                return _VANISHED
            self.schedstat = False  # CONFIG_SCHED_INFO off
            return None
        if counters is None:
            self.parse_error("schedstat", f"{self.task}/{name}/schedstat")
            return None
        if counters.run_ns:  # 0: not accounted (or never ran)
            return counters.run_ns, counters.timeslices
        return None

    def _sched(self, name: str) -> tuple[int | None, SchedFaults | None] | _Vanished:
        """Return the thread's pages migrated and fault block (either None when not
        read or not parsed), or ``_VANISHED``. A legacy-form file closes the gate."""
        gate = self.gate
        migrated: int | None = None
        faults: SchedFaults | None = None
        try:
            data = self.td.read(name + "/sched", "sched")
        except ThreadMissing:
            if not self.td.exists(name):
                self.vanished = True
                return _VANISHED
            self.sched = False  # CONFIG_SCHED_DEBUG off
            return None, None
        migrated, bad = find_pages_migrated(data)
        if gate.faults or migrated is None:
            faults = find_numa_faults(data)
            if faults.numa_format == "legacy":
                gate.read = self.sched = False
                gate.refused = True
                migrated, bad = None, False
            bad = bad or faults.error_count > 0
            if not gate.faults:
                faults = None
        if bad:
            self.parse_error("sched", f"{self.task}/{name}/sched")
        return migrated, faults


def read_affinities(files: ProcessFiles, tids: Iterable[int], syscall: bool,
                    parse_error: Callable[[str, str], None]
                    ) -> dict[int, frozenset[int] | None]:
    """Return each thread's allowed CPUs by tid (None: malformed), read every scan whatever
    the process's CPU clock says: a mask changes while a thread sleeps (``taskset -a -p``,
    a cpuset change). A thread gone meanwhile is left out.

    With ``syscall`` (the procfs root is the caller's own PID namespace) one
    ``sched_getaffinity`` per thread; elsewhere (a fixture tree, another namespace) the
    ``Cpus_allowed_list`` line of ``task/<tid>/status``. Raises Denied or another
    SourceError like a thread file read.
    """
    out: dict[int, frozenset[int] | None] = {}
    if syscall:
        for tid in tids:
            try:
                out[tid] = thread_affinity(tid)
            except ThreadMissing:
                continue
        return out
    with TaskDir(files) as td:
        for tid in tids:
            try:
                raw = td.read(f"{tid}/status", "status")
            except ThreadMissing:
                continue
            mask = parse_pid_status_cpus_allowed(raw)
            if mask is None:
                parse_error("status", f"{td.path}/{tid}/status")
            out[tid] = mask
    return out
