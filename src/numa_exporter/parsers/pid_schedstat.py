"""Parser for ``/proc/<pid>/task/<tid>/schedstat`` (``proc_pid_schedstat`` in fs/proc/base.c).

One line, ``<ns on CPU> <ns waiting on a runqueue> <timeslices>``: the task's
``se.sum_exec_runtime``, ``sched_info.run_delay`` and ``sched_info.pcount`` (times it was put
on a CPU). The file exists with CONFIG_SCHED_INFO (selected by CONFIG_SCHEDSTATS and
CONFIG_TASK_DELAY_ACCT); kernels before 5.14 print ``0 0 0`` when neither schedstats nor delay
accounting is on.
"""

from __future__ import annotations

from dataclasses import dataclass

_MAX_DIGITS = 20


@dataclass(frozen=True, slots=True)
class Schedstat:
    """The three counters of a schedstat line."""

    run_ns: int
    wait_ns: int
    timeslices: int


def parse_schedstat(data: bytes) -> Schedstat | None:
    """Return the counters of a schedstat line, or None when it is malformed."""
    fields = data.split()
    if len(fields) != 3:
        return None
    run, wait, slices = fields  # checked one by one: this runs for every thread every scan
    if (run.isdigit() and wait.isdigit() and slices.isdigit() and len(run) <= _MAX_DIGITS
            and len(wait) <= _MAX_DIGITS and len(slices) <= _MAX_DIGITS):
        return Schedstat(int(run), int(wait), int(slices))
    return None
