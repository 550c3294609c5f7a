"""Node classes, memory tiers and the local / remote / far split of per-node amounts.

Definitions (docs/tiers.md has the long form), for one accessor's home nodes:

* **local**: on a home node;
* **far**: not on a home node, and on a node without CPUs (CXL expanders, HBM, a GPU's
  memory) or in a slower memory tier than the home nodes' fastest;
* **remote**: on another node with CPUs, in the same tier or a faster one.

Everything here is pure: the sets come from sysfs through the readers, parsed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Place = Literal["local", "remote", "far"]
PLACES: tuple[Place, ...] = ("local", "remote", "far")


@dataclass(frozen=True, slots=True)
class NodeClasses:
    """The kernel's node state lists (``/sys/devices/system/node/has_*``, ...).

    Each is None where the file is absent or unreadable (``has_generic_initiator`` is
    5.10+); an empty set is an empty list.
    """

    possible: frozenset[int] | None = None
    online: frozenset[int] | None = None
    cpu: frozenset[int] | None = None
    normal_memory: frozenset[int] | None = None
    memory: frozenset[int] | None = None
    generic_initiator: frozenset[int] | None = None

    def cpu_less_memory_nodes(self) -> frozenset[int] | None:
        """Return the nodes with memory and no CPU; None unless both lists are known."""
        if self.memory is None or self.cpu is None:
            return None
        return self.memory - self.cpu


@dataclass(frozen=True, slots=True)
class MemoryTiers:
    """Memory tiers: tier id -> its nodes. A smaller id is a faster tier (DRAM: 4)."""

    tiers: Mapping[int, frozenset[int]] = field(default_factory=dict)

    def tier_of(self) -> dict[int, int]:
        """Return node -> tier id (a node listed in two tiers keeps the faster one)."""
        out: dict[int, int] = {}
        for tier in sorted(self.tiers, reverse=True):
            for node in self.tiers[tier]:
                out[node] = tier
        return out


def place_of(node: int, home: frozenset[int], cpu_nodes: frozenset[int],
             tier_of: Mapping[int, int]) -> Place:
    """Return whether ``node`` is local, remote or far for an accessor homed on ``home``.

    ``cpu_nodes`` are the nodes with CPUs; ``tier_of`` maps nodes to tier ids (empty on
    kernels without memory tiering). With no home node at all everything is local, as for
    the byte ratio: nothing is known to be remote.
    """
    if not home or node in home:
        return "local"
    if node not in cpu_nodes:
        return "far"
    best = min((tier_of[h] for h in home if h in tier_of), default=None)
    tier = tier_of.get(node)
    if best is not None and tier is not None and tier > best:
        return "far"
    return "remote"


def split_by_place(amounts: Mapping[int, int], home: frozenset[int],
                   cpu_nodes: frozenset[int], tier_of: Mapping[int, int]
                   ) -> dict[Place, int]:
    """Return the per-node ``amounts`` (bytes or fault counts) summed per place."""
    out: dict[Place, int] = dict.fromkeys(PLACES, 0)
    for node, amount in amounts.items():
        out[place_of(node, home, cpu_nodes, tier_of)] += amount
    return out


def amounts_by_tier(amounts: Mapping[int, int], tier_of: Mapping[int, int]
                    ) -> tuple[dict[int, int], int]:
    """Return (tier id -> summed amount, amount on nodes that are in no tier)."""
    tiers: dict[int, int] = {}
    untiered = 0
    for node, amount in amounts.items():
        tier = tier_of.get(node)
        if tier is None:
            untiered += amount
        else:
            tiers[tier] = tiers.get(tier, 0) + amount
    return tiers, untiered


def cpu_home(home: Iterable[int], cpu_nodes: frozenset[int]) -> frozenset[int]:
    """Return the home nodes that have CPUs: a CPU-less node is never a thread's home."""
    return frozenset(home) & cpu_nodes


def cpu_span(allowed_cpus: frozenset[int] | None,
             node_cpus: Mapping[int, frozenset[int]]) -> int | None:
    """Return how many nodes hold at least one of the allowed CPUs (None: unknown)."""
    if allowed_cpus is None:
        return None
    return sum(1 for cpus in node_cpus.values() if cpus & allowed_cpus)


def memory_span(mems_allowed: frozenset[int] | None,
                memory_nodes: frozenset[int] | None) -> int | None:
    """Return how many allowed nodes can hold memory (None: unknown).

    ``Mems_allowed_list`` may name nodes without memory (a cpuset can list them, and
    memory-less nodes are online); they are not counted when ``memory_nodes``
    (``has_memory``) is known.
    """
    if mems_allowed is None:
        return None
    if memory_nodes is None:
        return len(mems_allowed)
    return len(mems_allowed & memory_nodes)
