"""One thread as read in one scan (kept between scans in the process's state)."""

from __future__ import annotations

from dataclasses import dataclass

from numa_exporter.parsers.pid_sched import SchedFaults


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
    faults: SchedFaults | None = None  # the NUMA fault block of its sched; None: not read
