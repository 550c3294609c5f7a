"""The kubelet's NUMA promises, and whether a process keeps them.

Pure functions over what the Kubernetes reader returns (``readers/kubernetes.py``).

Intended versus actual (docs/kubernetes.md):

* the kubelet's **home** for a container is its Memory Manager nodes when it has some (that
  is the container's ``cpuset.mems`` under the Static policy), else the nodes of its
  exclusive CPUs (CPU Manager, static policy); devices alone do not make a home (the
  ``accelerator`` source covers a device the process has open);
* ``kubelet_memory_nodes``: more than ``OFF_SHARE`` of the process's resident bytes lie
  outside its Memory Manager nodes;
* ``kubelet_cpu_nodes``: its threads ran on a node none of its exclusive CPUs is on;
* ``kubelet_device_node``: a device the kubelet assigned it sits on a node outside its
  Memory Manager nodes (or, without those, outside the nodes of its exclusive CPUs).
"""

from __future__ import annotations

from collections.abc import Mapping

from numa_exporter.readers.kubernetes import Assignment

OFF_SHARE = 0.05  # bytes off the kubelet's memory nodes beyond this share: a mismatch
REASONS = ("kubelet_memory_nodes", "kubelet_cpu_nodes", "kubelet_device_node")


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
    return out
