"""Collector ``cgroup``: per-cgroup memory.numa_stat bytes and NUMA balancing counters."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.text import label_text

from .base import CollectorDef
from .families import Family, family, pattern_family

MEMORY = MetricSpec(
    "numa_cgroup_memory_bytes", "gauge",
    "Bytes charged to the cgroup on the node, by kind, from memory.numa_stat.",
    ("cgroup", "node", "kind"), bounds=(("node", "nodes"), ("kind", 4)))
STAT = MetricSpec(
    "numa_cgroup_<field>_total", "counter",
    "Counter <field> of the cgroup from memory.stat (one family per NUMA balancing and "
    "tiering field: numa_pages_migrated, numa_pte_updates, numa_hint_faults, "
    "pgpromote_success, pgdemote_*), where the kernel has them.",
    ("cgroup",), pattern=True, bounds=(("<field>", 7),))
UNIT = MetricSpec(
    "numa_cgroup_systemd_unit_info", "info",
    "Always 1; the systemd unit the cgroup belongs to, for cgroups of a unit only (join on "
    "the cgroup label).",
    ("cgroup", "unit"))

SPECS = (MEMORY, STAT, UNIT)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the per-cgroup families of the snapshot's cgroups."""
    mem, unit = family(MEMORY), family(UNIT)
    counters: dict[str, Family] = {}
    for c in snap.cgroups:
        for (node, kind), b in sorted(c.memory.items()):
            mem.add_metric([label_text(c.path), str(node), kind], b)
        for name, v in sorted(c.counters.items()):
            if name not in counters:
                counters[name] = pattern_family(STAT, name)
            counters[name].add_metric([label_text(c.path)], v)
        if c.unit:
            unit.add_metric([label_text(c.path), label_text(c.unit)], 1)
    yield mem
    yield from (counters[name] for name in sorted(counters))
    yield unit


COLLECTOR = CollectorDef(
    "cgroup", "per-cgroup memory.numa_stat and NUMA balancing counters", SPECS, emit)
