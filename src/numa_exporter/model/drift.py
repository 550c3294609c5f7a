"""Drift after warm-up: a baseline per process (pid + start time) and net page movement."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from numa_exporter.model.snapshot import Drift


@dataclass(frozen=True, slots=True)
class WarmupRule:
    """A process is warm once it is ``age`` seconds old and its RSS stayed within
    ``tolerance`` (relative) over the last ``scans`` scans."""

    age: float = 300.0
    scans: int = 4
    tolerance: float = 0.05


@dataclass(slots=True)
class _Track:
    start_time: float
    rss: deque[int]
    last_nodes: dict[int, int]
    arrived: dict[int, int] = field(default_factory=dict)
    departed: dict[int, int] = field(default_factory=dict)
    baseline: float | None = None


class DriftTracker:
    """Remembers each process between scans; a new start time means a new process."""

    def __init__(self, rule: WarmupRule) -> None:
        self.rule = rule
        self._tracks: dict[int, _Track] = {}

    def observe(self, pid: int, now: float, start_time: float, rss: int,
                node_bytes: Mapping[int, int], remote_ratio: float) -> Drift:
        """Return the drift of a process after recording this scan's placement.

        A pid seen with another start time is a new process: it gets a fresh baseline.
        """
        t = self._tracks.get(pid)
        if t is None or abs(t.start_time - start_time) > 0.5:
            t = _Track(start_time=start_time, rss=deque(maxlen=max(self.rule.scans, 1)),
                       last_nodes=dict(node_bytes))
            self._tracks[pid] = t
        else:
            for node in set(t.last_nodes) | set(node_bytes):
                delta = node_bytes.get(node, 0) - t.last_nodes.get(node, 0)
                if delta > 0:
                    t.arrived[node] = t.arrived.get(node, 0) + delta
                elif delta < 0:
                    t.departed[node] = t.departed.get(node, 0) - delta
            t.last_nodes = dict(node_bytes)
        t.rss.append(rss)
        if t.baseline is None and self._warm(t, now - start_time):
            t.baseline = remote_ratio
        return Drift(t.baseline, dict(t.arrived), dict(t.departed))

    def _warm(self, t: _Track, age: float) -> bool:
        if age < self.rule.age or len(t.rss) < self.rule.scans:
            return False
        lo, hi = min(t.rss), max(t.rss)
        return hi == 0 or (hi - lo) / hi <= self.rule.tolerance

    def forget_except(self, alive: frozenset[int]) -> None:
        """Drop every process whose pid is not in ``alive``."""
        for pid in list(self._tracks):
            if pid not in alive:
                del self._tracks[pid]
