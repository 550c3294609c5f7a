"""Collector ``drift``: placement change since warm-up and page movement per node."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

from .base import CollectorDef
from .families import family

P = ("pid",)  # comm is on numa_process_info: a rename mints no series here

BASELINE = MetricSpec(
    "numa_process_baseline_remote_memory_ratio", "gauge",
    "Remote memory ratio of the process recorded once it had warmed up (old enough, RSS "
    "stable), 0-1; absent until then.", P, level="full")
CHANGE = MetricSpec(
    "numa_process_remote_memory_ratio_change", "gauge",
    "Current remote memory ratio of the process minus its warmed-up baseline, -1 to 1 "
    "(positive: drifted remote).", P)
ARRIVED = MetricSpec(
    "numa_process_node_arrived_bytes_total", "counter",
    "Bytes of the process that moved onto the node from another node (migration: not "
    "allocation, nor memory freed and faulted again on another node), summed over "
    "consecutive reads: a full read counts the part of the per-node changes that balances "
    "out, a sampled read the followed pages it saw change node; in each interval at most "
    "what can have migrated of it (the host's pgmigrate_success less NUMA balancing's "
    "numa_pages_migrated, plus its own threads' numa_pages_migrated), unless it took no "
    "fault (docs/movement.md).",
    (*P, "node"), level="full",
    bounds=(("node", "nodes"),))
DEPARTED = MetricSpec(
    "numa_process_node_departed_bytes_total", "counter",
    "Bytes of the process that moved off the node to another node (migration: not freeing), "
    "counted as numa_process_node_arrived_bytes_total counts them.", (*P, "node"), level="full",
    bounds=(("node", "nodes"),))

SPECS = (BASELINE, CHANGE, ARRIVED, DEPARTED)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the drift families of the snapshot's processes."""
    base, change, arr, dep = (family(s) for s in SPECS)
    for p in snap.processes:
        if p.drift is None:
            continue
        lv = [str(p.pid)]
        if p.drift.baseline_remote_ratio is not None:
            base.add_metric(lv, p.drift.baseline_remote_ratio)
            change.add_metric(lv, p.locality.remote_ratio - p.drift.baseline_remote_ratio)
        for node, b in sorted(p.drift.arrived_bytes.items()):
            arr.add_metric([*lv, str(node)], b)
        for node, b in sorted(p.drift.departed_bytes.items()):
            dep.add_metric([*lv, str(node)], b)
    yield from (base, change, arr, dep)


COLLECTOR = CollectorDef(
    "drift", "baseline, drift since warm-up and page movement (migration) per node", SPECS,
    emit)
