"""Parser for ``/sys/devices/system/node/node<N>/distance`` (``10 20``)."""

from __future__ import annotations

from numa_exporter.parsers._kv import to_int


def parse_node_distance(data: bytes) -> tuple[int, ...] | None:
    """Return the distance row (index = target position in the online node list), or None."""
    out: list[int] = []
    for tok in data.decode("ascii", "replace").split():
        v = to_int(tok)
        if v is None or v < 0:
            return None
        out.append(v)
    return tuple(out)
