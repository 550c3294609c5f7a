"""Parser for ``/proc/driver/nvidia/gpus/<bdf>/numa_status`` (NVIDIA driver).

Written from the open driver's ``kernel-open/nvidia/nv-procfs.c``
(``nv_procfs_read_numa_status``): present only for GPUs whose memory can be a NUMA node
(coherent platforms: GH200, GB200), it prints::

    Node:      %d          the NUMA node of the GPU's memory (-1: none)
    Status:    %s          disabled | offline | online_in_progress | online |
                           online_failed | offline_in_progress | offline_failed | invalid
    Address:   %llx        hex, no 0x (only once the GPU has been opened)
    Size:      %llx

The GPU's memory is a node a process can be placed on only when the status is ``online``.
Total: bad input gives a value with ``errors`` counted, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from numa_exporter.parsers.cpulist import MAX_NODE_ID

STATES = frozenset({"disabled", "offline", "online_in_progress", "online", "online_failed",
                    "offline_in_progress", "offline_failed", "invalid"})
_MAX_LINES = 16  # the driver prints four
_MAX_HEX = 16  # a 64-bit value


@dataclass(frozen=True, slots=True)
class NvidiaNumaStatus:
    """The GPU memory's node (None: absent, malformed or -1), its status (None: absent or
    unknown), its physical address and size in bytes (None before the GPU is opened), and
    the number of malformed or unknown lines."""

    node: int | None = None
    status: str | None = None
    address: int | None = None
    size: int | None = None
    errors: int = 0

    @property
    def online_node(self) -> int | None:
        """Return the node when the GPU's memory is online as that node, else None."""
        return self.node if self.status == "online" else None


def _hex(text: bytes) -> int | None:
    if not text or len(text) > _MAX_HEX or not all(c in b"0123456789abcdefABCDEF" for c in text):
        return None
    return int(text, 16)


def parse_nvidia_numa_status(data: bytes) -> NvidiaNumaStatus:
    """Return the parsed file (see the module); never raises."""
    node: int | None = None
    status: str | None = None
    address = size = None
    errors = 0
    for line in data.split(b"\n")[:_MAX_LINES]:
        if not line.strip():
            continue
        key, sep, value = line.partition(b":")
        value = value.strip()
        if not sep:
            errors += 1
        elif key == b"Node":
            v = value[1:] if value.startswith(b"-") else value
            if v.isdigit() and len(v) <= 7:
                n = int(value)
                node = n if 0 <= n <= MAX_NODE_ID else None
                errors += n < -1 or n > MAX_NODE_ID
            else:
                errors += 1
        elif key == b"Status":
            text = value.decode("ascii", "replace")
            if text in STATES:
                status = text
            else:
                errors += 1
        elif key == b"Address":
            address = _hex(value)
            errors += address is None
        elif key == b"Size":
            size = _hex(value)
            errors += size is None
        else:
            errors += 1
    return NvidiaNumaStatus(node, status, address, size, errors)
