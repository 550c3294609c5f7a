"""Per-process read costs, part of collector ``process``: what chose each process's reader.

The cadence planner (``model/cadence.py``) samples a process when the longest mmap-lock hold
of its full read is over ``--placement.hold-budget``, and otherwise keeps the reader that
measured cheaper; these families show both measured costs and the estimated hold.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.cadence import Method
from numa_exporter.model.snapshot import Snapshot

from .families import family

READ_CPU = MetricSpec(
    "numa_process_read_cpu_seconds", "gauge",
    "CPU seconds the exporter's last read of the process's placement took, by reader (full: "
    "numa_maps; sampled: maps and move_pages); absent for a reader not measured yet.",
    ("pid", "reader"), level="full", bounds=(("reader", 2),))
HOLD = MetricSpec(
    "numa_process_placement_hold_seconds", "gauge",
    "Estimated longest hold of the process's mmap lock by one read() of its numa_maps (the "
    "walk of its largest mapping); above --placement.hold-budget the placement is sampled.",
    ("pid",), level="full")

REASON = MetricSpec(
    "numa_process_placement_reason_info", "info",
    "Always 1; why the process's reader (numa_process_placement_info) was chosen: hold (a "
    "full read's lock hold is over --placement.hold-budget), cost (the sampled reader "
    "measured cheaper), probe (the sampled reader tried, to measure it), cheaper (the full "
    "read: cheaper, or the only one measured), interval (--placement.full-interval), only "
    "(sampling unavailable or off), policy (a full read for the memory policies of a "
    "process otherwise sampled: --placement.policy-interval), quiet (a full read of a "
    "process otherwise sampled that the change evidence found unchanged, within "
    "--placement.policy-hold-budget: read once, then served while nothing changes).",
    ("pid", "reason"), level="full")

UNSAMPLED = MetricSpec(
    "numa_process_placement_unsampled_bytes", "gauge",
    "Resident bytes (from status) that the sampled estimate could not place on a node and "
    "that are not in numa_process_memory_bytes: a sparse mapping whose resident pages the "
    "sample, bounded by the full read's cost, did not find; absent for a full read.",
    ("pid",), level="full")

SPECS = (READ_CPU, HOLD, REASON, UNSAMPLED)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the read-cost families of the snapshot's processes."""
    cpu, hold, why, gap = (family(s) for s in SPECS)
    for p in snap.processes:
        pid = str(p.pid)
        if p.full_read_cpu is not None:
            cpu.add_metric([pid, "full"], p.full_read_cpu)
        if p.sampled_read_cpu is not None:
            cpu.add_metric([pid, "sampled"], p.sampled_read_cpu)
        if p.hold_seconds is not None:
            hold.add_metric([pid], p.hold_seconds)
        if p.placement_reason is not None:
            why.add_metric([pid, str(p.placement_reason)], 1)
        if p.unsampled_bytes is not None and p.method == Method.SAMPLED:
            gap.add_metric([pid], p.unsampled_bytes)
    yield from (cpu, hold, why, gap)
