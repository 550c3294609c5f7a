"""Tier reads of the host: node classes, memory tiers, HMAT, the kernel release (static:
read at start and on each topology change) and per-node promotion/demotion counters and the
demotion switch (read each scan)."""

from __future__ import annotations

from functools import partial

from numa_exporter.model.tiers.host import SystemTiers
from numa_exporter.model.tiers.places import MemoryTiers, NodeClasses
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.cpulist import MAX_NODE_ID, parse_cpulist
from numa_exporter.parsers.demotion_enabled import parse_demotion_enabled
from numa_exporter.parsers.node_access import NodeAccess, parse_node_access
from numa_exporter.parsers.osrelease import parse_osrelease
from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.files import read_optional
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.sysfs import MemoryTierSysFS, NodeSysFS

# node<N>/vmstat fields exported per node: promotion and demotion between tiers. Its numa_*
# lines are the node's numastat counters, already exported as numa_node_*_pages_total.
NODE_VMSTAT_PREFIXES = ("pgpromote_", "pgdemote_")
_CLASS_FILES = {"possible": "possible", "online": "online", "cpu": "has_cpu",
                "normal_memory": "has_normal_memory", "memory": "has_memory",
                "generic_initiator": "has_generic_initiator"}


def _node_list(data: bytes) -> frozenset[int] | None:
    """Return the ids of a kernel node list (an empty line is an empty set)."""
    if not data.strip():
        return frozenset()
    return parse_cpulist(data, MAX_NODE_ID)


def read_node_classes(nodes: NodeSysFS, errors: ErrorReporter) -> NodeClasses:
    """Return the kernel's node state lists (None for each one absent or unreadable)."""
    found: dict[str, frozenset[int] | None] = {}
    for name, file in _CLASS_FILES.items():
        found[name] = errors.read_parsed("node_state", f"{nodes.root}/{file}",
                                         partial(nodes.state, file), _node_list)
    return NodeClasses(**found)


def read_memory_tiers(src: MemoryTierSysFS, errors: ErrorReporter) -> MemoryTiers:
    """Return tier id -> nodes (empty on kernels without memory tiering, before 6.1)."""
    tiers: dict[int, frozenset[int]] = {}
    try:
        ids = src.tier_ids()
    except SourceError as err:
        errors.read(err)
        return MemoryTiers()
    for tier in ids:
        got = errors.read_parsed("memory_tier", f"{src.root}/memory_tier{tier}/nodelist",
                                 partial(src.nodelist, tier), _node_list)
        if got:
            tiers[tier] = got
    return MemoryTiers(tiers)


def read_node_access(nodes: NodeSysFS, topology: Topology, errors: ErrorReporter
                     ) -> dict[tuple[int, int], NodeAccess]:
    """Return the HMAT performance of each node's memory by (node, access class)."""
    out: dict[tuple[int, int], NodeAccess] = {}
    if not topology.numa:
        return out
    for node in topology.nodes:
        try:
            classes = nodes.access_classes(node)
            for c in classes:
                got = parse_node_access(c, nodes.access_attributes(node, c),
                                        nodes.access_initiators(node, c))
                if got.error_count:
                    errors.parse("node_access", f"{nodes.root}/node{node}/access{c}",
                                 got.error_count)
                out[(node, c)] = got
        except SourceError as err:
            errors.read(err)
    return out


def read_system_tiers(proc: ProcFS, nodes: NodeSysFS, tiers: MemoryTierSysFS,
                      topology: Topology, errors: ErrorReporter) -> SystemTiers:
    """Return the host's node classes, memory tiers, HMAT and kernel release."""
    path = proc.root / "sys" / "kernel" / "osrelease"  # absent only in partial trees
    release = errors.read_parsed("osrelease", str(path),
                                 partial(read_optional, path, "osrelease"), parse_osrelease)
    return SystemTiers(classes=read_node_classes(nodes, errors),
                       tiers=read_memory_tiers(tiers, errors),
                       access=read_node_access(nodes, topology, errors),
                       release=release)


def tier_counters(values: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    """Return node -> its promotion/demotion counters (``NODE_VMSTAT_PREFIXES``) of the
    node vmstat ``values`` (every counter of each node, as read once per scan)."""
    return {node: {k: v for k, v in fields.items() if k.startswith(NODE_VMSTAT_PREFIXES)}
            for node, fields in values.items()}


def read_node_vmstat(nodes: NodeSysFS, topology: Topology, errors: ErrorReporter
                     ) -> dict[int, dict[str, int]]:
    """Return node -> its promotion/demotion counters (``NODE_VMSTAT_PREFIXES``)."""
    out: dict[int, dict[str, int]] = {}
    if not topology.numa:
        return out
    for node in topology.nodes:
        got = errors.read_parsed("node_vmstat", f"{nodes.root}/node{node}/vmstat",
                                 partial(nodes.vmstat, node), parse_vmstat)
        if got is not None:
            out[node] = {k: v for k, v in got.values.items()
                         if k.startswith(NODE_VMSTAT_PREFIXES)}
    return out


def read_demotion_enabled(tiers: MemoryTierSysFS, errors: ErrorReporter) -> bool | None:
    """Return whether reclaim demotes to a slower tier (None before 5.18 or unreadable)."""
    return errors.read_parsed("demotion_enabled", str(tiers.demotion),
                              tiers.demotion_enabled, parse_demotion_enabled)
