"""CPU time of a scan by stage, for the scan's log line and numa_exporter_scan_stage_seconds."""

from __future__ import annotations

from collections.abc import Callable


class StageTimer:
    """Splits the CPU time of a scan into stages, each ended by :meth:`done`."""

    def __init__(self, cpu: Callable[[], float]) -> None:
        self._cpu = cpu
        self._last = cpu()
        self._stages: list[tuple[str, float]] = []

    def done(self, stage: str) -> None:
        """End ``stage``: it took the CPU time since the previous stage ended."""
        now = self._cpu()
        self._stages.append((stage, max(now - self._last, 0.0)))
        self._last = now

    def seconds(self) -> tuple[tuple[str, float], ...]:
        """Return (stage, CPU seconds) of the stages ended so far, in order."""
        return tuple(self._stages)
