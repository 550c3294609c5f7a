"""Timed rounds: every contender once per round, in an order shuffled per round; paired ratios.

A slow moment of a shared machine falls on whichever contenders run in it; shuffling the
order each round spreads it over all of them, and a ratio taken within a round (``a / b`` of
the same round) cancels most of it. Every benchmark here measures through this one helper.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


def wall(fn: Callable[[], object]) -> Callable[[], float]:
    """Return a contender that runs ``fn`` and returns its wall time in seconds."""

    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return run


@dataclass(frozen=True)
class Rounds(Generic[T]):
    """What :func:`timed_rounds` measured: per contender, one value per round (round order),
    and the order each round ran its contenders in."""

    values: dict[str, list[T]]
    orders: list[list[str]] = field(default_factory=list)


def timed_rounds(contenders: Mapping[str, Callable[[], T]], rounds: int, seed: int,
                 warm: bool = True) -> Rounds[T]:
    """Run every contender once per round, ``rounds`` rounds, in an order shuffled per round
    (``random.Random(seed)``), after one unrecorded run of each when ``warm``; return what
    each run returned."""
    if warm:
        for fn in contenders.values():
            fn()
    rng = random.Random(seed)
    values: dict[str, list[T]] = {k: [] for k in contenders}
    orders: list[list[str]] = []
    order = list(contenders)
    for _ in range(rounds):
        rng.shuffle(order)
        orders.append(order[:])
        for name in order:
            values[name].append(contenders[name]())
    return Rounds(values, orders)


def paired_ratios(values: Mapping[str, Sequence[float]],
                  pairs: Sequence[tuple[str, str]]) -> dict[str, list[float]]:
    """Return ``"a/b"``: the per-round ratios a / b, for each pair both sides of which were
    measured (rounds where b is 0 are left out)."""
    out: dict[str, list[float]] = {}
    for a, b in pairs:
        if a in values and b in values:
            out[f"{a}/{b}"] = [x / y for x, y in zip(values[a], values[b], strict=True) if y]
    return out


def spread(vals: Sequence[float]) -> dict[str, float]:
    """Return the median, min and max of ``vals`` (all 0.0 when there are none)."""
    if not vals:
        return {"median": 0.0, "min": 0.0, "max": 0.0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def fmt_spread(s: Mapping[str, float] | None, scale: float = 1.0, digits: int = 2) -> str:
    """Return ``median [min-max]`` of a :func:`spread` times ``scale`` ("-" for None)."""
    if s is None:
        return "-"
    return (f"{s['median'] * scale:.{digits}f} "
            f"[{s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}]")
