"""Every collector, in exposition order. A new collector is one module listed here.

The ``--[no-]collector.NAME`` flags (``COLLECTORS``), the gating at scrape time and the
README's metric reference are all derived from this list.
"""

from __future__ import annotations

from numa_exporter.collectors.spec import MetricSpec

from . import (
    accelerator,
    balancing,
    binding,
    cgroup,
    damon,
    drift,
    exporter,
    health,
    kubernetes,
    node,
    process,
    scrape,
    tiers,
    vmstat,
)
from .base import CollectorDef

ALL: tuple[CollectorDef, ...] = (
    exporter.COLLECTOR,
    process.COLLECTOR,
    binding.COLLECTOR,
    drift.COLLECTOR,
    accelerator.COLLECTOR,
    cgroup.COLLECTOR,
    kubernetes.COLLECTOR,
    vmstat.COLLECTOR,
    node.COLLECTOR,
    balancing.COLLECTOR,
    tiers.COLLECTOR,
    damon.COLLECTOR,
)

# Names of the collectors a flag turns on and off (all default on).
COLLECTORS: tuple[str, ...] = tuple(c.name for c in ALL if c.switchable)
# ... of which these are off unless their flag turns them on
DEFAULT_OFF: frozenset[str] = frozenset(c.name for c in ALL if not c.default_on)

# Every family of every collector, as (collector name, spec), in exposition order; the
# per-collector success and duration families (emitted by the SnapshotCollector for every
# collector) and the daemon's liveness families (read at every scrape) are listed under
# "exporter".
SPECS_BY_COLLECTOR: tuple[tuple[str, MetricSpec], ...] = (
    *((c.name, s) for c in ALL for s in c.specs),
    *(("exporter", s) for s in scrape.SPECS),
    *(("exporter", s) for s in health.SPECS),
)
SPECS: tuple[MetricSpec, ...] = tuple(s for _, s in SPECS_BY_COLLECTOR)


def by_name() -> dict[str, MetricSpec]:
    """Return every spec keyed by exposition name."""
    return {s.name: s for s in SPECS}


def get(name: str) -> CollectorDef:
    """Return the collector called ``name``; KeyError for an unknown name."""
    for c in ALL:
        if c.name == name:
            return c
    raise KeyError(name)
