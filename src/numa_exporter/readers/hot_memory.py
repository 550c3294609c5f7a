"""Hot memory of one process: DAMON's regions of its own kdamond joined with where their
pages are (move_pages on a few pages of each hot region); and the host's, by node: a paddr
kdamond's regions joined with the nodes' physical ranges."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from numa_exporter.model.hot_memory import (
    TASK_SIZE_MAX,
    CgroupHotMemory,
    HotMemory,
    NodeHotMemory,
    NodeRange,
    add_bytes,
    bound_regions,
    bytes_by_node,
    census_estimate,
    is_hot,
    node_fractions,
    passed_by_node,
    pps_estimate,
    sample_addresses,
    systematic_pps,
)
from numa_exporter.sources.damon import Region

QueryFn = Callable[[Sequence[int]], list[int]]
PAGES_PER_REGION = 32  # move_pages queries per hot region (measured: enough for 0.97-1.0)
# hot regions placed per read: all of them up to this many, else a sample of this many
# picks drawn by size (at most MAX_HOT_REGIONS * PAGES_PER_REGION = 8,192 pages a read)
MAX_HOT_REGIONS = 256


def place_hot_regions(pid: int, start_time: float, regions: Sequence[Region],
                      max_accesses: int, threshold: float, query: QueryFn,
                      now: float, pages: int = PAGES_PER_REGION,
                      resident_bytes: int | None = None, refused: int = 0,
                      max_placed: int = MAX_HOT_REGIONS,
                      offset: float | None = None) -> HotMemory:
    """Return the hot bytes of ``pid`` by node. Every hot region counts: up to
    ``max_placed`` of them each is split over the nodes of ``pages`` pages sampled in it;
    beyond, ``max_placed`` picks drawn with probability proportional to size give each
    node's share, scaled to the size of all hot regions (its sampling error in
    ``stderr_bytes``). Regions are cut to TASK_SIZE_MAX (beyond: refused), and the hot
    bytes to ``resident_bytes``; ``refused`` (regions the driver refused) is added to
    what this refuses. Raises what ``query`` raises (Gone, Denied, ...)."""
    kept, bad = bound_regions((r.start, r.end) for r in regions)
    hot = [(r.start, min(r.end, TASK_SIZE_MAX)) for r in (regions[i] for i in kept)
           if is_hot(r.nr_accesses, max_accesses, threshold)]
    sizes = [float(end - start) for start, end in hot]
    total = sum(sizes)
    if len(hot) <= max_placed:
        parts = []
        for (start, end), size in zip(hot, sizes, strict=True):
            addrs = sample_addresses(start, end, pages)
            if addrs:
                parts.append((size, node_fractions(query(addrs)), len(addrs)))
        by_node, err = census_estimate(parts)
        placed = len(parts)
    else:
        picks = systematic_pps(sizes, max_placed, random.random() if offset is None
                               else offset)
        drawn = []
        for i, times in sorted(picks.items()):
            addrs = sample_addresses(hot[i][0], hot[i][1], pages)
            drawn.append((times, node_fractions(query(addrs)) if addrs else {}))
        by_node, err = pps_estimate(total, drawn)
        placed = len(picks)
    clamped = False
    if resident_bytes is not None and 0 <= resident_bytes < total:
        scale = resident_bytes / total
        by_node = {n: b * scale for n, b in by_node.items()}
        total, err, clamped = total * scale, err * scale, True
    return HotMemory(pid, start_time, by_node, len(regions) + refused, len(hot), now,
                     placed_regions=placed, hot_bytes=total, stderr_bytes=err,
                     refused_regions=refused + bad, clamped=clamped)


def node_hot_idle(regions: Sequence[Region], ranges: Sequence[NodeRange], max_accesses: int,
                  threshold: float, now: float) -> NodeHotMemory:
    """Return the host's hot and idle bytes by node from a paddr kdamond's regions: each
    region's bytes go to the node ranges they lie in (a region over two nodes is split at
    the boundary); hot as for a process, idle when not accessed in the interval."""
    hot: list[dict[int, float]] = []
    idle: list[dict[int, float]] = []
    for r in regions:
        if r.end <= r.start:
            continue
        if is_hot(r.nr_accesses, max_accesses, threshold):
            hot.append(bytes_by_node(r.start, r.end, ranges))
        elif r.nr_accesses == 0:
            idle.append(bytes_by_node(r.start, r.end, ranges))
    return NodeHotMemory(add_bytes(hot), add_bytes(idle), len(regions), now)


def cgroup_hot(path: str, regions: Sequence[Region], ranges: Sequence[NodeRange],
               max_accesses: int, threshold: float, now: float, refused: int = 0
               ) -> CgroupHotMemory:
    """Return one cgroup's hot bytes by node from its filtered scheme's regions: each hot
    region's ``passed`` bytes (those charged to the cgroup, at most the region's size)
    split over the nodes the region lies on, every node of ``ranges`` present (0: a
    watched cgroup with nothing hot there); ``refused`` counts the regions the driver
    refused."""
    parts = [passed_by_node(r.start, r.end, r.passed or 0, ranges) for r in regions
             if r.end > r.start and is_hot(r.nr_accesses, max_accesses, threshold)]
    zero: dict[int, float] = {r.node: 0.0 for r in ranges}
    return CgroupHotMemory(path, add_bytes([zero, *parts]), len(parts), refused, now)
