"""Parser for ``/sys/devices/system/node/node<N>/meminfo`` (``Node 0 MemTotal: 985964 kB``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from numa_exporter.parsers._kv import is_digits, lines, to_uint

_FIELD = re.compile(r"[A-Za-z0-9_()]+")  # MemTotal, Active(anon), HugePages_Total


@dataclass(frozen=True, slots=True)
class NodeMeminfo:
    """Byte-valued fields (``kB`` lines, converted) and plain counts (``HugePages_*``)."""

    bytes: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    error_count: int = 0


def parse_node_meminfo(data: bytes) -> NodeMeminfo:
    """Return the fields of a node meminfo file, byte values in bytes.

    Field names are ASCII (letters, digits, ``_``, parentheses); values non-negative ASCII
    decimals. Any other line is counted in ``error_count``.
    """
    by: dict[str, int] = {}
    counts: dict[str, int] = {}
    errors = 0
    for _, text in lines(data):
        parts = text.split()
        # "Node", "<n>", "<Field>:", "<value>", ["kB"]
        if (len(parts) not in (4, 5) or parts[0] != "Node" or not is_digits(parts[1])
                or not parts[2].endswith(":") or _FIELD.fullmatch(parts[2][:-1]) is None):
            errors += 1
            continue
        name = parts[2][:-1]
        v = to_uint(parts[3])
        if v is None or (len(parts) == 5 and parts[4] != "kB"):
            errors += 1
            continue
        if len(parts) == 5:
            by[name] = v * 1024
        else:
            counts[name] = v
    return NodeMeminfo(by, counts, errors)
