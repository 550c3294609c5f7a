"""Time for one scan: schedules on the monotonic clock, wall time only for timestamps.

The wall clock steps (NTP, a restored VM, an operator): a schedule or an age computed from it
freezes a process for as long as the clock went back, or warms a new one up at once when it
went forward. Schedules (the cadence's next read, full-read intervals) are therefore kept in
monotonic seconds; ages (the drift warm-up) are measured on a *steady* wall clock: the wall
time read at the scanner's first scan plus the monotonic time since, which does not move when
the wall clock steps. Wall time is exported as timestamps only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScanTime:
    """One reading: ``wall`` (Unix seconds, for timestamps), ``mono`` (monotonic seconds, for
    schedules) and ``steady`` (Unix seconds that follow ``mono`` from an anchor, for ages)."""

    wall: float
    mono: float
    steady: float

    @classmethod
    def unanchored(cls, wall: float, mono: float) -> ScanTime:
        """Return a reading whose steady time is its wall time (a one-off read: inspect)."""
        return cls(wall, mono, wall)

    def wall_of(self, mono: float) -> float:
        """Return the wall time at which the monotonic clock shows ``mono`` (for exporting a
        schedule as a timestamp), assuming no further step."""
        return self.wall + (mono - self.mono)


class SteadyClock:
    """Anchors the steady clock at its first reading."""

    def __init__(self) -> None:
        self._anchor: tuple[float, float] | None = None

    def read(self, wall: float, mono: float) -> ScanTime:
        """Return the reading for these clock values (the first one sets the anchor)."""
        if self._anchor is None:
            self._anchor = (wall, mono)
        wall0, mono0 = self._anchor
        return ScanTime(wall, mono, wall0 + (mono - mono0))
