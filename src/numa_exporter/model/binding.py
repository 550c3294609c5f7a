"""Binding consistency: what the kernel lets an operator get wrong.

All functions are pure: they take what a scan read and return flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from numa_exporter.parsers.numa_maps import STRICT_POLICIES

REASONS = (
    "memory_not_on_thread_nodes",
    "threads_bound_memory_free",
    "accelerator_node_not_allowed",
    "balancing_with_strict_binding",
    "memory_off_policy_nodes",
)
STRICT_SHARE = 0.5  # memory counts as bound when this share of its bytes sits in strict policies
OFF_POLICY_SHARE = 0.05  # bound pages found off their policy's nodes beyond this share: flagged


@dataclass(frozen=True, slots=True)
class Binding:
    """Bindings of one process and the failure modes they show."""

    memory_nodes: frozenset[int] | None  # nodes memory is restricted to; None: not restricted
    cpu_nodes: frozenset[int] | None  # nodes CPUs are restricted to; None: not restricted
    mismatches: dict[str, bool]  # a reason the facts read cannot decide is left out
    memory_known: bool = True  # False: memory policies unknown and the cpuset binds nothing

    @property
    def memory_bound(self) -> bool | None:
        """Return whether memory is restricted to a subset of the nodes that have memory
        (None: unknown, the memory policies were not read)."""
        if not self.memory_known:
            return None
        return self.memory_nodes is not None

    @property
    def cpus_bound(self) -> bool:
        """Return whether CPU affinity is restricted to a subset of the nodes with CPUs."""
        return self.cpu_nodes is not None


def memory_capable(online: frozenset[int], memory_nodes: frozenset[int] | None
                   ) -> frozenset[int]:
    """Return the online nodes that can hold memory: those in ``memory_nodes``
    (``has_memory``, the kernel's N_MEMORY), or every online node where that list is
    unknown or names no online node.

    An unbound task's ``Mems_allowed`` is N_MEMORY, and memory policies are cut to it, so
    a binding is a restriction only against this set, not against all online nodes (a Grace
    Hopper host has online nodes with neither CPUs nor memory).
    """
    capable = online & memory_nodes if memory_nodes is not None else online
    return capable or online


def policy_memory_nodes(policy_nodes: Mapping[tuple[str, frozenset[int]], int],
                        capable: frozenset[int]) -> frozenset[int] | None:
    """Return the nodes strict policies confine most of the memory to, or None.

    ``capable`` are the nodes that can hold memory (:func:`memory_capable`); a strict policy
    naming all of them confines nothing and gives None.
    """
    total = sum(policy_nodes.values())
    strict = {k: b for k, b in policy_nodes.items() if k[0] in STRICT_POLICIES and k[1]}
    strict_bytes = sum(strict.values())
    if not total or strict_bytes / total < STRICT_SHARE:
        return None
    nodes: frozenset[int] = frozenset()
    for (_, ns), b in strict.items():
        if b:
            nodes |= ns
    nodes &= capable
    return nodes if nodes and nodes != capable else None


def memory_binding(policy_nodes: Mapping[tuple[str, frozenset[int]], int],
                   mems_allowed: frozenset[int] | None, online: frozenset[int],
                   memory_nodes: frozenset[int] | None) -> frozenset[int] | None:
    """Return the nodes the process's memory is restricted to, or None when it may use
    every node that has memory.

    Strict policies and ``Mems_allowed`` (the cpuset) both restrict; where both do, their
    common nodes (the cpuset's alone when they share none). ``memory_nodes`` is the
    ``has_memory`` list (None: unknown, every online node counts).
    """
    capable = memory_capable(online, memory_nodes)
    mem = policy_memory_nodes(policy_nodes, capable)
    if mems_allowed is not None:
        allowed = mems_allowed & capable
        if allowed and allowed != capable:
            mem = allowed if mem is None else (mem & allowed) or allowed
    return mem


def analyse(
    *,
    online: frozenset[int],
    memory_nodes: frozenset[int] | None,
    cpu_nodes_online: frozenset[int],
    policy_nodes: Mapping[tuple[str, frozenset[int]], int] | None,
    mems_allowed: frozenset[int] | None,
    affinity_nodes: frozenset[int] | None,
    thread_nodes: frozenset[int],
    accelerator_nodes: frozenset[int],
    balancing_mode: int | None,
    off_policy_bytes: int = 0,
) -> Binding:
    """Return the process's bindings and, per reason in REASONS, whether it applies.

    ``memory_nodes`` are the nodes with memory (``has_memory``; None where unknown): memory
    counts as bound only when restricted to fewer of them (:func:`memory_binding`).

    ``off_policy_bytes`` are resident bytes of bind-policy mappings found on nodes their
    policy does not name (moved there by ``migratepages`` or an ``mbind`` without MOVE).

    ``policy_nodes`` None: the memory policies are unknown (a sampled process without a
    standing policy read, ``model/policies.py``); see :func:`unknown_policies`.
    """
    cpu: frozenset[int] | None = None
    if affinity_nodes is not None and affinity_nodes and affinity_nodes != cpu_nodes_online:
        cpu = affinity_nodes
    if policy_nodes is None:
        return unknown_policies(online=online, memory_nodes=memory_nodes,
                                mems_allowed=mems_allowed, cpu=cpu,
                                thread_nodes=thread_nodes,
                                accelerator_nodes=accelerator_nodes,
                                balancing_mode=balancing_mode)
    mem = memory_binding(policy_nodes, mems_allowed, online, memory_nodes)
    total = sum(policy_nodes.values())
    allowed_mem = mem if mem is not None else online
    known_accel = frozenset(n for n in accelerator_nodes if n >= 0)
    mismatches = {
        "memory_not_on_thread_nodes": bool(mem is not None and thread_nodes
                                           and not (mem & thread_nodes)),
        "threads_bound_memory_free": cpu is not None and mem is None,
        "accelerator_node_not_allowed": bool(known_accel and not (known_accel & allowed_mem)),
        # balancing cannot move memory a strict binding holds; with memory free it helps
        "balancing_with_strict_binding": bool(balancing_mode and balancing_mode & 1
                                              and mem is not None),
        "memory_off_policy_nodes": bool(total and off_policy_bytes / total > OFF_POLICY_SHARE),
    }
    return Binding(mem, cpu, mismatches)


def unknown_policies(*, online: frozenset[int], memory_nodes: frozenset[int] | None,
                     mems_allowed: frozenset[int] | None, cpu: frozenset[int] | None,
                     thread_nodes: frozenset[int], accelerator_nodes: frozenset[int],
                     balancing_mode: int | None) -> Binding:
    """Return the bindings where the memory policies are unknown: only what the cpuset
    (``Mems_allowed``) and the other facts decide whatever the policies are.

    A policy can only narrow memory within the cpuset (:func:`memory_binding`), so a cpuset
    that binds memory makes it bound and every node set it implies a superset of the true
    one. A reason is given only where that settles it; the others are left out, never
    exported as "no".
    """
    by_cpuset = memory_binding({}, mems_allowed, online, memory_nodes)
    known_accel = frozenset(n for n in accelerator_nodes if n >= 0)
    mismatches: dict[str, bool] = {}
    if cpu is None or by_cpuset is not None:
        mismatches["threads_bound_memory_free"] = False
    if not thread_nodes:
        mismatches["memory_not_on_thread_nodes"] = False
    elif by_cpuset is not None and not (by_cpuset & thread_nodes):
        mismatches["memory_not_on_thread_nodes"] = True
    if not known_accel:
        mismatches["accelerator_node_not_allowed"] = False
    elif by_cpuset is not None and not (known_accel & by_cpuset):
        mismatches["accelerator_node_not_allowed"] = True
    balancing = bool(balancing_mode and balancing_mode & 1)
    if not balancing or by_cpuset is not None:
        mismatches["balancing_with_strict_binding"] = balancing
    return Binding(by_cpuset, cpu, mismatches, memory_known=by_cpuset is not None)
