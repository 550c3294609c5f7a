"""Home nodes of a process and its local/remote split.

Home nodes are the nodes that count as local. Candidates are tried in precedence order
(``config`` > ``kubelet`` > ``binding`` > ``accelerator`` > ``threads`` > ``affinity``); the
first that names any node wins. ``kubelet`` is the kubelet's assignment of the process's
container (``model/kubernetes.py``: its Memory Manager nodes, else its exclusive CPUs'
nodes). ``binding`` is the nodes of the process's CPU binding as intended
(``model/thread_binding.py``: the narrowest of the config pin, the kubelet's CPUs, the
cgroup's cpuset and the main thread's mask): intent before observation, so a thread that
escaped a late bind does not make its node home. Without a binding, the nodes its threads
ran on (``threads``) decide as before.
A CPU-less memory node (CXL expander, HBM, a GPU's memory) is never a thread's home: where the
nodes with CPUs are known, each candidate keeps only those, so a candidate that names only
CPU-less nodes gives way to the next source (an accelerator's own memory node is the
``accelerator`` accessor's home, ``model/tiers/process.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PRECEDENCE = ("config", "kubelet", "binding", "accelerator", "threads", "affinity")
THREAD_SHARE = 0.10  # a node counts as home when it carries at least this share of the weight


@dataclass(frozen=True, slots=True)
class Home:
    """The nodes that count as local and the source that chose them (``none``: no source)."""

    nodes: frozenset[int]
    source: str


@dataclass(frozen=True, slots=True)
class Locality:
    """Resident bytes on home nodes, elsewhere, and remote / total (0 when total is 0)."""

    local_bytes: int
    remote_bytes: int

    @property
    def total_bytes(self) -> int:
        """Return local plus remote bytes."""
        return self.local_bytes + self.remote_bytes

    @property
    def remote_ratio(self) -> float:
        """Return remote / total in 0-1, 0 when the process has no resident bytes."""
        total = self.total_bytes
        return self.remote_bytes / total if total else 0.0


def choose_home(candidates: Mapping[str, frozenset[int] | None],
                cpu_nodes: frozenset[int] | None = None) -> Home:
    """Return the home from the first source in PRECEDENCE whose candidate names a node.

    With ``cpu_nodes`` given (and not empty) a candidate counts only its nodes with CPUs.
    """
    for source in PRECEDENCE:
        nodes = candidates.get(source)
        if nodes and cpu_nodes:
            nodes = nodes & cpu_nodes
        if nodes:
            return Home(frozenset(nodes), source)
    return Home(frozenset(), "none")


def thread_nodes(weights: Iterable[tuple[int, float]], min_share: float = THREAD_SHARE
                 ) -> frozenset[int]:
    """Return the nodes that carry at least ``min_share`` of the (node, weight) pairs' weight."""
    per: dict[int, float] = {}
    for node, w in weights:
        per[node] = per.get(node, 0.0) + w
    total = sum(per.values())
    if total <= 0:
        return frozenset()
    return frozenset(n for n, w in per.items() if w / total >= min_share)


def locality(node_bytes: Mapping[int, int], home: Home) -> Locality:
    """Return the local/remote split of per-node bytes against the home nodes.

    With no home nodes at all everything counts as local (nothing is known to be remote).
    """
    if not home.nodes:
        return Locality(sum(node_bytes.values()), 0)
    local = sum(b for n, b in node_bytes.items() if n in home.nodes)
    return Locality(local, sum(node_bytes.values()) - local)


def home_for(
    thread_weights: Sequence[tuple[int, float]],
    affinity_nodes: frozenset[int] | None,
    config_nodes: frozenset[int] | None = None,
    accelerator_nodes: frozenset[int] | None = None,
    kubelet_nodes: frozenset[int] | None = None,
    cpu_nodes: frozenset[int] | None = None,
    *,
    binding_nodes: frozenset[int] | None = None,
) -> Home:
    """Return the home of a process from each source's candidate nodes (only nodes with
    CPUs when ``cpu_nodes`` is given)."""
    return choose_home(
        {
            "config": config_nodes,
            "kubelet": kubelet_nodes,
            "binding": binding_nodes,
            "accelerator": accelerator_nodes,
            "threads": thread_nodes(thread_weights),
            "affinity": affinity_nodes,
        },
        cpu_nodes,
    )
