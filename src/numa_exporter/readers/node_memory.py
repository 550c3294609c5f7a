"""Each node's physical memory ranges: its memory blocks (``node<N>/memory<M>``, online
ones) times the block size, merged where contiguous. The paddr kdamond monitors them."""

from __future__ import annotations

from pathlib import Path

from numa_exporter.model.hot_memory import NodeRange, merge_blocks
from numa_exporter.parsers.block_size_bytes import parse_block_size_bytes
from numa_exporter.sources.sysfs import NodeSysFS


def read_node_ranges(sysfs: Path) -> list[NodeRange]:
    """Return the online memory of every node as sorted, non-overlapping physical ranges;
    empty where the kernel shows no memory blocks (or a malformed block size). Raises
    SourceError when a folder or file cannot be read."""
    src = NodeSysFS(sysfs)
    size = parse_block_size_bytes(src.block_size_bytes() or b"")
    if size is None:
        return []
    blocks: dict[int, list[int]] = {}
    for node in src.node_dirs():
        blocks[node] = [b for b in src.memory_blocks(node) if _online(src, b)]
    return merge_blocks(blocks, size)


def _online(src: NodeSysFS, block: int) -> bool:
    """Return whether a memory block is online (a block without a state file counts)."""
    state = src.memory_block_state(block)
    return state is None or state.strip() == b"online"
