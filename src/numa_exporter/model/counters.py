"""Per-process counters summed from per-thread kernel counters, kept monotonic.

The kernel keeps ``numa_pages_migrated`` per thread and drops it when the thread exits, so a
plain sum over the live threads falls whenever a thread ends. A Prometheus counter must not
fall while the process lives: the last value seen for a thread that is gone (or whose tid
came back with a smaller count) is folded into a retired sum.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ThreadSum:
    """A process's counter: ``retired`` from threads gone, plus the last value per live tid."""

    retired: int = 0
    live: Mapping[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Return the process total (retired plus the live threads)."""
        return self.retired + sum(self.live.values())


def advance(prev: ThreadSum, now: Mapping[int, int], listed: Collection[int]) -> ThreadSum:
    """Return the state after a scan read the per-thread values ``now`` of the ``listed`` tids.

    A thread no longer listed retires with its last value; a listed thread whose value could
    not be read this time keeps its last value; a tid whose value went down is a new thread
    under a reused tid, so the old thread's value retires. The total never falls.
    """
    retired = prev.retired
    live = dict(now)
    for tid, value in prev.live.items():
        seen = now.get(tid)
        if seen is None:
            if tid in listed:
                live[tid] = value
            else:
                retired += value
        elif seen < value:
            retired += value
    return ThreadSum(retired=retired, live=live)
