"""Collector ``kubernetes``: which pod and container, and what the kubelet assigned.

Info families that join the per-process and per-cgroup metrics to pods, and the kubelet's
NUMA assignments per container (docs/kubernetes.md):

* ``numa_process_kubernetes_info{pid, namespace, pod, container, uid, container_id}``;
* ``numa_cgroup_kubernetes_info{cgroup, namespace, pod, container, uid, container_id, qos}``;
* ``numa_kubernetes_container_assigned_nodes_info{namespace, pod, container, uid, resource,
  nodes}``;
* ``numa_kubelet_pod_dra_device_info{namespace, pod, uid, driver, pool, device, claim,
  node}``: the devices Dynamic Resource Allocation gave each pod and their NUMA node.

``emit_view`` builds them from a ``KubernetesView`` and the (pid, cgroup) pairs of the
scanned processes; ``emit`` takes both from the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.kubernetes import ContainerRef, KubernetesView, assigned_per_node
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.cpulist import format_cpulist
from numa_exporter.parsers.text import label_text

from .base import CollectorDef
from .families import family

POD = ("namespace", "pod", "container", "uid", "container_id")
PROCESS = MetricSpec(
    "numa_process_kubernetes_info", "info",
    "Always 1; the pod and container the process runs in, from its cgroup and the node's "
    "files (container_id as kube-state-metrics writes it, runtime://id; namespace, pod or "
    "container empty where no file on the node names them). Join on pid.",
    ("pid", *POD))
CGROUP = MetricSpec(
    "numa_cgroup_kubernetes_info", "info",
    "Always 1; the pod and container a cgroup belongs to, and the pod's QoS class "
    "(Guaranteed, Burstable, BestEffort; empty where the path hides it). Join on cgroup.",
    ("cgroup", *POD, "qos"))
ASSIGNED = MetricSpec(
    "numa_kubernetes_container_assigned_nodes_info", "info",
    "Always 1; the NUMA nodes the kubelet assigned the container for a resource: cpu (the "
    "nodes of its exclusive CPUs, CPU Manager static policy), memory and hugepages-* "
    "(Memory Manager), and each device resource (the device manager; nodes empty when "
    "the plugin reported no topology), from the kubelet's checkpoint files.",
    ("namespace", "pod", "container", "uid", "resource", "nodes"),
    bounds=(("resource", 4),))  # cpu, memory, a hugepages size, a device resource

NODE_CONTAINERS = MetricSpec(
    "numa_kubelet_node_assigned_containers", "gauge",
    "Containers the kubelet assigned a resource on the NUMA node (exclusive CPUs, Memory "
    "Manager memory or hugepages, a device), from its checkpoint files.", ("node",))
NODE_CPUS = MetricSpec(
    "numa_kubelet_node_assigned_cpus", "gauge",
    "Exclusive CPUs of the node the kubelet's CPU Manager (static policy) assigned to "
    "containers, from its checkpoint.", ("node",))

NODE_MEMORY = MetricSpec(
    "numa_kubelet_node_assigned_memory_bytes", "gauge",
    "Bytes of a memory type (memory, hugepages-<size>) the kubelet's Memory Manager "
    "(static policy) reserved for containers on the NUMA node, as its checkpoint's "
    "machineState accounts them (blocks over several nodes split as the kubelet split "
    "them).", ("node", "resource"), bounds=(("resource", 8),))

DRA = MetricSpec(
    "numa_kubelet_pod_dra_device_info", "info",
    "Always 1; a device Dynamic Resource Allocation gave the pod, from the kubelet's "
    "dra_manager_state: driver, pool and device as the DRA driver named them (pool empty "
    "and device the CDI name in a checkpoint written before the kubelet's 1.31/1.32 "
    "rework), claim the "
    "resource claim (namespace/name), node the NUMA node(s) of its device nodes (CDI "
    "specs, then the accelerator map or sysfs; empty where not found). A claim belongs to "
    "the pod: every container of the pod is checked against it "
    "(binding_mismatch reason kubelet_dra_device_node).",
    ("namespace", "pod", "uid", "driver", "pool", "device", "claim", "node"),
    bounds=(("device", 8), ("node", 1)))  # GPUs and NICs of one pod

SPECS = (PROCESS, CGROUP, ASSIGNED, NODE_CONTAINERS, NODE_CPUS, NODE_MEMORY, DRA)


def _names(ref: ContainerRef) -> list[str]:
    """Return the pod labels of ``ref`` through label_text, the one function every
    identifying label goes through (validated names come back unchanged)."""
    return [label_text(v) for v in (ref.namespace, ref.pod, ref.container, ref.uid,
                                     ref.container_id)]


def emit_view(view: KubernetesView, processes: Iterable[tuple[int, str | None]],
              node_of_cpu: Mapping[int, int] | None = None,
              nodes: Iterable[int] | None = None) -> Iterator[Metric]:
    """Yield the families for ``view`` and the scanned (pid, cgroup key) pairs, and the
    assignments per node where ``node_of_cpu`` (the topology; ``nodes`` adds its nodes
    without CPUs) is given.

    Only containers (not pause, monitor or pod-level cgroups) get a process series.
    """
    proc, cg, assigned = family(PROCESS), family(CGROUP), family(ASSIGNED)
    for pid, key in sorted(processes, key=lambda p: p[0]):
        ref = view.cgroups.get(key) if key is not None else None
        if ref is None or ref.kind != "container":
            continue
        proc.add_metric([str(pid), *_names(ref)], 1)
    for key, ref in sorted(view.cgroups.items()):
        if ref.kind in ("container", "pod"):
            cg.add_metric([label_text(key), *_names(ref), label_text(ref.qos)], 1)
    for (uid, container), a in sorted(view.assignments.items()):
        namespace, pod = view.pods.get(uid, ("", ""))
        for resource, nodes in sorted(a.by_resource().items()):
            assigned.add_metric([*map(label_text, (namespace, pod, container, uid, resource)),
                                 format_cpulist(nodes)], 1)
    yield proc
    yield cg
    yield assigned
    yield _dra(view)
    if node_of_cpu is None:
        return
    containers, cpus = family(NODE_CONTAINERS), family(NODE_CPUS)
    for node, n in assigned_per_node(view.assignments.values(), node_of_cpu).items():
        containers.add_metric([str(node)], n.containers)
        cpus.add_metric([str(node)], n.cpus)
    yield containers
    yield cpus
    memory = family(NODE_MEMORY)
    known = set(node_of_cpu.values()) | set(nodes or ())
    for (node, kind), reserved in sorted(view.memory_reserved.items()):
        if node in known:
            memory.add_metric([str(node), label_text(kind)], reserved)
    yield memory


def _dra(view: KubernetesView) -> Metric:
    """Return the DRA device family of ``view``: one series per pod and device."""
    dra = family(DRA)
    seen: set[tuple[str, ...]] = set()
    for uid, devices in sorted(view.dra.items()):
        namespace, pod = view.pods.get(uid, ("", ""))
        for d in devices:
            claim = f"{d.claim_namespace}/{d.claim}" if d.claim_namespace else d.claim
            labels = (*map(label_text, (namespace, pod, uid, d.driver, d.pool, d.device,
                                        claim)), format_cpulist(d.nodes))
            if labels not in seen:  # one device twice in a claim: one series
                seen.add(labels)
                dra.add_metric(list(labels), 1)
    return dra


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the families of the snapshot's Kubernetes view and processes."""
    return emit_view(snap.kubernetes, ((p.pid, p.kubernetes_cgroup) for p in snap.processes),
                     snap.system.topology.node_of_cpu(), snap.system.topology.nodes)


COLLECTOR = CollectorDef(
    "kubernetes", "pods and containers of processes and cgroups, and the kubelet's NUMA "
    "assignments, from the node's files (--path.rootfs)", SPECS, emit)
