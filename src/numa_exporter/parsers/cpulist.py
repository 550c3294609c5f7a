"""Parser for the kernel's list format (``cpulist``, ``Cpus_allowed_list``, ``0-3,8-11``)."""

from __future__ import annotations

MAX_CPU_ID = 8191  # the kernel's largest NR_CPUS is 8192
MAX_NODE_ID = 1023  # ... and its largest MAX_NUMNODES (NODES_SHIFT 10) is 1024
MAX_ID = MAX_CPU_ID
MAX_TEXT = 64 * 1024  # "0,2,4,...,8190" is ~20 KiB; anything longer is not a kernel list
_MAX_DIGITS = 6


def _id(text: str | bytes, max_id: int) -> int | None:
    """Return an ASCII decimal id within 0..max_id, or None."""
    if not text or len(text) > _MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    v = int(text)
    return v if v <= max_id else None


def parse_cpulist_mask(text: str | bytes, max_id: int = MAX_CPU_ID) -> int | None:
    """Return the ids of a list such as ``0-3,8`` as a bit mask (bit i set: id i listed).

    Returns ``None`` when the text is not in the list format or names an id above
    ``max_id``. Work is linear in the length of the text, which is capped at ``MAX_TEXT``.
    """
    if len(text) > MAX_TEXT:
        return None
    if isinstance(text, bytes):
        if not text.isascii():
            return None
        text = text.decode("ascii")
    text = text.strip()
    if not text:
        return 0
    mask = 0
    for part in text.split(","):
        lo_s, sep, hi_s = part.strip().partition("-")
        lo = _id(lo_s, max_id)
        hi = _id(hi_s, max_id) if sep else lo
        if lo is None or hi is None or hi < lo:
            return None
        mask |= ((1 << (hi - lo + 1)) - 1) << lo
    return mask


def mask_ids(mask: int) -> frozenset[int]:
    """Return the ids whose bits are set in ``mask``."""
    bits = bin(mask)[:1:-1]  # least significant bit first
    return frozenset(i for i, b in enumerate(bits) if b == "1")


def parse_cpulist(text: str | bytes, max_id: int = MAX_CPU_ID) -> frozenset[int] | None:
    """Return the ids in a list such as ``0-3,8,10-11`` (empty set for an empty list).

    Returns ``None`` when the text is not in the list format (non-ASCII digits, a stride,
    a reversed range, an id above ``max_id``: CPU ids by default, ``MAX_NODE_ID`` for nodes).
    """
    mask = parse_cpulist_mask(text, max_id)
    return None if mask is None else mask_ids(mask)


def format_cpulist(ids: frozenset[int] | set[int]) -> str:
    """Return ids in the kernel's compact list format (``0-3,8``)."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(ids):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)
