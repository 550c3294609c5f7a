"""The host's node classes, memory tiers and HMAT performance, as one value, and what a
process's view needs of them (``HostTiers``).

Read by ``readers/tiers.py`` once and again on each topology change (none of it changes
otherwise); each scan's :class:`~numa_exporter.model.snapshot.SystemSample` carries it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numa_exporter.model.tiers.places import MemoryTiers, NodeClasses
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.node_access import NodeAccess
from numa_exporter.parsers.osrelease import KernelRelease

# 4.2 (397f2378f136) printed the fault block in today's form; 3.13-4.1 printed the legacy
# form and reset numa_pages_migrated on every read of sched
SCHED_CURRENT_FORM = (4, 2)


@dataclass(frozen=True, slots=True)
class HostTiers:
    """What a process's view needs to know about the host (static between topology changes).

    ``cpu_nodes``: nodes with CPUs; ``memory_nodes``: nodes with memory (None: unknown);
    ``tier_of``: node -> memory tier id (empty without memory tiering); ``node_cpus``: the
    CPUs of each node; ``accelerator_memory``: PCI address -> the accelerator's own memory
    nodes (declared in the config file).
    """

    cpu_nodes: frozenset[int] = frozenset()
    memory_nodes: frozenset[int] | None = None
    tier_of: Mapping[int, int] = field(default_factory=dict)
    node_cpus: Mapping[int, frozenset[int]] = field(default_factory=dict)
    accelerator_memory: Mapping[str, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SystemTiers:
    """Node classes, memory tiers (tier id -> nodes), HMAT by (node, access class), release.

    ``access`` maps (memory node, access class) to what the firmware gave; empty without
    HMAT. ``release`` is None where ``osrelease`` was unreadable.
    """

    classes: NodeClasses = field(default_factory=NodeClasses)
    tiers: MemoryTiers = field(default_factory=MemoryTiers)
    access: Mapping[tuple[int, int], NodeAccess] = field(default_factory=dict)
    release: KernelRelease | None = None

    def sched_resets(self) -> bool:
        """Return True on kernels whose sched prints the legacy (resetting) NUMA form.

        Only a known release before 4.2 says so; the reader also recognises the form in the
        text (distribution kernels may carry either).
        """
        return self.release is not None and not self.release.at_least(*SCHED_CURRENT_FORM)

    def host(self, topology: Topology, accelerator_memory: Mapping[str, frozenset[int]]
             ) -> HostTiers:
        """Return what per-process views need: CPU nodes (``has_cpu``, else the nodes with
        CPUs in the topology), memory nodes, tiers, CPUs per node, accelerator memory."""
        cpu_nodes = self.classes.cpu if self.classes.cpu is not None else topology.cpu_nodes()
        return HostTiers(cpu_nodes=cpu_nodes, memory_nodes=self.classes.memory,
                         tier_of=self.tiers.tier_of(), node_cpus=dict(topology.cpus),
                         accelerator_memory=dict(accelerator_memory))
