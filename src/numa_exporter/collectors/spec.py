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
# How much of a per-process family a process at the summary level (not at full detail,
# collectors/detail.py) gets: "summary": every sample (summed over the spec's ``fold``
# label where it names one); "full": none (a breakdown kept for processes at full detail).
Level = Literal["summary", "full"]
# Which samples of value 0 are left out: "never", "summary" (those of processes below
# --process.detail-above), "always" (a per-node breakdown where 0 says nothing).
DropZero = Literal["never", "summary", "always"]
# An upper bound on the values of a label per process (or per host for host families):
# a number, or "nodes" (the host's NUMA node count). A label not listed takes one value.
Bound = int | Literal["nodes"]
FOLDED = "all"  # the value of a ``fold`` label on a summary-level process's sums


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: ``name`` is the exposition name (counters include ``_total``).

    ``pattern`` entries carry ``<field>`` in their name and help, filled per kernel field.
    ``level``, ``drop_zero`` and ``fold`` apply to families with a ``pid`` label (the series
    budget, ``collectors/detail.py``): ``fold`` names a label over which a summary-level
    process's samples are summed, the sum served with that label at ``FOLDED``;
    ``bounds`` feed the budget table (``tools/series_budget.py``).
    """

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    pattern: bool = False
    level: Level = "summary"
    drop_zero: DropZero = "never"
    bounds: tuple[tuple[str, Bound], ...] = ()
    fold: str | None = None

    @property
    def family_name(self) -> str:
        """Return the name prometheus-client expects (counters/info without their suffix)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name
