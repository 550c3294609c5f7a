"""Parser for a memory node's HMAT performance: ``nodeN/accessY/initiators/`` in sysfs.

The directory holds one symlink per initiator node that has class ``Y`` access to node
``N``'s memory (``node0 -> ../../node0``) and, where the firmware's HMAT (or, for CXL, the
CDAT) gives them, four attributes (Documentation/admin-guide/mm/numaperf.rst,
Documentation/ABI/stable/sysfs-devices-node)::

    read_latency  write_latency      nanoseconds
    read_bandwidth  write_bandwidth  MiB/s (numaperf.rst; the ABI file says "MB/s")

Access class 0 is the best-performing initiators of any kind (CPUs and generic initiators
such as GPUs), class 1 (5.10+) the best CPU initiators. Each value is the kernel's ``%u``
of a u32; a 0 means the table gave no value of that type and is read as unknown (None).
Results are in base units: seconds and bytes per second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from numa_exporter.parsers.cpulist import MAX_NODE_ID

NS = 1e-9
MIB = 1 << 20
U32_MAX = (1 << 32) - 1
ATTRIBUTES = ("read_latency", "write_latency", "read_bandwidth", "write_bandwidth")
_MAX_DIGITS = 10


@dataclass(frozen=True, slots=True)
class NodeAccess:
    """HMAT performance of one memory node for one access class, in base units.

    ``initiators`` are the node ids linked under ``initiators/``; a value is None where the
    file is absent, is 0 (not given) or is malformed (counted in ``error_count``).
    """

    access_class: int
    initiators: frozenset[int]
    read_latency_seconds: float | None = None
    write_latency_seconds: float | None = None
    read_bandwidth_bytes_per_second: int | None = None
    write_bandwidth_bytes_per_second: int | None = None
    error_count: int = 0


def _u32(data: bytes) -> int | None:
    text = data[:-1] if data.endswith(b"\n") else data
    if not 0 < len(text) <= _MAX_DIGITS or not text.isdigit():
        return None
    v = int(text)
    return v if v <= U32_MAX else None


def initiator_nodes(names: Iterable[str]) -> frozenset[int]:
    """Return the node ids among directory entry names (``node3`` -> 3; others ignored)."""
    out: set[int] = set()
    for name in names:
        digits = name[4:]
        if (name.startswith("node") and 0 < len(digits) <= 4 and digits.isascii()
                and digits.isdigit() and int(digits) <= MAX_NODE_ID):
            out.add(int(digits))
    return frozenset(out)


def parse_node_access(access_class: int, files: Mapping[str, bytes],
                      entries: Iterable[str]) -> NodeAccess:
    """Return the performance of one access class from its attribute files' bytes.

    ``files`` maps attribute names (:data:`ATTRIBUTES`) to the bytes read; ``entries`` are
    the names in the ``initiators`` directory. Unknown attribute names are ignored.
    """
    values: dict[str, int | None] = {}
    errors = 0
    for name in ATTRIBUTES:
        data = files.get(name)
        if data is None:
            continue
        v = _u32(data)
        errors += v is None
        values[name] = v or None  # 0: the firmware gave no value of this type
    lat = {k: (v * NS if v is not None else None) for k, v in values.items()
           if k.endswith("latency")}
    bw = {k: (v * MIB if v is not None else None) for k, v in values.items()
          if k.endswith("bandwidth")}
    return NodeAccess(
        access_class=access_class,
        initiators=initiator_nodes(entries),
        read_latency_seconds=lat.get("read_latency"),
        write_latency_seconds=lat.get("write_latency"),
        read_bandwidth_bytes_per_second=bw.get("read_bandwidth"),
        write_bandwidth_bytes_per_second=bw.get("write_bandwidth"),
        error_count=errors,
    )
