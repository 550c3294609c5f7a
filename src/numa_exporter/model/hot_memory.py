"""Hot memory: the bytes of a process that DAMON saw accessed, by node, and how much of
them is remote (against the same home as the byte ratio)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# the highest user address any supported kernel gives a process (x86_64 with 5-level paging
# and arm64 with 52-bit VAs: 2^56 and 2^52): a region beyond it is no memory of a process
TASK_SIZE_MAX = 1 << 56


@dataclass(frozen=True, slots=True)
class HotMemory:
    """One process's hot bytes by node (sampled placement of DAMON's hot regions).

    ``start_time`` ties it to one process (a pid reused by another process is not joined);
    ``regions``/``hot_regions`` count DAMON's regions, ``placed_regions`` the hot regions
    whose pages were looked up (all of them up to a bound, else a sample by size);
    ``hot_bytes`` is the size of every hot region (clamped to the process's resident
    bytes), ``stderr_bytes`` the largest standard error of one node's bytes;
    ``refused_regions`` counts regions refused or clamped (beyond TASK_SIZE_MAX) and
    ``clamped`` says the hot bytes were cut to the resident bytes; ``monotonic`` is when it
    was read.
    """

    pid: int
    start_time: float
    bytes_by_node: dict[int, float] = field(default_factory=dict)
    regions: int = 0
    hot_regions: int = 0
    monotonic: float = 0.0
    placed_regions: int = 0
    hot_bytes: float = 0.0
    stderr_bytes: float = 0.0
    refused_regions: int = 0
    clamped: bool = False


@dataclass(frozen=True, slots=True)
class CgroupHotMemory:
    """One cgroup's hot bytes by node, from the cgroup's filtered scheme of the paddr
    kdamond: the bytes charged to the cgroup (``sz_filter_passed``) of each hot region,
    split over the nodes the region lies on. ``hot_regions`` counts the hot regions read,
    ``refused_regions`` those refused for unsound values; ``monotonic`` is when it was read.
    """

    path: str
    bytes_by_node: dict[int, float] = field(default_factory=dict)
    hot_regions: int = 0
    refused_regions: int = 0
    monotonic: float = 0.0


# what the hot-memory worker counts (numa_exporter_damon_events_total{event}): a watched
# process that exited (replaced by the next in the same round); an own kdamond that
# something else stopped, started again; regions refused for unsound values or cut at
# TASK_SIZE_MAX; hot bytes cut to the process's resident bytes; a kernel DAMON module asked
# to run while an exporter kdamond ran (one episode each); the exporter's kdamonds stopped
# to make way for a module (--collector.damon.yield-to-modules)
# (--collector.damon.cgroups) a watched cgroup found gone (its scheme dropped); per-cgroup
# hot memory asked for where the kernel offers no per-filter bytes or DAMON runs vaddr
# (once per start: today's behaviour goes on)
EVENTS = ("target_exited", "kdamond_restarted", "regions_refused", "hot_bytes_clamped",
          "module_refused", "yielded", "cgroup_gone", "cgroups_unsupported")


@dataclass(frozen=True, slots=True)
class DamonStatus:
    """What the hot-memory worker last knew: ``state`` (``off``, ``monitoring``, or why
    DAMON cannot be used: ``absent``, ``busy``, ``foreign``, ``denied``, ``not_root``,
    ``run_dir``, ``stalled``, ``yielded``, ``error``), the hot memory of each watched process by pid
    (vaddr), the host's hot and idle bytes by node (paddr), counts of unavailability by
    reason and of EVENTS, and when it was made."""

    state: str = "off"
    hot: dict[int, HotMemory] | None = None
    unavailable: dict[str, int] | None = None
    nodes: NodeHotMemory | None = None  # paddr mode: host-wide hot and idle bytes by node
    monotonic: float = 0.0  # when the worker made it (time.monotonic)
    events: dict[str, int] | None = None  # counted events: target_exited, ...
    # the kernel's DAMON modules present: name -> blocked (not running while an exporter
    # kdamond runs: enabling it fails now)
    modules_blocked: dict[str, bool] | None = None
    # --collector.damon.cgroups: each watched cgroup's hot bytes by node (worker), and the
    # nodes its hot bytes count as local against (the scan's join)
    cgroups: dict[str, CgroupHotMemory] | None = None
    homes: dict[str, frozenset[int]] | None = None


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


def passed_by_node(start: int, end: int, passed: int, ranges: Sequence[NodeRange]
                   ) -> dict[int, float]:
    """Return the ``passed`` bytes of region ``[start, end)`` (the bytes of it a filter let
    through, at most its size) split over the nodes in proportion to the region's bytes
    in each node's ranges (bytes outside every range count for none)."""
    size = end - start
    if size <= 0 or passed <= 0:
        return {}
    share = min(passed, size) / size
    return {n: b * share for n, b in bytes_by_node(start, end, ranges).items()}


