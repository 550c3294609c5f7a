"""The shape of one entry of the metric contract.

Each collector module under ``collectors/`` declares the families it may emit as
``MetricSpec`` values; ``collectors/registry.py`` lists the collectors and gathers their
specs (``SPECS``). Families whose names are derived from what the kernel prints (one counter
per ``/proc/vmstat`` field) are described by a pattern entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "info", "histogram"]
# How much of a per-process family a process below --process.detail-above gets:
# "summary": every sample; "full": none (a breakdown kept for processes at full detail).
Level = Literal["summary", "full"]
# Which samples of value 0 are left out: "never", "summary" (those of processes below
# --process.detail-above), "always" (a per-node breakdown where 0 says nothing).
DropZero = Literal["never", "summary", "always"]
# An upper bound on the values of a label per process (or per host for host families):
# a number, or "nodes" (the host's NUMA node count). A label not listed takes one value.
Bound = int | Literal["nodes"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: ``name`` is the exposition name (counters include ``_total``).

    ``pattern`` entries carry ``<field>`` in their name and help, filled per kernel field.
    ``level`` and ``drop_zero`` apply to families with a ``pid`` label (the series budget,
    ``collectors/detail.py``); ``bounds`` feed the budget table (``tools/metrics_table.py``).
    """

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    pattern: bool = False
    level: Level = "summary"
    drop_zero: DropZero = "never"
    bounds: tuple[tuple[str, Bound], ...] = ()

    @property
    def family_name(self) -> str:
        """Return the name prometheus-client expects (counters/info without their suffix)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name
