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


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: ``name`` is the exposition name (counters include ``_total``).

    ``pattern`` entries carry ``<field>`` in their name and help, filled per kernel field.
    """

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    pattern: bool = False

    @property
    def family_name(self) -> str:
        """Return the name prometheus-client expects (counters/info without their suffix)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name
