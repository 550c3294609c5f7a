"""Collector ``binding``: whether CPU and memory bindings agree with where things are."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

from .base import CollectorDef
from .families import family

P = ("pid",)  # comm is on numa_process_info: a rename mints no series here

# Every reason numa_process_binding_mismatch may carry, and what it means.
REASONS = {
    "memory_not_on_thread_nodes": "memory is bound to nodes none of its threads run on",
    "threads_bound_memory_free": "CPUs are bound but memory may go anywhere",
    "accelerator_node_not_allowed": "the node of an accelerator it has open is outside its "
                                    "memory binding",
    "balancing_with_strict_binding": "automatic NUMA balancing is on while it is strictly "
                                     "bound",
    "memory_off_policy_nodes": "pages sit outside the nodes its own bind or preferred "
                               "policy names (e.g. after migratepages)",
    "threads_outside_binding": "some of its threads may run on CPUs outside its binding "
                               "(threads created before a late bind keep their old mask)",
    # only for processes of a pod container the kubelet assigned NUMA resources to
    "kubelet_memory_nodes": "over 5% of its resident bytes lie outside the Memory Manager "
                            "nodes the kubelet assigned its container",
    "kubelet_cpu_nodes": "its threads ran on a node none of its container's exclusive CPUs "
                         "(CPU Manager) is on",
    "kubelet_device_node": "a device the kubelet assigned its container is on a node outside "
                           "the container's memory (else exclusive CPU) nodes",
    "kubelet_dra_device_node": "a device Dynamic Resource Allocation gave its pod is on a "
                               "node outside the container's memory (else exclusive CPU) "
                               "nodes",
}

MEMORY_BOUND = MetricSpec(
    "numa_process_memory_bound", "gauge",
    "1 when the process's memory is restricted to a subset of the nodes that have memory "
    "(has_memory; all online nodes where unknown) by bind or interleave policies, "
    "Mems_allowed or cgroup cpuset.mems, else 0 (0 left out at the summary level); "
    "absent where the memory policies of a sampled process are unknown and its cpuset does "
    "not bind memory.",
    P, drop_zero="summary")
CPUS_BOUND = MetricSpec(
    "numa_process_cpus_bound", "gauge",
    "1 when the process's CPU affinity (Cpus_allowed_list) excludes some online node's CPUs, "
    "else 0 (0 left out at the summary level).", P, drop_zero="summary")
MISMATCH = MetricSpec(
    "numa_process_binding_mismatch", "gauge",
    "1 when the process shows the binding failure named by reason, else 0; a reason the "
    "facts read cannot decide (memory policies unknown) is absent: "
    + "; ".join(f"{r}: {why}" for r, why in REASONS.items())
    + ". 0 is left out for processes at the summary level (--process.detail-above).",
    (*P, "reason"), drop_zero="summary", bounds=(("reason", len(REASONS)),))

WI_DEVIATION = MetricSpec(
    "numa_process_weighted_interleave_deviation_ratio", "gauge",
    "Fraction of the process's resident pages under the weighted interleave policy that "
    "would have to move for their split over nodes to match the node weights (half the L1 "
    "distance between observed and weighted node shares; 0 conforms). Pages faulted before "
    "the policy was set, or moved since, show up here. Absent without such pages.", P)

OUTSIDE = MetricSpec(
    "numa_process_threads_outside_binding", "gauge",
    "Threads of the process whose allowed CPUs reach outside its binding: the narrowest "
    "of the config pin, the kubelet's assignment, the cgroup cpuset and the main thread's "
    "mask (docs/binding.md). Absent when nothing binds the process; 0 is left out for "
    "processes at the summary level (--process.detail-above).", P, drop_zero="summary")

SPECS = (MEMORY_BOUND, CPUS_BOUND, MISMATCH, OUTSIDE, WI_DEVIATION)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the binding families of the snapshot's processes."""
    mb, cb, mm, out, wd = (family(s) for s in SPECS)
    for p in snap.processes:
        if p.weighted_deviation is not None:
            wd.add_metric([str(p.pid)], p.weighted_deviation)
        lv = [str(p.pid)]
        if p.memory_bound is not None:
            mb.add_metric(lv, int(p.memory_bound))
        if p.cpus_bound is not None:
            cb.add_metric(lv, int(p.cpus_bound))
        for reason, on in sorted(p.mismatches.items()):
            mm.add_metric([*lv, reason], int(on))
        audit = p.thread_audit
        if audit is not None and audit.binding is not None:
            out.add_metric(lv, audit.outside)
    yield from (mb, cb, mm, out)
    if wd.samples:  # only where a process has weighted-interleave pages
        yield wd


COLLECTOR = CollectorDef(
    "binding", "binding consistency gauges (numa_process_*_bound, numa_process_binding_mismatch, "
    "weighted interleave deviation)",
    SPECS, emit)
