"""Per-thread readings of one process: last CPU, CPU time and NUMA migration counter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from numa_exporter.parsers.pid_sched import parse_pid_sched
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.sources.errors import Gone
from numa_exporter.sources.procfs import ProcessFiles


@dataclass(frozen=True, slots=True)
class ThreadReading:
    """One thread's state at a scan; ``ticks`` is utime + stime in clock ticks."""

    tid: int
    processor: int | None
    ticks: int
    run_ns: int | None
    pages_migrated: int | None


def read_threads(files: ProcessFiles, previous: Mapping[int, ThreadReading],
                 parse_error: Callable[[str, str], None]) -> list[ThreadReading]:
    """Return a reading per live thread; raise Gone/Denied/SourceError for the listing.

    Threads that exit between listing and reading are left out.
    """
    out: list[ThreadReading] = []
    for tid in files.tids():
        try:
            tstat = parse_pid_stat(files.task_stat(tid))
        except Gone:
            continue
        if tstat is None:
            parse_error("task_stat", f"{files.path}/task/{tid}/stat")
            continue
        migrated: int | None = None
        try:
            raw = files.task_sched(tid)
        except Gone:
            continue
        if raw is not None:
            sched = parse_pid_sched(raw)
            if sched.error_count:
                parse_error("sched", f"{files.path}/task/{tid}/sched")
            migrated = sched.numa_pages_migrated
        out.append(ThreadReading(tid, tstat.processor, tstat.utime + tstat.stime, None,
                                 migrated))
    return out
