"""Which processes get full detail, decided once a scan with hysteresis (the series budget).

A process gets full detail when its placed bytes (local + remote) reach
``--process.detail-above`` or it is among the ``top`` largest of the processes served
(ranked by placed bytes, ties by pid; 0: none). Once it has full detail it keeps it
until it has been clearly out for ``HOLD_SCANS`` scans in a row: below ``EXIT_FRACTION`` of
the floor *and* ranked past ``exit_rank(top)``. A process swinging across the floor or
trading ranks with its neighbours changes level at most once per ``HOLD_SCANS`` scans, not
every scan: a level change ends one set of series and starts another (``rate()`` restarts,
the TSDB churns), so it must mean the process really changed size.

Pure: the per-process track lives in the process's state (``model/process_state.py``), the
scanner calls :func:`assign` once per scan over the processes it serves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from numa_exporter.config import Config

EXIT_FRACTION = 0.9  # full detail ends only below 90 % of the floor...
HOLD_SCANS = 10  # ...for this many scans in a row (and past the exit rank)


def exit_rank(top: int) -> int:
    """Return the rank (0-based) from which a process counts as out of the ``top``
    largest: half as many again (at least one more), 0 when ``top`` is 0."""
    return 0 if top <= 0 else top + max(1, (top + 1) // 2)


@dataclass(frozen=True, slots=True)
class DetailRule:
    """The flags that decide the level: ``floor`` placed bytes (0: every process in full)
    and ``top``, the count of largest processes in full whatever their size (0: none)."""

    floor: int
    top: int = 0

    def wanted(self, placed: int, rank: int) -> bool:
        """Return whether a process of ``placed`` bytes at ``rank`` earns full detail."""
        return self.floor <= 0 or placed >= self.floor or rank < self.top

    def clearly_out(self, placed: int, rank: int) -> bool:
        """Return whether a process at full detail is clearly out of it this scan: below
        ``EXIT_FRACTION`` of the floor and ranked at or past :func:`exit_rank`."""
        return (self.floor > 0 and placed < self.floor * EXIT_FRACTION
                and rank >= exit_rank(self.top))


def rule_of(config: Config) -> DetailRule:
    """Return the rule ``config``'s flags make (``--process.detail-above``,
    ``--process.detail-top``)."""
    return DetailRule(config.detail_above, config.detail_top)


@dataclass(slots=True)
class DetailTrack:
    """One process's level across scans: ``full``, and the scans in a row it has been
    clearly out while full (``out``)."""

    full: bool = False
    out: int = 0

    def update(self, rule: DetailRule, placed: int, rank: int) -> bool:
        """Advance by one scan; return whether the process has full detail now."""
        if not self.full:
            self.full = rule.wanted(placed, rank)
            self.out = 0
        elif rule.clearly_out(placed, rank):
            self.out += 1
            if self.out >= HOLD_SCANS:
                self.full, self.out = False, 0
        else:
            self.out = 0
        return self.full


def ranks(placed: Mapping[int, int]) -> dict[int, int]:
    """Return each pid's rank (0: the largest) by placed bytes, ties by pid."""
    order = sorted(placed, key=lambda pid: (-placed[pid], pid))
    return {pid: i for i, pid in enumerate(order)}


def assign(rule: DetailRule, placed: Mapping[int, int],
           track: Callable[[int], DetailTrack | None]) -> frozenset[int]:
    """Return the pids at full detail this scan, given each served process's ``placed``
    bytes; ``track(pid)`` is its track (advanced here), or None where the process has no
    state (then decided by this scan alone)."""
    rank = ranks(placed)
    full = set()
    for pid, b in placed.items():
        t = track(pid)
        if t.update(rule, b, rank[pid]) if t is not None else rule.wanted(b, rank[pid]):
            full.add(pid)
    return frozenset(full)
