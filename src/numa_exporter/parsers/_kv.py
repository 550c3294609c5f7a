"""Shared helpers for ``key value`` style kernel files."""

from __future__ import annotations

import re
from collections.abc import Iterator

MAX_DIGITS = 24  # far above 2**64 (20 digits); keeps int() away from its digit limit
_NAME = re.compile(r"[A-Za-z0-9_]+")


def lines(data: bytes) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) for each non-empty line, decoded leniently."""
    for i, raw in enumerate(data.split(b"\n"), 1):
        text = raw.decode("utf-8", "replace").strip()
        if text:
            yield i, text


def is_digits(text: str) -> bool:
    """Return True when text is one or more ASCII decimal digits (``str.isdigit`` is not)."""
    return bool(text) and text.isascii() and text.isdigit()


def is_name(text: str) -> bool:
    """Return True when text is a field name of ASCII letters, digits and underscores."""
    return _NAME.fullmatch(text) is not None


def to_int(text: str) -> int | None:
    """Return text as a decimal int (ASCII digits, optional leading '-'), or None."""
    t = text[1:] if text.startswith("-") else text
    if len(t) > MAX_DIGITS or not is_digits(t):
        return None
    return int(text)


def to_uint(text: str) -> int | None:
    """Return text as a non-negative decimal int (ASCII digits only), or None."""
    if len(text) > MAX_DIGITS or not is_digits(text):
        return None
    return int(text)
