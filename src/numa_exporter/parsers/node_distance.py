"""Parser for ``/sys/devices/system/node/node<N>/distance`` (``10 20``)."""

from __future__ import annotations

from numa_exporter.parsers._kv import to_uint
from numa_exporter.parsers.cpulist import MAX_NODE_ID


def parse_node_distance(data: bytes) -> tuple[int, ...] | None:
    """Return the distance row (index = target position in the online node list), or None.

    None unless the file is non-negative ASCII decimals, at most one per possible node.
    """
    tokens = data.split(None, MAX_NODE_ID + 1)
    if len(tokens) > MAX_NODE_ID + 1:
        return None
    out: list[int] = []
    for tok in tokens:
        v = to_uint(tok.decode("ascii", "replace"))
        if v is None:
            return None
        out.append(v)
    return tuple(out)
