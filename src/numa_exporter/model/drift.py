"""Drift after warm-up: a process's baseline placement and its net page movement per node.

One :class:`DriftTrack` belongs to one process identity (pid + start time); its owner (the
per-process state) decides when a process is new.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from numa_exporter.model.snapshot import Drift

MIN_AGREEING_SCANS = 3  # the baseline is a median: one bad scan among three cannot set it


@dataclass(frozen=True, slots=True)
class WarmupRule:
    """A process is warm once it is ``age`` seconds old and its RSS stayed within
    ``tolerance`` (relative) over the last ``scans`` scans."""

    age: float = 300.0
    scans: int = 4
    tolerance: float = 0.05

    @property
    def window(self) -> int:
        """Return how many recent scans the warm-up looks at."""
        return max(self.scans, MIN_AGREEING_SCANS)


@dataclass(slots=True)
class DriftTrack:
    """What one process's drift needs from earlier scans."""

    rss: deque[int]
    ratios: deque[float]
    last_nodes: dict[int, int] | None = None
    arrived: dict[int, int] = field(default_factory=dict)
    departed: dict[int, int] = field(default_factory=dict)
    baseline: float | None = None

    @classmethod
    def new(cls, rule: WarmupRule) -> DriftTrack:
        """Return an empty track sized for the rule."""
        return cls(rss=deque(maxlen=rule.window), ratios=deque(maxlen=rule.window))

    def observe(self, rule: WarmupRule, age: float | None, rss: int,
                node_bytes: Mapping[int, int], remote_ratio: float) -> Drift:
        """Return the drift after recording this scan's placement.

        ``age`` is the process's age in seconds (None when the boot time is unknown: the
        process is then never taken as warm). The baseline is the median remote ratio of the
        last warm-up window, taken once the process is old enough and its RSS is stable.
        """
        if self.last_nodes is not None:
            for node in set(self.last_nodes) | set(node_bytes):
                delta = node_bytes.get(node, 0) - self.last_nodes.get(node, 0)
                if delta > 0:
                    self.arrived[node] = self.arrived.get(node, 0) + delta
                elif delta < 0:
                    self.departed[node] = self.departed.get(node, 0) - delta
        self.last_nodes = dict(node_bytes)
        self.rss.append(rss)
        self.ratios.append(remote_ratio)
        if self.baseline is None and age is not None and self._warm(rule, age):
            self.baseline = statistics.median(self.ratios)
        return Drift(self.baseline, dict(self.arrived), dict(self.departed))

    def _warm(self, rule: WarmupRule, age: float) -> bool:
        if age < rule.age or len(self.ratios) < rule.window:
            return False
        recent = list(self.rss)[-max(rule.scans, 1):]
        lo, hi = min(recent), max(recent)
        return hi == 0 or (hi - lo) / hi <= rule.tolerance
