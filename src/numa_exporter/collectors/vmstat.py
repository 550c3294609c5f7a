"""Collector ``vmstat``: the NUMA and page-migration counters of /proc/vmstat."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

from .base import CollectorDef
from .families import pattern_family

FIELD = MetricSpec(
    "numa_vmstat_<field>_total", "counter",
    "Kernel counter <field> from /proc/vmstat (one family per numa_*, pgmigrate_*, "
    "thp_migration_*, pgpromote_* and pgdemote_* field the kernel prints).",
    pattern=True, bounds=(("<field>", 23),))  # the fields a 7.3 kernel prints (6.12: 21)

SPECS = (FIELD,)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield one counter family per vmstat field the scan read."""
    for name, v in sorted(snap.system.vmstat.items()):
        f = pattern_family(FIELD, name)
        f.add_metric([], v)
        yield f


COLLECTOR = CollectorDef("vmstat", "/proc/vmstat NUMA and migration counters", SPECS, emit)
