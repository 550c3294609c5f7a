"""Collector ``tiers``: locality beyond bytes on home nodes (issue 17).

Per process (``pid`` only): hinting faults per node and their remote share, bytes by place
(local / remote / far) and by memory tier, the locality ratios of each accessor (cpu,
accelerator), how many nodes its allowed CPUs and memory span. Per node: its classes (CPUs,
memory, generic initiator), memory tier, HMAT latency and bandwidth, promotion and demotion
counters; the demotion switch. Definitions: README "Locality, tiers and accessors".
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.model.tiers.places import PLACES, NodeClasses

from .base import CollectorDef
from .families import family, pattern_family

_FAULTS_FROM = "the numa_faults lines of /proc/<pid>/task/<tid>/sched"

HINT_FAULTS = MetricSpec(
    "numa_process_hint_faults", "gauge",
    "NUMA hinting faults of the process's threads on pages of the node, summed over its "
    f"threads ({_FAULTS_FROM}): exponentially decayed counts (halved every balancing scan "
    "sequence), so a gauge that goes down as well as up; absent when balancing is off, the "
    "process took no hinting fault, or the kernel does not print them; nodes at 0 are left "
    "out.", ("pid", "node"), level="full", drop_zero="always", bounds=(("node", "nodes"),))
FAULT_RATIO = MetricSpec(
    "numa_process_fault_remote_ratio", "gauge",
    "Estimate of the share of the process's memory accesses that go outside its home nodes, "
    "0-1: its decayed NUMA hinting faults on pages not on a home node (remote or far) over "
    "all of them. A fault that migrates its page counts on the page's new node, so this "
    "reads local while balancing is moving memory to the process. Absent (not 0) without "
    "hinting faults or without a home node.", ("pid",), level="full")
THREAD_FAULT_RATIO = MetricSpec(
    "numa_process_thread_fault_remote_ratio", "gauge",
    "Estimate of the share of the process's memory accesses a thread makes to a node other "
    "than its own, 0-1: each thread's decayed NUMA hinting faults on pages off the node it "
    "runs on (its current_node, else its last CPU's node), over all of them. High while "
    "numa_process_fault_remote_ratio is low: threads reach across to memory near their "
    "siblings. Absent without hinting faults.", ("pid",), level="full")
LOCALITY_BYTES = MetricSpec(
    "numa_process_memory_locality_bytes", "gauge",
    "Resident bytes of the process by place for its CPUs: local (on a home node), remote "
    "(another node with CPUs, same or faster memory tier) or far (a node without CPUs, or a "
    "slower memory tier); the three sum to the placed bytes.", ("pid", "locality"),
    level="full", bounds=(("locality", 3),))
LOCALITY_RATIO = MetricSpec(
    "numa_process_memory_locality_ratio", "gauge",
    "Share of the process's resident bytes at each place (local, remote, far), 0-1, for "
    "each accessor: cpu (home: the nodes of its threads) and accelerator (home: the memory "
    "nodes of an accelerator it uses whose memory is a NUMA node; only for such processes).",
    ("pid", "accessor", "locality"), level="full", bounds=(("accessor", 2), ("locality", 3)))
TIER_BYTES = MetricSpec(
    "numa_process_tier_memory_bytes", "gauge",
    "Resident bytes of the process by memory tier (tier: the memory_tierN id, smaller is "
    "faster; tier=none: bytes on nodes in no tier, which is every node before 6.1).",
    ("pid", "tier"), level="full", bounds=(("tier", "nodes"),))
CPU_SPAN = MetricSpec(
    "numa_process_allowed_cpu_nodes", "gauge",
    "Nodes holding at least one CPU the process may run on (Cpus_allowed_list); with "
    "numa_process_allowed_memory_nodes at 1 too, NUMA placement does not affect it.",
    ("pid",), level="full")
MEMORY_SPAN = MetricSpec(
    "numa_process_allowed_memory_nodes", "gauge",
    "Nodes with memory the process may allocate on (Mems_allowed_list, memory-less nodes "
    "left out).", ("pid",), level="full")
HAS_CPU = MetricSpec(
    "numa_node_has_cpu", "gauge",
    "1 when the node has CPUs (/sys/devices/system/node/has_cpu), else 0.", ("node",))
HAS_MEMORY = MetricSpec(
    "numa_node_has_memory", "gauge",
    "1 when the node has memory (has_memory), else 0; a node with memory and no CPU is a "
    "CPU-less memory node (CXL expander, HBM, a GPU's memory).", ("node",))
HAS_GI = MetricSpec(
    "numa_node_has_generic_initiator", "gauge",
    "1 when the node is an ACPI generic initiator node (has_generic_initiator, 5.10+; e.g. "
    "an accelerator's partition), else 0; absent on older kernels.", ("node",))
TIER = MetricSpec(
    "numa_node_memory_tier", "gauge",
    "Memory tier id of the node (/sys/devices/virtual/memory_tiering/memory_tierN; smaller "
    "is faster, DRAM 4, dax/kmem memory 22 by default); absent before 6.1.", ("node",))
_HMAT = ("from the initiator node (access_class 0: best initiators of any kind, 1: best "
         "CPU initiators; op: read or write), from the firmware's HMAT "
         "(node<N>/access<Y>/initiators); absent where the firmware gives none.")
LATENCY = MetricSpec(
    "numa_node_access_latency_seconds", "gauge",
    f"Access latency to the node's memory {_HMAT}",
    ("node", "initiator", "access_class", "op"),
    bounds=(("node", "nodes"), ("initiator", 1), ("access_class", 2), ("op", 2)))
BANDWIDTH = MetricSpec(
    "numa_node_access_bandwidth_bytes_per_second", "gauge",
    f"Access bandwidth to the node's memory {_HMAT}",
    ("node", "initiator", "access_class", "op"),
    bounds=(("node", "nodes"), ("initiator", 1), ("access_class", 2), ("op", 2)))
DEMOTION = MetricSpec(
    "numa_memory_demotion_enabled", "gauge",
    "1 when reclaim demotes pages to a slower memory tier instead of discarding them "
    "(/sys/kernel/mm/numa/demotion_enabled), else 0; absent before 5.18.")
NODE_VMSTAT = MetricSpec(
    "numa_node_vmstat_<field>_total", "counter",
    "Kernel counter <field> of node<N>/vmstat (one family per pgpromote_* and pgdemote_* "
    "field the kernel prints: pages promoted to or demoted from the node's tier).",
    ("node",), pattern=True, bounds=(("node", "nodes"), ("<field>", 7)))  # 7.3 (6.12: 5)

PROCESS_SPECS = (HINT_FAULTS, FAULT_RATIO, THREAD_FAULT_RATIO, LOCALITY_BYTES, LOCALITY_RATIO,
                 TIER_BYTES, CPU_SPAN, MEMORY_SPAN)
NODE_SPECS = (HAS_CPU, HAS_MEMORY, HAS_GI, TIER, LATENCY, BANDWIDTH, DEMOTION, NODE_VMSTAT)
SPECS = PROCESS_SPECS + NODE_SPECS


def _processes(snap: Snapshot) -> Iterator[Metric]:
    faults, share, tshare, loc, ratio, tier, cspan, mspan = (
        family(s) for s in PROCESS_SPECS)
    # bytes by tier only where the kernel has memory tiers (6.1+): before, every byte would
    # read tier="none", which says "on a node in no tier" of a kernel that has no tiers
    has_tiers = snap.system.tiers is not None and bool(snap.system.tiers.tiers.tiers)
    for p in snap.processes:
        t = p.tiers
        if t is None:
            continue
        pid = str(p.pid)
        if t.faults is not None:
            for node, n in sorted(t.faults.by_node.items()):
                faults.add_metric([pid, str(node)], n)
        if t.fault_remote_share is not None:
            share.add_metric([pid], t.fault_remote_share)
        if t.thread_fault_remote_share is not None:
            tshare.add_metric([pid], t.thread_fault_remote_share)
        for view in t.accessors:
            for place in PLACES:
                if view.accessor == "cpu":
                    loc.add_metric([pid, place], view.bytes.get(place, 0))
                ratio.add_metric([pid, view.accessor, place], view.ratio(place))
        for tid, b in sorted(t.bytes_by_tier.items()):
            tier.add_metric([pid, str(tid)], b)
        if t.untiered_bytes and has_tiers:
            tier.add_metric([pid, "none"], t.untiered_bytes)
        if t.cpu_span is not None:
            cspan.add_metric([pid], t.cpu_span)
        if t.memory_span is not None:
            mspan.add_metric([pid], t.memory_span)
    yield from (faults, share, tshare, loc, ratio, tier, cspan, mspan)


def _classes(classes: NodeClasses, nodes: tuple[int, ...]) -> Iterator[Metric]:
    for spec, members in ((HAS_CPU, classes.cpu), (HAS_MEMORY, classes.memory),
                          (HAS_GI, classes.generic_initiator)):
        if members is None:
            continue
        f = family(spec)
        for node in nodes:
            f.add_metric([str(node)], 1 if node in members else 0)
        yield f


def _nodes(snap: Snapshot) -> Iterator[Metric]:
    sysm = snap.system
    t = sysm.tiers
    if t is not None:
        yield from _classes(t.classes, sysm.topology.nodes if sysm.topology.numa else ())
        tier = family(TIER)
        for node, tid in sorted(t.tiers.tier_of().items()):
            tier.add_metric([str(node)], tid)
        yield tier
        lat, bw = family(LATENCY), family(BANDWIDTH)
        for (node, c), a in sorted(t.access.items()):
            for ini in sorted(a.initiators):
                lv = [str(node), str(ini), str(c)]
                for op, ls, bs in (
                        ("read", a.read_latency_seconds, a.read_bandwidth_bytes_per_second),
                        ("write", a.write_latency_seconds,
                         a.write_bandwidth_bytes_per_second)):
                    if ls is not None:
                        lat.add_metric([*lv, op], ls)
                    if bs is not None:
                        bw.add_metric([*lv, op], bs)
        yield from (lat, bw)
    if sysm.demotion_enabled is not None:
        d = family(DEMOTION)
        d.add_metric([], 1 if sysm.demotion_enabled else 0)
        yield d
    fields = sorted({f for values in sysm.node_vmstat.values() for f in values})
    for name in fields:
        f = pattern_family(NODE_VMSTAT, name)
        for node, values in sorted(sysm.node_vmstat.items()):
            if name in values:
                f.add_metric([str(node)], values[name])
        yield f


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the per-process and per-node tier families of the snapshot."""
    yield from _processes(snap)
    yield from _nodes(snap)


COLLECTOR = CollectorDef(
    "tiers", "locality beyond home bytes: hinting faults, local/remote/far, accessors, "
    "memory tiers, spans; node classes, tiers, HMAT, promotion/demotion", SPECS, emit)
