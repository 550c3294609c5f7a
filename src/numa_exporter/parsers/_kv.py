"""Shared helpers for ``key value`` style kernel files."""

from __future__ import annotations

from collections.abc import Iterator


def lines(data: bytes) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) for each non-empty line, decoded leniently."""
    for i, raw in enumerate(data.split(b"\n"), 1):
        text = raw.decode("utf-8", "replace").strip()
        if text:
            yield i, text


def to_int(text: str) -> int | None:
    """Return text as a non-negative-or-negative decimal int, or None if it is not one."""
    t = text[1:] if text.startswith("-") else text
    if not t or not t.isascii() or not t.isdigit() or len(t) > 24:
        return None
    return int(text)
