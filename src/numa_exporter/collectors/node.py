"""Collector ``node``: per-node memory, numastat page counters, CPUs, distances, huge pages."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

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

SPECS = (MEMORY, *NUMASTAT.values(), CPUS, DISTANCE, HUGEPAGES)


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


COLLECTOR = CollectorDef(
    "node", "node memory, numastat page counters, CPUs, distances, huge pages", SPECS, emit)
