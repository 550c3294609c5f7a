"""Kubernetes attribution and the kubelet's NUMA promises, and whether a process keeps them.

The values the Kubernetes reader returns (``readers/kubernetes.py``) and pure functions over
them. Nothing here reads a file.

Intended versus actual (docs/kubernetes.md):

* the kubelet's **home** for a container is its Memory Manager nodes when it has some (that
  is the container's ``cpuset.mems`` under the Static policy), else the nodes of its
  exclusive CPUs (CPU Manager, static policy); devices alone do not make a home (the
  ``accelerator`` source covers a device the process has open);
* ``kubelet_memory_nodes``: more than ``OFF_SHARE`` of the process's resident bytes lie
  outside its Memory Manager nodes;
* ``kubelet_cpu_nodes``: its threads ran on a node none of its exclusive CPUs is on;
* ``kubelet_device_node``: a device the kubelet assigned it sits on a node outside its
  Memory Manager nodes (or, without those, outside the nodes of its exclusive CPUs);
* ``kubelet_dra_device_node``: the same rule for a device Dynamic Resource Allocation
  gave its pod (a claim's devices belong to the pod: which container uses a claim is in the
  pod spec, which the exporter does not read, so each container of the pod is checked).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

OFF_SHARE = 0.05  # bytes off the kubelet's memory nodes beyond this share: a mismatch
REASONS = ("kubelet_memory_nodes", "kubelet_cpu_nodes", "kubelet_device_node",
           "kubelet_dra_device_node")


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """Who a cgroup belongs to: labels as the ecosystem writes them.

    ``container_id`` carries the runtime prefix (``containerd://<id>``) where the runtime is
    known, as kube-state-metrics writes it; ``namespace``, ``pod`` and ``container`` are
    empty where no file on the node names them (the UID and ID still join with
    kube-state-metrics). ``kind`` is ``container``, ``sandbox`` (a pause container),
    ``conmon`` (a runtime monitor), ``pod`` (the pod cgroup itself) or ``other``.
    """

    uid: str
    qos: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    container_id: str = ""
    kind: str = "container"
    runtime: str = ""


@dataclass(frozen=True, slots=True)
class DraDevice:
    """A device Dynamic Resource Allocation gave a pod, and where it sits.

    ``driver``, ``pool`` and ``device`` name it as the DRA driver published it (``pool``
    empty and ``device`` its CDI name in a legacy checkpoint), ``claim`` and
    ``claim_namespace`` the resource claim; ``nodes`` the NUMA nodes of its device nodes
    (empty: not found); ``paths`` the host device nodes whose node was found.
    """

    driver: str
    pool: str
    device: str
    claim: str
    claim_namespace: str = ""
    nodes: frozenset[int] = frozenset()
    paths: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the kubelet assigned one container, in NUMA nodes.

    ``memory_nodes``: the union of its Memory Manager blocks' nodes (None: no blocks);
    ``memory_by_type`` the same per memory type (``memory``, ``hugepages-1Gi``, ...);
    ``cpus`` its exclusive CPUs and ``cpu_nodes`` their nodes (None: shared pool);
    ``devices`` the nodes of its devices per resource (an empty set: the plugin gave no
    topology); ``dra`` the devices Dynamic Resource Allocation gave its pod.
    """

    memory_nodes: frozenset[int] | None = None
    memory_by_type: dict[str, frozenset[int]] = field(default_factory=dict)
    cpus: frozenset[int] | None = None
    cpu_nodes: frozenset[int] | None = None
    devices: dict[str, frozenset[int]] = field(default_factory=dict)
    dra: tuple[DraDevice, ...] = ()

    @property
    def empty(self) -> bool:
        """Return whether the kubelet assigned nothing NUMA-specific."""
        return (self.memory_nodes is None and self.cpus is None and not self.devices
                and not self.dra)

    def dra_off(self) -> tuple[DraDevice, ...]:
        """Return the DRA devices on a node outside the container's memory (else exclusive
        CPU) nodes; none without those nodes."""
        local = self.memory_nodes or self.cpu_nodes
        if not local:
            return ()
        return tuple(d for d in self.dra if d.nodes - local)

    def by_resource(self) -> dict[str, frozenset[int]]:
        """Return the assigned nodes per resource: ``cpu``, memory types, device resources."""
        out: dict[str, frozenset[int]] = {}
        if self.cpu_nodes is not None:
            out["cpu"] = self.cpu_nodes
        out.update(self.memory_by_type)
        out.update(self.devices)
        return out


@dataclass(frozen=True, slots=True)
class KubernetesView:
    """What the node's files say about its pods, for the cgroups of one scan.

    ``cgroups`` maps a cgroup path (as ``numa_cgroup_*`` labels it) to its container;
    ``pods`` a pod UID to (namespace, name); ``assignments`` (pod UID, container name) to
    the kubelet's assignment, ``assignments_by_id`` a container ID (bare) to one from an
    old CPU Manager checkpoint keyed by container. ``cpu_policy`` and ``memory_policy``
    are the checkpoints' policy names (empty: no checkpoint read); ``memory_reserved``
    (node, memory type) -> the bytes the Memory Manager reserved for containers there;
    ``dra`` a pod UID -> the devices Dynamic Resource Allocation gave it.
    """

    cgroups: dict[str, ContainerRef] = field(default_factory=dict)
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)
    assignments: dict[tuple[str, str], Assignment] = field(default_factory=dict)
    assignments_by_id: dict[str, Assignment] = field(default_factory=dict)
    cpu_policy: str = ""
    memory_policy: str = ""
    memory_reserved: dict[tuple[int, str], int] = field(default_factory=dict)
    dra: dict[str, tuple[DraDevice, ...]] = field(default_factory=dict)

    def assignment_for(self, ref: ContainerRef) -> Assignment | None:
        """Return the kubelet's assignment of the container ``ref``, None without one."""
        found = self.assignments.get((ref.uid, ref.container)) if ref.container else None
        if found is None and ref.container_id:
            found = self.assignments_by_id.get(ref.container_id.rpartition("://")[2])
        return found


