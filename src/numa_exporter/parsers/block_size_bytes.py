"""Parser for ``/sys/devices/system/memory/block_size_bytes``: the size of one memory block
in bytes, printed by the kernel as bare hex (``8000000`` for 128 MiB; ``%lx``)."""

from __future__ import annotations

MAX_DIGITS = 16  # an unsigned long


def parse_block_size_bytes(data: bytes) -> int | None:
    """Return the memory block size in bytes, or None if malformed (not 1-16 hex digits,
    or zero)."""
    text = data[:-1] if data.endswith(b"\n") else data
    if text.startswith((b"0x", b"0X")):
        text = text[2:]
    if not 0 < len(text) <= MAX_DIGITS or not all(c in b"0123456789abcdefABCDEF" for c in text):
        return None
    value = int(text, 16)
    return value or None
