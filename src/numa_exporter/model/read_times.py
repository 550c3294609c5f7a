"""Per-process read times as plain histogram counts (no Prometheus types in the model).

The scanner observes each process read into a :class:`ReadTimeHistogram`; every snapshot
carries its :class:`ReadTimes` as they were when the scan ended, and the exporter collector
turns them into a histogram family.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

# Upper bounds, in seconds, of the per-process read-time histogram.
READ_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True, slots=True)
class ReadTimes:
    """Read times counted since ``created`` (Unix time).

    ``counts[i]`` is the number of reads that took at most ``bounds[i]`` seconds and more
    than ``bounds[i - 1]`` (not cumulative); the last count is of reads above every bound.
    """

    bounds: tuple[float, ...] = READ_BUCKETS
    counts: tuple[int, ...] = (0,) * (len(READ_BUCKETS) + 1)
    sum: float = 0.0
    created: float = 0.0

    @property
    def count(self) -> int:
        """Return the number of reads counted."""
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """Return (upper bound, reads at most that long) per bound, ``inf`` last."""
        out: list[tuple[float, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


@dataclass(slots=True)
class ReadTimeHistogram:
    """The running counts the scanner observes into."""

    bounds: tuple[float, ...] = READ_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(READ_BUCKETS) + 1))
    total: float = 0.0
    created: float = field(default_factory=time.time)

    def observe(self, seconds: float) -> None:
        """Count one read that took ``seconds`` (negative clock steps count as 0)."""
        v = max(seconds, 0.0)
        self.counts[bisect.bisect_left(self.bounds, v)] += 1
        self.total += v

    def freeze(self) -> ReadTimes:
        """Return the counts as they are now."""
        return ReadTimes(self.bounds, tuple(self.counts), self.total, self.created)