def cgroup_home(kubelet: frozenset[int], cpu_nodes: frozenset[int],
                mem_nodes: frozenset[int], all_cpu_nodes: frozenset[int],
                all_mem_nodes: frozenset[int]) -> frozenset[int]:
    """Return the nodes a cgroup's hot bytes count as local against: the kubelet's
    assignment of its containers; else the nodes of the CPUs its processes may run on
    (cpuset), where narrower than every node with CPUs; else the nodes it may allocate
    from (``cpuset.mems.effective``), where narrower than every memory node; else none
    (its hot remote ratio is then absent: every node is allowed)."""
    if kubelet:
        return kubelet
    if cpu_nodes and all_cpu_nodes and cpu_nodes < all_cpu_nodes:
        return cpu_nodes
    if mem_nodes and all_mem_nodes and mem_nodes < all_mem_nodes:
        return mem_nodes
    return frozenset()


@dataclass(frozen=True, slots=True)
class NodeHotMemory:
    """Host-wide hot and idle bytes by node from a paddr kdamond: ``hot`` accessed in at
    least the hot threshold of the samples, ``idle`` not accessed at all in the aggregation
    interval; ``regions`` counts DAMON's regions; ``monotonic`` is when it was read."""

    hot: dict[int, float] = field(default_factory=dict)
    idle: dict[int, float] = field(default_factory=dict)
    regions: int = 0
    monotonic: float = 0.0


def bound_regions(regions: Iterable[tuple[int, int]], limit: int = TASK_SIZE_MAX
                  ) -> tuple[list[int], int]:
    """Return the indexes of the ``(start, end)`` regions that lie in ``[0, limit)``, each
    to be cut at ``limit`` by the caller, and how many were refused (negative, empty, or
    starting at or beyond ``limit``) or cut."""
    kept: list[int] = []
    bad = 0
    for i, (start, end) in enumerate(regions):
        if start < 0 or end <= start or start >= limit:
            bad += 1
            continue
        if end > limit:
            bad += 1
        kept.append(i)
    return kept, bad


def systematic_pps(sizes: Sequence[float], k: int, offset: float) -> dict[int, int]:
    """Return a systematic sample of ``k`` picks with probability proportional to size:
    index -> times picked (a region larger than total/k can be picked more than once).
    ``offset`` in [0, 1) places the first pick."""
    total = float(sum(sizes))
    if k <= 0 or total <= 0:
        return {}
    step = total / k
    picks: dict[int, int] = {}
    i, upper = 0, float(sizes[0]) if sizes else 0.0
    for j in range(k):
        x = (j + offset) * step
        while x >= upper and i < len(sizes) - 1:
            i += 1
            upper += sizes[i]
        picks[i] = picks.get(i, 0) + 1
    return picks


def node_fractions(statuses: Sequence[int]) -> dict[int, float]:
    """Return the share of the sampled pages on each node (move_pages statuses: a node id,
    or -errno for a page not present, which counts for no node)."""
    if not statuses:
        return {}
    out: dict[int, float] = {}
    for st in statuses:
        if st >= 0:
            out[st] = out.get(st, 0.0) + 1.0 / len(statuses)
    return out


def census_estimate(parts: Sequence[tuple[float, Mapping[int, float], int]]
                    ) -> tuple[dict[int, float], float]:
    """Return bytes by node and the largest per-node standard error when every hot region
    was placed: ``parts`` are (region bytes, node fractions of its sampled pages, pages
    sampled); the error is the pages' sampling error,
    ``sqrt(sum_r B_r^2 p_rn (1 - p_rn) / m_r)``."""
    out: dict[int, float] = {}
    var: dict[int, float] = {}
    for size, frac, m in parts:
        for n, p in frac.items():
            out[n] = out.get(n, 0.0) + size * p
            if m > 0:
                var[n] = var.get(n, 0.0) + size * size * p * (1 - p) / m
    return out, math.sqrt(max(var.values(), default=0.0))


def pps_estimate(total: float, picks: Sequence[tuple[int, Mapping[int, float]]]
                 ) -> tuple[dict[int, float], float]:
    """Return bytes by node and the largest per-node standard error from a sample of hot
    regions drawn with probability proportional to size: ``picks`` are (times picked, node
    fractions of the region's sampled pages). Each node's share is the mean fraction over
    the picks, scaled to the ``total`` hot bytes; its error is ``total`` times the standard
    error of that mean, ``sqrt(var / k)`` over the ``k`` picks."""
    k = sum(c for c, _ in picks)
    if k <= 0 or total <= 0:
        return {}, 0.0
    nodes = sorted({n for _, f in picks for n in f})
    out: dict[int, float] = {}
    worst = 0.0
    for n in nodes:
        mean = sum(c * f.get(n, 0.0) for c, f in picks) / k
        out[n] = total * mean
        if k > 1:
            var = sum(c * (f.get(n, 0.0) - mean) ** 2 for c, f in picks) / (k - 1)
            worst = max(worst, total * math.sqrt(var / k))
    return out, worst
