"""Parser for ``/proc/stat``: only ``btime`` (boot time) is needed."""

from __future__ import annotations

from numa_exporter.parsers._kv import lines, to_uint


def parse_btime(data: bytes) -> int | None:
    """Return the boot time in seconds since the epoch, or None if the file lacks it."""
    for _, text in lines(data):
        if text.startswith("btime "):
            return to_uint(text[6:].strip())
    return None
