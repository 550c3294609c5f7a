"""Collector ``balancing``: the kernel.numa_balancing mode and its promote rate limit."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

from .base import CollectorDef
from .families import family

MODE = MetricSpec(
    "numa_balancing_mode", "gauge",
    "kernel.numa_balancing: 0 off, 1 normal, 2 memory tiering, 3 both; absent when the "
    "kernel has no NUMA balancing.")
PROMOTE_LIMIT = MetricSpec(
    "numa_balancing_promote_rate_limit_bytes_per_second", "gauge",
    "kernel.numa_balancing_promote_rate_limit_MBps in bytes per second, where present.")

SPECS = (MODE, PROMOTE_LIMIT)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the balancing settings the scan read."""
    if snap.system.balancing_mode is not None:
        f = family(MODE)
        f.add_metric([], snap.system.balancing_mode)
        yield f
    if snap.system.promote_rate_limit_bytes is not None:
        f = family(PROMOTE_LIMIT)
        f.add_metric([], snap.system.promote_rate_limit_bytes)
        yield f


COLLECTOR = CollectorDef(
    "balancing", "kernel.numa_balancing mode and promote rate limit", SPECS, emit)
