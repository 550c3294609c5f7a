"""Parser for the kernel's list format (``cpulist``, ``Cpus_allowed_list``, ``0-3,8-11``)."""

from __future__ import annotations

MAX_ID = 1 << 16  # far above any real CPU or node id; guards against hostile ranges


def parse_cpulist(text: str | bytes) -> frozenset[int] | None:
    """Return the ids in a list such as ``0-3,8,10-11`` (empty set for an empty list).

    Returns ``None`` when the text is not in the list format.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            return None
    text = text.strip()
    if not text:
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo_s, sep, hi_s = part.partition("-")
        stride = 1
        if ":" in hi_s:  # kernel also accepts a-b:used/group; only stride-less output is common
            return None
        if not lo_s.isdigit() or (sep and not hi_s.isdigit()):
            return None
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
        if hi < lo or hi > MAX_ID:
            return None
        out.update(range(lo, hi + 1, stride))
    return frozenset(out)


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