def kubelet_home(assignment: Assignment | None) -> frozenset[int] | None:
    """Return the nodes the kubelet meant a container to be local to, None if it set none."""
    if assignment is None:
        return None
    if assignment.memory_nodes:
        return assignment.memory_nodes
    if assignment.cpu_nodes:
        return assignment.cpu_nodes
    return None


def kubelet_mismatches(assignment: Assignment | None, node_bytes: Mapping[int, int],
                       thread_nodes: frozenset[int]) -> dict[str, bool]:
    """Return, per reason in ``REASONS``, whether a process breaks its container's promise.

    ``node_bytes`` are the process's resident bytes per node, ``thread_nodes`` the nodes
    its threads ran on. Without an assignment (or the part a reason needs) it is False.
    ``kubelet_dra_device_node``: a DRA device of the pod is on a node outside the
    container's memory (else exclusive CPU) nodes, as ``kubelet_device_node``.
    """
    out = dict.fromkeys(REASONS, False)
    if assignment is None:
        return out
    mem = assignment.memory_nodes
    if mem:
        total = sum(node_bytes.values())
        off = sum(b for n, b in node_bytes.items() if n not in mem)
        out["kubelet_memory_nodes"] = bool(total) and off / total > OFF_SHARE
    if assignment.cpu_nodes:
        out["kubelet_cpu_nodes"] = bool(thread_nodes - assignment.cpu_nodes)
    local = mem or assignment.cpu_nodes
    if local:
        device_nodes = frozenset(n for ns in assignment.devices.values() for n in ns)
        out["kubelet_device_node"] = bool(device_nodes - local)
        out["kubelet_dra_device_node"] = bool(assignment.dra_off())
    return out


@dataclass(frozen=True, slots=True)
class NodeAssigned:
    """What the kubelet assigned on one NUMA node: containers with any resource there
    (exclusive CPUs, Memory Manager memory or hugepages, devices) and exclusive CPUs."""

    containers: int = 0
    cpus: int = 0


def assigned_per_node(assignments: Iterable[Assignment], node_of_cpu: Mapping[int, int]
                      ) -> dict[int, NodeAssigned]:
    """Return the kubelet's assignments counted per NUMA node, from the parsed checkpoints
    (``node_of_cpu`` places each exclusive CPU; a CPU the topology does not know is not
    counted)."""
    containers: dict[int, int] = {}
    cpus: dict[int, int] = {}
    for a in assignments:
        for cpu in a.cpus or ():
            node = node_of_cpu.get(cpu)
            if node is not None:
                cpus[node] = cpus.get(node, 0) + 1
        touched: set[int] = set()
        for nodes in a.by_resource().values():
            touched |= nodes
        for node in touched:
            containers[node] = containers.get(node, 0) + 1
    return {n: NodeAssigned(containers.get(n, 0), cpus.get(n, 0))
            for n in sorted(set(containers) | set(cpus))}
