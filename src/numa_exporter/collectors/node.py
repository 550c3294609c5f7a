"""Collector ``node``: per-node memory, numastat page counters, CPUs, distances, huge pages."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.readers.node_reclaim import RECLAIMED as RECLAIMED_FIELDS
from numa_exporter.readers.node_reclaim import REFILL, SCANNED

from .base import CollectorDef
from .families import family

_NUMASTAT = "/sys/devices/system/node/node<N>/numastat"


def _numastat(field: str, name: str, what: str) -> tuple[str, MetricSpec]:
    return field, MetricSpec(name, "counter", f"{what} ({field} in {_NUMASTAT}).", ("node",))


# numastat field -> its counter; the file counts pages. Fields not listed are not exported.
NUMASTAT = dict((
    _numastat("numa_hit", "numa_node_hit_pages_total",
              "Pages allocated on the node that were meant for it"),
    _numastat("numa_miss", "numa_node_miss_pages_total",
              "Pages allocated on the node that were meant for another node"),
    _numastat("numa_foreign", "numa_node_foreign_pages_total",
              "Pages meant for the node that were allocated on another node"),
    _numastat("interleave_hit", "numa_node_interleave_hit_pages_total",
              "Pages the interleave policy meant for the node and allocated on it"),
    _numastat("local_node", "numa_node_local_pages_total",
              "Pages allocated on the node for a process running on the node"),
    _numastat("other_node", "numa_node_other_pages_total",
              "Pages allocated on the node for a process running on another node"),
))
MEMORY = MetricSpec(
    "numa_node_memory_bytes", "gauge",
    "Byte-valued field of node<N>/meminfo, by field name (MemTotal, MemFree, FilePages, ...).",
    ("node", "field"), bounds=(("node", "nodes"), ("field", 32)))  # 32: a 6.1 kernel's
CPUS = MetricSpec(
    "numa_node_cpus", "gauge",
    "Online CPUs of the node (0 for memory-only nodes such as CXL memory).", ("node",))
DISTANCE = MetricSpec(
    "numa_node_distance", "gauge",
    "SLIT distance from node to to_node, relative to 10 for the node itself.",
    ("node", "to_node"), bounds=(("node", "nodes"), ("to_node", "nodes")))
HUGEPAGES = MetricSpec(
    "numa_node_hugepages", "gauge",
    "Huge pages of the node by page size and state (total, free, surplus).",
    ("node", "page_size_bytes", "state"),
    bounds=(("node", "nodes"), ("page_size_bytes", 2), ("state", 3)))

WI_WEIGHT = MetricSpec(
    "numa_node_weighted_interleave_weight", "gauge",
    "The node's weight for the weighted interleave memory policy, 1-255 "
    "(/sys/kernel/mm/mempolicy/weighted_interleave/node<N>; 6.9+, absent before).",
    ("node",))
WI_AUTO = MetricSpec(
    "numa_weighted_interleave_auto", "gauge",
    "1 when the kernel sets the weighted interleave weights from the firmware's bandwidth "
    "figures, else 0 (/sys/kernel/mm/mempolicy/weighted_interleave/auto; 6.16+).", ())

_RECLAIM = "/sys/devices/system/node/node<N>/vmstat; 7.1+, absent on older kernels"
RECLAIM_SCANNED = MetricSpec(
    "numa_node_reclaim_scanned_pages_total", "counter",
    "Pages of the node that reclaim scanned, by reclaimer: kswapd, direct (an allocating "
    f"task), khugepaged, proactive (memory.reclaim) (pgscan_<reclaimer> in {_RECLAIM}).",
    ("node", "reclaimer"), bounds=(("node", "nodes"), ("reclaimer", 4)))
RECLAIMED = MetricSpec(
    "numa_node_reclaimed_pages_total", "counter",
    "Pages of the node that reclaim freed, by reclaimer (pgsteal_<reclaimer> in "
    f"{_RECLAIM}).",
    ("node", "reclaimer"), bounds=(("node", "nodes"), ("reclaimer", 4)))
RECLAIM_REFILL = MetricSpec(
    "numa_node_reclaim_refill_pages_total", "counter",
    "Pages of the node's active LRU lists that reclaim scanned to refill the inactive ones "
    f"(pgrefill in {_RECLAIM}).", ("node",))

SPECS = (MEMORY, *NUMASTAT.values(), CPUS, DISTANCE, HUGEPAGES, WI_WEIGHT, WI_AUTO,
         RECLAIM_SCANNED, RECLAIMED, RECLAIM_REFILL)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the per-node families of the snapshot's system sample."""
    sysm = snap.system
    topo = sysm.topology
    mem = family(MEMORY)
    for node, fields in sorted(sysm.node_meminfo.items()):
        for name, b in sorted(fields.items()):
            mem.add_metric([str(node), name], b)
    yield mem
    counters = {field: family(s) for field, s in NUMASTAT.items()}
    seen: set[str] = set()
    for node, values in sorted(sysm.node_numastat.items()):
        for field, v in sorted(values.items()):
            if field in counters:
                counters[field].add_metric([str(node)], v)
                seen.add(field)
    yield from (f for field, f in counters.items() if field in seen)
    if topo.numa:
        cpus = family(CPUS)
        for node in topo.nodes:
            cpus.add_metric([str(node)], len(topo.cpus.get(node, ())))
        yield cpus
    dist = family(DISTANCE)
    for (a, b), d in sorted(topo.distance.items()):
        dist.add_metric([str(a), str(b)], d)
    yield dist
    hp = family(HUGEPAGES)
    for node, sizes in sorted(sysm.hugepages.items()):
        for size, h in sorted(sizes.items()):
            for state, hv in (("total", h.total), ("free", h.free), ("surplus", h.surplus)):
                if hv is not None:
                    hp.add_metric([str(node), str(size), state], hv)
    yield hp
    yield from _reclaim(sysm.node_reclaim)
    wi = sysm.weighted_interleave
    if wi is not None:  # absent before 6.9: no empty family
        weights = family(WI_WEIGHT)
        for node, w in sorted(wi.weights.items()):
            weights.add_metric([str(node)], w)
        yield weights
        if wi.auto is not None:
            auto = family(WI_AUTO)
            auto.add_metric([], int(wi.auto))
            yield auto


def _reclaim(counters: dict[int, dict[str, int]]) -> Iterator[Metric]:
    """Yield the node reclaim families where the kernel prints them (none before 7.1)."""
    if not counters:
        return
    scanned, reclaimed, refill = family(RECLAIM_SCANNED), family(RECLAIMED), \
        family(RECLAIM_REFILL)
    for node, fields in sorted(counters.items()):
        for name, v in sorted(fields.items()):
            if name in SCANNED:
                scanned.add_metric([str(node), SCANNED[name]], v)
            elif name in RECLAIMED_FIELDS:
                reclaimed.add_metric([str(node), RECLAIMED_FIELDS[name]], v)
            elif name == REFILL:
                refill.add_metric([str(node)], v)
    yield from (scanned, reclaimed, refill)


COLLECTOR = CollectorDef(
    "node", "node memory, numastat page counters, CPUs, distances, huge pages, weighted "
    "interleave weights, reclaim counters (7.1+)", SPECS, emit)
