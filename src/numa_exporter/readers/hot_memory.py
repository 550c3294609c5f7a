"""Hot memory of one process: DAMON's regions of its own kdamond joined with where their
pages are (move_pages on a few pages of each hot region); and the host's, by node: a paddr
kdamond's regions joined with the nodes' physical ranges."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from numa_exporter.model.hot_memory import (
    HotMemory,
    NodeHotMemory,
    NodeRange,
    add_bytes,
    bytes_by_node,
    is_hot,
    sample_addresses,
    split_by_node,
)
from numa_exporter.sources.damon import Region

QueryFn = Callable[[Sequence[int]], list[int]]
PAGES_PER_REGION = 32  # move_pages queries per hot region (measured: enough for 0.97-1.0)
MAX_HOT_REGIONS = 256  # hot regions placed per read (the largest first)


def place_hot_regions(pid: int, start_time: float, regions: Sequence[Region],
                      max_accesses: int, threshold: float, query: QueryFn,
                      now: float, pages: int = PAGES_PER_REGION) -> HotMemory:
    """Return the hot bytes of ``pid`` by node: each hot region's size split over the nodes
    of ``pages`` pages sampled in it. Raises what ``query`` raises (Gone, Denied, ...)."""
    hot = [r for r in regions if r.end > r.start and is_hot(r.nr_accesses, max_accesses,
                                                              threshold)]
    hot.sort(key=lambda r: r.end - r.start, reverse=True)
    parts = []
    for r in hot[:MAX_HOT_REGIONS]:
        addrs = sample_addresses(r.start, r.end, pages)
        if addrs:
            parts.append(split_by_node(r.end - r.start, query(addrs)))
    return HotMemory(pid, start_time, add_bytes(parts), len(regions), len(hot), now)


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
