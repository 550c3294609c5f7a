"""Drift after warm-up: a process's baseline placement and the pages that moved per node.

One :class:`DriftTrack` belongs to one process identity (pid + start time); its owner (the
per-process state) decides when a process is new.

Movement is pages that changed node, never allocation or freeing, and the same for both
ways of reading a process:

* a **full read** (exact bytes per node) counts the balanced part of the per-node changes
  since the previous full read: with ``P`` the bytes gained and ``N`` the bytes lost over
  all nodes, ``min(P, N)`` bytes moved, shared out over the nodes that gained (arrived) and
  those that lost (departed) in proportion to their changes. Growth (``P - N``) is
  allocation, shrinkage freeing: neither counts;
* a **sampled read** counts what its followed pages show
  (:mod:`numa_exporter.model.sample_memory`): never the difference of two estimates, which
  is mostly sampling noise.

Both are held to the movement rule of :mod:`numa_exporter.model.change_evidence` (see
docs/movement.md): a page counts as moved only where the host migrated pages
(``pgmigrate_success``) since the *previous read* of the process, and the bytes counted in
one interval are at most what the host migrated in it (an upper bound of any one process's
share: :func:`~numa_exporter.model.change_evidence.bounded_moves` scales the pairs down in
proportion). A page freed on one node and faulted again on another while the host migrated
nothing is recycled memory: counted by neither reader. Every read compares against the
read before it, never against an older baseline (one unrelated migration would otherwise
open the comparison to everything recycled since). Where the counter is unknown nothing
counts. A full read after a sampled one (or the reverse) compares nothing: the sampled read
counted its own interval.

Where more changed node than the process's own balancing migrations explain, its faults
from its previous read to the end of this one (``faults``, asked only then) narrow the rest:

* none (and the same resident sizes): it cannot have recycled a page (a re-fault is a fault
  of the process), so every page of it that changed node was migrated, by whatever, and
  counts in full even where the host's counter has not moved yet: ``migrate_pages()`` adds
  to ``pgmigrate_success`` only when the call *ends*, and a read made while it runs sees
  part of the move (found in the 4-node guest under NUMA balancing: a 128 MiB
  ``migratepages`` read half-way counted 54 MiB);
* some: as many pages as it faulted (less those its balancing migrations account for) may
  be recycled; only what changed node beyond them is charged to the host-wide part of the
  bound (explicit migrations of anything, compaction, demotion). A process that re-faulted
  a region while another process was ``migratepages``-ed no longer has that region counted
  (found in the 4-node 6.1 guest under balancing: 64 MiB in that one interval).

The host's counter is read once per scan, before the processes: pages the kernel migrates
between that reading and the read of a process show in the process's change but in the
*next* interval's count of the host. Where a change exceeds the count, the counter is read
again right after the process (``refresh``; a whole ``migratepages`` of 128 MiB fell in
that gap on Debian 7.3 and was counted as nothing). The kernel adds a ``migrate_pages()``
call's pages to its counter when the call ends, so pages seen moved while a call runs are
not in it yet: while the host migrates, a change over this interval's count is therefore
carried (``pending``) and counted later against what the host's count
exceeds the changes by, as long as the host goes on migrating: one interval in which the
host migrated nothing drops it (recycled memory, as above; so does the change of a wave's
first interval when the wave began after that scan's host reading). Without the carry a migration
wave lost what moved in those gaps (5 % of 128 MiB on Debian 5.10 with scans a second apart:
each interval of a rising rate cut down, the spare count of a falling one unused). Only
what the process's faults rule out as recycled memory is carried: a process that took no
fault counts its change in full and carries nothing; one that faulted carries at most what
changed node beyond what it can have re-faulted.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from numa_exporter.model.change_evidence import bounded_moves
from numa_exporter.model.snapshot import Drift

MIN_AGREEING_SCANS = 3  # the baseline is a median: one bad scan among three cannot set it


@dataclass(frozen=True, slots=True)
class WarmupRule:
    """A process is warm once it is ``age`` seconds old and its RSS stayed within
    ``tolerance`` (relative) over the last ``scans`` scans."""

    age: float = 300.0
    scans: int = 4
    tolerance: float = 0.05

    @property
    def window(self) -> int:
        """Return how many recent scans the warm-up looks at."""
        return max(self.scans, MIN_AGREEING_SCANS)


@dataclass(slots=True)
class DriftTrack:
    """What one process's drift needs from earlier scans."""

    rss: deque[int]
    ratios: deque[float]
    last_nodes: dict[int, int] | None = None  # the last *full* read's bytes per node
    host_migrated: int | None = None  # the process's migration evidence at the last read
    own_migrated: int | None = None  # its own balancing migrations at the last read
    arrived: dict[int, int] = field(default_factory=dict)
    departed: dict[int, int] = field(default_factory=dict)
    baseline: float | None = None
    #: moves past the host's count so far, per (from, to) node, counted once the host's
    #: count allows while it goes on migrating (see the module's docstring)
    pending: dict[tuple[int, int], int] = field(default_factory=dict)

    @classmethod
    def new(cls, rule: WarmupRule) -> DriftTrack:
        """Return an empty track sized for the rule."""
        return cls(rss=deque(maxlen=rule.window), ratios=deque(maxlen=rule.window))

    def observe(self, rule: WarmupRule, age: float | None, rss: int,
                node_bytes: Mapping[int, int], remote_ratio: float, *,
                host_migrated: int | None = None,
                moved: Mapping[tuple[int, int], int] | None = None,
                exact: bool = True, page_size: int = 4096,
                own_migrated: int | None = None,
                faults: Callable[[], int | None] | None = None,
                refresh: Callable[[], int | None] | None = None) -> Drift:
        """Return the drift after recording this scan's placement.

        ``age`` is the process's age in seconds (None when the boot time is unknown: the
        process is then never taken as warm). The baseline is the median remote ratio of the
        last warm-up window, taken once the process is old enough and its RSS is stable.
        ``host_migrated``: the host's migrated-pages counter now
        (:func:`~numa_exporter.model.sample_memory.host_migrated_pages`; None: unknown).
        ``exact``: ``node_bytes`` come from a full read; else ``moved`` holds the bytes a
        sampled read saw moving per (from, to) node (None: it saw nothing either way).
        Either counts at most the bytes the host migrated since the previous read
        (``page_size`` bytes a migrated page; none where the counter is unknown), narrowed
        or lifted by the process's ``faults`` (pages faulted from its previous read to the
        end of this one; None: unknown, or its resident sizes changed without a fault),
        asked only where more moved than its own balancing migrations (``own_migrated``:
        their running total) explain (see the module). ``refresh`` reads the counter
        again, now: called once where the moves exceed what the counter (read before this
        process) allows, so that pages migrated since that reading are allowed for; what
        is still over the count and cannot be recycled memory is carried while the host
        goes on migrating (see the module).
        """
        if exact:
            moves = (balanced_moves(self.last_nodes, node_bytes)
                     if self.last_nodes is not None else {})
            self.last_nodes = dict(node_bytes)
        else:
            moves = {k: b for k, b in (moved or {}).items() if b > 0 and k[0] != k[1]}
            self.last_nodes = None
        before = self.host_migrated
        allowance = self._allowance(before, host_migrated, page_size)
        self.host_migrated = host_migrated
        seen = sum(moves.values())
        if refresh is not None and before is not None and seen > allowance:
            fresh = refresh()
            if fresh is not None and host_migrated is not None and fresh > host_migrated:
                allowance = self._allowance(before, fresh, page_size)
                self.host_migrated = fresh
        own = 0
        if (self.own_migrated is not None and own_migrated is not None
                and own_migrated > self.own_migrated):
            own = min((own_migrated - self.own_migrated) * page_size, allowance)
        self.own_migrated = own_migrated
        limit, carry = (_narrowed(seen, allowance, own, faults, page_size) if seen
                        else (allowance, 0))
        self._gate(moves, limit, carry, allowance, sum(node_bytes.values()))
        self.rss.append(rss)
        self.ratios.append(remote_ratio)
        if self.baseline is None and age is not None and self._warm(rule, age):
            self.baseline = statistics.median(self.ratios)
        return Drift(self.baseline, dict(self.arrived), dict(self.departed))

    @staticmethod
    def _allowance(before: int | None, now: int | None, page_size: int) -> int:
        """Return the bytes the host migrated between two counter readings (0: unknown)."""
        if before is None or now is None or now <= before:
            return 0
        return (now - before) * page_size

    def _gate(self, moves: Mapping[tuple[int, int], int], limit: int, carry: int,
              allowance: int, size: int) -> None:
        """Count ``moves`` within ``limit`` bytes, then what is pending within what the
        counter's ``allowance`` leaves; carry at most ``carry`` bytes of what is over while
        the host migrates (at most ``size`` bytes pending), drop it once it does not."""
        counted = bounded_moves(moves, limit)
        self._count(counted)
        if allowance <= 0:
            self.pending = {}
            return
        spare = allowance - sum(counted.values())
        if spare > 0 and self.pending:
            released = bounded_moves(self.pending, spare)
            self._count(released)
            self.pending = {k: b - released.get(k, 0) for k, b in self.pending.items()
                            if b > released.get(k, 0)}
        over = {k: b - counted.get(k, 0) for k, b in moves.items()
                if b > counted.get(k, 0) and k[0] != k[1]}
        for k, b in bounded_moves(over, carry).items():
            self.pending[k] = self.pending.get(k, 0) + b
        if sum(self.pending.values()) > size:
            self.pending = bounded_moves(self.pending, size)

    def _count(self, moved: Mapping[tuple[int, int], int]) -> None:
        for (src, dst), b in moved.items():
            if b > 0 and src != dst:
                self.departed[src] = self.departed.get(src, 0) + b
                self.arrived[dst] = self.arrived.get(dst, 0) + b

    def _warm(self, rule: WarmupRule, age: float) -> bool:
        if age < rule.age or len(self.ratios) < rule.window:
            return False
        recent = list(self.rss)[-max(rule.scans, 1):]
        lo, hi = min(recent), max(recent)
        return hi == 0 or (hi - lo) / hi <= rule.tolerance


