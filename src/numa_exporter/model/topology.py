"""NUMA topology: online nodes, their CPUs and distances."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Topology:
    """Nodes of the machine; ``distance[(a, b)]`` is the SLIT distance from a to b."""

    nodes: tuple[int, ...] = (0,)
    cpus: dict[int, frozenset[int]] = field(default_factory=dict)  # node -> CPUs
    distance: dict[tuple[int, int], int] = field(default_factory=dict)
    numa: bool = True  # False when sysfs has no node folder (kernel without NUMA)

    def node_of_cpu(self) -> dict[int, int]:
        """Return a map from CPU id to the node it belongs to."""
        return {cpu: node for node, cpus in self.cpus.items() for cpu in cpus}

    def nodes_of_cpus(self, cpus: frozenset[int]) -> frozenset[int]:
        """Return the nodes that hold any of the given CPUs."""
        return frozenset(n for n, c in self.cpus.items() if c & cpus)

    def cpu_nodes(self) -> frozenset[int]:
        """Return the nodes that have CPUs (memory-only nodes, e.g. CXL, excluded)."""
        return frozenset(n for n, c in self.cpus.items() if c)

    def all_cpus(self) -> frozenset[int]:
        """Return every CPU of every online node."""
        out: frozenset[int] = frozenset()
        for c in self.cpus.values():
            out |= c
        return out


def build_topology(
    online: frozenset[int] | None,
    cpus: dict[int, frozenset[int]],
    distance_rows: dict[int, tuple[int, ...]],
) -> Topology:
    """Return the topology from the online node list, per-node CPU lists and distance rows.

    A distance row lists distances to the online nodes in ascending id order, as the kernel
    prints it; rows whose length does not match are ignored.
    """
    if online is None:
        return Topology(nodes=(0,), cpus=dict(cpus), distance={(0, 0): 10}, numa=False)
    nodes = tuple(sorted(online))
    dist: dict[tuple[int, int], int] = {}
    for a, row in distance_rows.items():
        if len(row) != len(nodes):
            continue
        for b, d in zip(nodes, row, strict=True):
            dist[(a, b)] = d
    return Topology(nodes=nodes, cpus={n: cpus.get(n, frozenset()) for n in nodes}, distance=dist)
