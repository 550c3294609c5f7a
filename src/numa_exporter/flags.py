"""Flag values: sizes, durations and the argparse value types built on them.

Shared by ``cli.py`` and ``web/config.py``; pure text -> value functions, no I/O.
"""

from __future__ import annotations

import argparse
import math
import re
from decimal import Decimal, InvalidOperation

MAX_SIZE = 1 << 60  # bytes; far above any machine's memory
MAX_DURATION = 366 * 86400.0  # seconds; longer waits overflow the OS timers
_MAX_TEXT = 64  # characters of a size or duration flag value

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)B?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


def parse_size(text: str) -> int:
    """Return bytes for ``64MiB``, ``1G``, ``512k``, ``4096`` (binary multiples).

    Raises ValueError for anything else.
    """
    m = _SIZE.match(text) if len(text) <= _MAX_TEXT else None
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 0, 4096, 64MiB, 1GiB)")
    num, unit, _ = m.groups()
    power = " KMGTP".index(unit.upper()) if unit else 0
    value = int(Decimal(num) * (1024**power))
    if value > MAX_SIZE:
        raise ValueError(f"size too large: {text!r} (at most {MAX_SIZE >> 50}PiB)")
    return value


def parse_duration(text: str) -> float:
    """Return seconds for ``15s``, ``500ms``, ``1m30s``, ``2h`` or a bare number of seconds.

    The result is finite and at most MAX_DURATION; raises ValueError for anything else
    (``inf``, ``nan``, ``1e309``, negative values).
    """
    t = text.strip()
    if len(t) > _MAX_TEXT:
        raise ValueError(f"not a duration: {text[:_MAX_TEXT]!r}... (examples: 15s, 500ms, 1m)")
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        return _bounded(v, text)
    pos = 0
    total = Decimal(0)
    for m in _DURATION.finditer(t):
        if m.start() != pos:
            break
        pos = m.end()
        try:
            total += Decimal(m.group(1)) * _UNITS[m.group(2)]
        except InvalidOperation:
            break
    if pos != len(t) or not t:
        raise ValueError(f"not a duration: {text!r} (examples: 15s, 500ms, 1m)")
    return _bounded(float(total), text)


def _bounded(v: float, text: str) -> float:
    if not math.isfinite(v):
        raise ValueError(f"not a finite duration: {text!r} (examples: 15s, 500ms, 1m)")
    if v < 0:
        raise ValueError(f"negative duration: {text!r}")
    if v > MAX_DURATION:
        raise ValueError(f"duration too long: {text!r} (at most 366 days)")
    return v


def size(text: str) -> int:
    """Return :func:`parse_size` of a flag value; argparse's error for a bad one."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration(text: str) -> float:
    """Return :func:`parse_duration` of a flag value; argparse's error for a bad one."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_duration(text: str) -> float:
    """Return a duration above zero; argparse's error otherwise."""
    v = duration(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v