def _narrowed(seen: int, allowance: int, own: int,
              faults: Callable[[], int | None] | None, page_size: int) -> tuple[int, int]:
    """Return the bytes that may count as moved of ``seen`` bytes that changed node, with
    ``allowance`` bytes of migration evidence of which ``own`` are the process's own
    balancing migrations (see the module), and the most bytes of what is over it that may
    be carried (not recycled memory: over what its faults can have re-faulted)."""
    if seen <= own or faults is None:
        return allowance, max(seen - allowance, 0)
    faulted = faults()
    if faulted is None:
        return allowance, max(seen - allowance, 0)
    if faulted == 0:
        return seen, 0
    recycled = max(faulted * page_size - own, 0)  # its hinting faults are among its faults
    unexplained = max(seen - own - recycled, 0)  # cannot be recycled memory
    counted = min(allowance - own, unexplained)
    return own + counted, unexplained - counted


def balanced_moves(before: Mapping[int, int], after: Mapping[int, int]
                   ) -> dict[tuple[int, int], int]:
    """Return the bytes that moved per (from, to) node between two exact readings: the
    balanced part ``min(P, N)`` of the per-node gains ``P`` and losses ``N``, each losing
    node's share sent to the gaining nodes in proportion to their gains (integer bytes; a
    pair's rounding is at most one byte per pair). Growth and shrinkage are not movement."""
    gain = {n: after.get(n, 0) - before.get(n, 0) for n in set(before) | set(after)}
    up = {n: d for n, d in gain.items() if d > 0}
    down = {n: -d for n, d in gain.items() if d < 0}
    p, n_ = sum(up.values()), sum(down.values())
    moved = min(p, n_)
    out: dict[tuple[int, int], int] = {}
    if not moved:
        return out
    for src, lost in sorted(down.items()):
        for dst, got in sorted(up.items()):
            b = moved * lost * got // (n_ * p)
            if b:
                out[(src, dst)] = b
    return out
