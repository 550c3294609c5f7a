"""Parser for ``/sys/kernel/mm/mempolicy/weighted_interleave/`` (6.9+): ``node<N>`` and
``auto`` (6.16+).

``node<N>`` holds the node's weight for ``MPOL_WEIGHTED_INTERLEAVE`` as ``%d\\n``: a u8
from 1 to 255 (writing 0 resets it to the default, 1 before 6.16; 256, -1 and text fail with
``EINVAL``). ``auto`` prints ``true\\n`` or ``false\\n`` (``str_true_false``): whether the
weights follow the firmware's bandwidth figures.
"""

from __future__ import annotations

from numa_exporter.parsers._kv import to_uint

MAX_WEIGHT = 255  # iw_table is u8


def parse_weighted_interleave_node(data: bytes) -> int | None:
    """Return a node's weight (1-255), or None if the file holds anything else."""
    text = data[:-1] if data.endswith(b"\n") else data
    if len(text) > 3:
        return None
    w = to_uint(text.decode("ascii", "replace"))
    return w if w is not None and 1 <= w <= MAX_WEIGHT else None


def parse_weighted_interleave_auto(data: bytes) -> bool | None:
    """Return whether the weights are set automatically, or None if malformed."""
    text = data[:-1] if data.endswith(b"\n") else data
    if text == b"true":
        return True
    if text == b"false":
        return False
    return None


def weighted_interleave_node_id(name: str) -> int | None:
    """Return N of a ``node<N>`` entry name (ASCII decimal, at most 4 digits), else None."""
    digits = name[4:]
    if (name.startswith("node") and 0 < len(digits) <= 4 and digits.isascii()
            and digits.isdigit() and (digits == "0" or not digits.startswith("0"))):
        return int(digits)
    return None
