"""Lean parser for ``/proc/<pid>/task/<tid>/stat``: only what a per-thread reading needs.

The full line is parsed by :mod:`numa_exporter.parsers.pid_stat`; a scan reads one of these per
thread, so this one splits only the fields after the command name and converts four of them.
"""

from __future__ import annotations

from dataclasses import dataclass

_MAX_DIGITS = 20  # an unsigned long long


@dataclass(frozen=True, slots=True)
class TaskStat:
    """State letter, CPU time (utime + stime, clock ticks) and last CPU of one thread."""

    state: bytes
    ticks: int
    processor: int | None  # field 39; absent on very old kernels


def _num(b: bytes) -> int | None:
    return int(b) if 0 < len(b) <= _MAX_DIGITS and b.isdigit() else None


def parse_task_stat(data: bytes) -> TaskStat | None:
    """Return the state, ticks and last CPU of a stat line, or None when it is malformed."""
    close = data.rfind(b")")  # comm may itself contain ')' and spaces
    if close < 0 or data.find(b"(") < 0:
        return None
    f = data[close + 1 :].split()
    # f[0] is field 3 (state); field N is f[N - 3]
    if len(f) < 13 or len(f[0]) != 1:
        return None
    utime, stime = _num(f[11]), _num(f[12])
    if utime is None or stime is None:
        return None
    processor = None
    if len(f) >= 37:
        processor = _num(f[36])
        if processor is None:
            return None
    return TaskStat(state=f[0], ticks=utime + stime, processor=processor)
