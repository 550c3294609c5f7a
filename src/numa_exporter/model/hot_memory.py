"""Hot memory: the bytes of a process that DAMON saw accessed, by node, and how much of
them is remote (against the same home as the byte ratio)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HotMemory:
    """One process's hot bytes by node (sampled placement of DAMON's hot regions).

    ``start_time`` ties it to one process (a pid reused by another process is not joined);
    ``regions``/``hot_regions`` count DAMON's regions; ``monotonic`` is when it was read.
    """

    pid: int
    start_time: float
    bytes_by_node: dict[int, float] = field(default_factory=dict)
    regions: int = 0
    hot_regions: int = 0
    monotonic: float = 0.0


# what the hot-memory worker counts (numa_exporter_damon_events_total{event}): a watched
# process that exited (replaced by the next in the same round); an own kdamond that
# something else stopped, started again
EVENTS = ("target_exited", "kdamond_restarted")


@dataclass(frozen=True, slots=True)
class DamonStatus:
    """What the hot-memory worker last knew: ``state`` (``off``, ``monitoring``, or why
    DAMON cannot be used: ``absent``, ``busy``, ``foreign``, ``denied``, ``not_root``,
    ``run_dir``, ``stalled``, ``error``), the hot memory of each watched process by pid
    (vaddr), the host's hot and idle bytes by node (paddr), counts of unavailability by
    reason and of EVENTS, and when it was made."""

    state: str = "off"
    hot: dict[int, HotMemory] | None = None
    unavailable: dict[str, int] | None = None
    nodes: NodeHotMemory | None = None  # paddr mode: host-wide hot and idle bytes by node
    monotonic: float = 0.0  # when the worker made it (time.monotonic)
    events: dict[str, int] | None = None  # counted events: target_exited, ...


def is_hot(nr_accesses: int, max_accesses: int, threshold: float) -> bool:
    """Return whether a region counts as hot: accessed in at least ``threshold`` of the
    samples of its last aggregation interval (and at least once)."""
    return nr_accesses >= 1 and nr_accesses >= threshold * max_accesses


def sample_addresses(start: int, end: int, pages: int, page_size: int = 4096) -> list[int]:
    """Return up to ``pages`` page addresses spread evenly over ``[start, end)``."""
    first = start - start % page_size
    n_pages = max(0, (end - first + page_size - 1) // page_size)
    if n_pages == 0 or pages <= 0:
        return []
    k = min(pages, n_pages)
    return [first + (i * n_pages // k) * page_size for i in range(k)]


def split_by_node(size: int, statuses: Sequence[int]) -> dict[int, float]:
    """Return ``size`` bytes split over nodes in proportion to the sampled pages' nodes
    (move_pages statuses: a node id, or -errno for a page not present, which counts as
    not resident)."""
    if not statuses:
        return {}
    out: dict[int, float] = {}
    for s in statuses:
        if s >= 0:
            out[s] = out.get(s, 0.0) + size / len(statuses)
    return out


def add_bytes(parts: Iterable[Mapping[int, float]]) -> dict[int, float]:
    """Return the node-wise sum of byte maps."""
    out: dict[int, float] = {}
    for p in parts:
        for n, b in p.items():
            out[n] = out.get(n, 0.0) + b
    return out


def hot_remote_ratio(hot: Mapping[int, float], home: frozenset[int]) -> float | None:
    """Return the share of hot bytes off the home nodes (None without hot bytes or home)."""
    total = sum(hot.values())
    if total <= 0 or not home:
        return None
    return sum(b for n, b in hot.items() if n not in home) / total


@dataclass(frozen=True, slots=True)
class NodeRange:
    """One contiguous physical range ``[start, end)`` of a node's memory."""

    node: int
    start: int
    end: int


def merge_blocks(blocks: Mapping[int, Iterable[int]], block_size: int) -> list[NodeRange]:
    """Return the nodes' memory blocks (block numbers under ``node<N>/memory<M>``) as
    contiguous physical ranges, sorted by start: adjacent blocks of one node merge; a block
    listed under two nodes counts for the lower node only (the ranges never overlap)."""
    if block_size <= 0:
        return []
    owner: dict[int, int] = {}
    for node in sorted(blocks):
        for b in blocks[node]:
            owner.setdefault(b, node)
    out: list[NodeRange] = []
    for b in sorted(owner):
        node, start = owner[b], b * block_size
        last = out[-1] if out else None
        if last is not None and last.node == node and last.end == start:
            out[-1] = NodeRange(node, last.start, start + block_size)
        else:
            out.append(NodeRange(node, start, start + block_size))
    return out


def bytes_by_node(start: int, end: int, ranges: Sequence[NodeRange]) -> dict[int, float]:
    """Return the bytes of ``[start, end)`` that lie in each node's ranges (a region over
    two nodes is split at their boundary; bytes outside every range count for none)."""
    out: dict[int, float] = {}
    for r in ranges:
        lo, hi = max(start, r.start), min(end, r.end)
        if hi > lo:
            out[r.node] = out.get(r.node, 0.0) + (hi - lo)
    return out


@dataclass(frozen=True, slots=True)
class NodeHotMemory:
    """Host-wide hot and idle bytes by node from a paddr kdamond: ``hot`` accessed in at
    least the hot threshold of the samples, ``idle`` not accessed at all in the aggregation
    interval; ``regions`` counts DAMON's regions; ``monotonic`` is when it was read."""

    hot: dict[int, float] = field(default_factory=dict)
    idle: dict[int, float] = field(default_factory=dict)
    regions: int = 0
    monotonic: float = 0.0
