"""Sparse strata narrowed to their present pages, so a bounded sample finds resident pages.

A stratum drawn uniformly over its virtual pages wastes its queries where most of them are
not resident: 1 GiB inside a 16 TiB ``MAP_NORESERVE`` reservation is resident at 1 page in
16,384, and the query budget (sized to what a full read costs) found ~7 MiB of it. Where a
stratum's virtual size is many times its resident bytes (``status``), its big ranges are
replaced by their present page runs (``PAGEMAP_SCAN``, :mod:`sources.pagemap_scan`), in a
bounded number of calls per read; the scan goes on over the next reads where it stopped
(:class:`ScanCache`). Until a range was scanned whole once, its part not reached yet is a
stratum of its own that is not drawn from: the bytes it may hold are reported unsampled
(:func:`set_aside`), never placed with shares they were not drawn for.

Unbiased: the sample is uniform over the pages of the new ranges; conditioned on being
resident (pages that left between the scan and the query are not samples, as before), a
page is uniform over the resident pages of the ranges, and every resident page of the
stratum is in them (a page that became resident after the scan is missed: the scan is
taken right before the queries).

Without PAGEMAP_SCAN (kernels before 6.7), the present runs are found from the ``pagemap``
entries themselves (:class:`~numa_exporter.sources.pagemap_scan.PagemapRead`, 8 bytes per
virtual page: the cost is per virtual page, not per present one), at most
:data:`READ_CALLS` reads of 128 MiB of 4 KiB pages per read, ranges of at most
:data:`READ_MAX_RANGE` only (a bigger one stays virtual, as before). The part of a range
not read yet stays in the stratum, drawn uniformly as before (never set aside), so the
estimate is never worse than without the runs: a sparse static mapping's draws land on its
present pages more often read after read, and its followed pages (``memory.py``) are
drawn from them too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from numa_exporter.model.sampling import PlacementEstimate, Stratum, make_stratum
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_pagemap import present_runs
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.pagemap_scan import (
    READ_PAGES,
    PagemapRead,
    PagemapScan,
    PagemapScanUnsupported,
)

#: (start, end, max_pages) -> (present ranges found by one call, where the walk stopped).
PresentFn = Callable[[int, int, int], tuple[list[tuple[int, int]], int]]

#: A stratum is narrowed when its virtual bytes exceed this many times its resident bytes.
SPARSE_FACTOR = 4
#: Only ranges of at least this many bytes are scanned (small ones cost more calls than
#: the misses they would save).
MIN_RANGE = 64 << 20
#: Present pages one call may find: bounds each mmap-lock hold (32768 4 KiB pages, 128 MiB:
#: ~0.15 ms measured).
PAGES_PER_CALL = 32_768
#: The measured mmap-lock hold of one call of :data:`PAGES_PER_CALL` present pages (a call
#: over empty page-table levels holds it for less; a shared 2-core VM measured 0.4 ms a
#: call, its own time included, so 33 calls took ~14 ms there).
CALL_HOLD_S = 0.15e-3
#: The target's mmap-lock hold one read may spend on scans, in all: under a fifth of what
#: the cheapest full numa_maps read of 2 GiB costs (24 ms measured), in holds of one call.
HOLD_BUDGET_S = 5e-3
#: Calls per read, from the two above: 33 calls find up to 4 GiB of 4 KiB pages. A bigger
#: reservation is scanned on over the next reads (:class:`ScanCache`).
MAX_CALLS = int(HOLD_BUDGET_S / CALL_HOLD_S)
#: Strata of more ranges than this are left as they are (the Python loop over them would
#: cost more than it saves).
MAX_RANGES = 16_384
#: Present runs kept per scanned range (beyond, joined across their smallest gaps), ranges
#: scanned per process (beyond, a range stays virtual) and runs kept in all (the processes
#: scanned longest ago go first): bounds what a :class:`ScanCache` holds (~120 bytes a run).
MAX_RUNS = 1 << 16
MAX_SCANNED_RANGES = 32
MAX_KEPT_RUNS = 1 << 18
#: Processes whose scan state is kept (the oldest goes first).
MAX_PROCESSES = 256
#: Without PAGEMAP_SCAN: ``pagemap`` reads per sampled read (each of at most 128 MiB of 4 KiB
#: pages; 8 reads, 1 GiB of virtual pages, cost ~4.5 ms of CPU measured, each mmap-lock hold
#: of the kernel's 2 MiB walk short), and the largest range read (a pass over it within 64
#: reads; a bigger one stays virtual).
READ_CALLS = 8
READ_MAX_RANGE = 64 << 30


def is_sparse(stratum: Stratum, resident: int) -> bool:
    """Return whether ``stratum`` is worth narrowing: many times more virtual bytes than
    ``resident`` bytes, a range of at least :data:`MIN_RANGE`, few enough ranges."""
    return (stratum.pages * stratum.page_size > SPARSE_FACTOR * max(resident, 0)
            and stratum.largest >= MIN_RANGE and len(stratum.starts) <= MAX_RANGES)


@dataclass
class RangeScan:
    """What the scans found in one big range ``[start, end)`` of a process: its present
    runs (sorted, disjoint; those before ``pos`` from the pass under way, those after it
    from the last whole pass), where the pass under way stands, and how many passes were
    completed (0: ``[pos, end)`` was never scanned)."""

    start: int
    end: int
    runs: list[tuple[int, int]] = field(default_factory=list)
    pos: int = 0
    passes: int = 0

    def __post_init__(self) -> None:
        if self.pos < self.start:
            self.pos = self.start


#: (start, end) of a range -> its scan.
ScanState = dict[tuple[int, int], RangeScan]


class ScanCache:
    """The :class:`ScanState` of each process (keyed by its identity, see
    ``readers/sampled/reader.py``), kept between reads: a range is scanned on where
    the last read stopped, and its runs are reused while the range (its start and end in
    ``maps``) is unchanged. ``usable`` says whether PAGEMAP_SCAN worked here (None: not tried
    yet; a kernel without it is asked once, not every read). Bounded: :data:`MAX_PROCESSES`
    processes, :data:`MAX_KEPT_RUNS`
    runs in all, :data:`MAX_RUNS` a range, :data:`MAX_SCANNED_RANGES` ranges a process."""

    def __init__(self, max_entries: int = MAX_PROCESSES, max_runs: int = MAX_KEPT_RUNS
                 ) -> None:
        self.max_entries = max_entries
        self.max_runs = max_runs
        self.usable: bool | None = None
        self._states: dict[Hashable, ScanState] = {}

    def __len__(self) -> int:
        return len(self._states)

    def retain(self, keys: frozenset[Hashable]) -> None:
        """Forget the scans of every process whose key is not in ``keys``."""
        for key in [k for k in self._states if k not in keys]:
            del self._states[key]

    def state(self, key: Hashable) -> ScanState:
        """Return the scan state of process ``key`` (a new, empty one the first time), the
        newest; the oldest others go while more than ``max_entries`` processes or
        ``max_runs`` runs are kept."""
        got = self._states.pop(key, None)
        if self.max_entries <= 0:
            return {}
        got = {} if got is None else got
        runs = self.runs()
        while self._states and (len(self._states) >= self.max_entries
                                or runs + _runs(got) > self.max_runs):
            oldest = self._states.pop(next(iter(self._states)))
            runs -= _runs(oldest)
        self._states[key] = got
        return got

    def runs(self) -> int:
        """Return the present runs kept, all processes together."""
        return sum(_runs(st) for st in self._states.values())


def _runs(state: ScanState) -> int:
    """Return the present runs ``state`` keeps."""
    return sum(len(r.runs) for r in state.values())


class Narrowed(NamedTuple):
    """A stratum with its big ranges replaced by present runs, the calls made, the
    virtual bytes of the ranges' parts never scanned yet (left out of the stratum: a
    stratum of their own that is not sampled; its bytes are reported unsampled), and the
    bytes of the present runs found (as the scans saw them)."""

    stratum: Stratum
    calls: int
    unscanned: int
    present: int = 0


class Unscanned(NamedTuple):
    """Of one kind's stratum: the virtual bytes of the parts never scanned yet (left out of
    the drawn stratum), and the bytes of the present runs the scans found."""

    virtual: int
    present: int


def _spans(stratum: Stratum) -> list[tuple[int, int]]:
    """Return the [start, end) byte ranges of ``stratum``, in order."""
    ps, cum = stratum.page_size, stratum.cumulative
    return [(a, a + (cum[i + 1] - cum[i]) * ps) for i, a in enumerate(stratum.starts)]


def _splice(runs: list[tuple[int, int]], lo: int, hi: int, new: list[tuple[int, int]]
            ) -> list[tuple[int, int]]:
    """Return ``runs`` with what lay in ``[lo, hi)`` replaced by ``new`` (runs inside it,
    in order), touching runs joined."""
    out: list[tuple[int, int]] = []
    for x, y in runs:
        if x < lo:
            out.append((x, min(y, lo)))
    out.extend(new)
    out.extend((max(x, hi), y) for x, y in runs if y > hi)
    out.sort()
    joined: list[tuple[int, int]] = []
    for x, y in out:
        if joined and x <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(y, joined[-1][1]))
        elif y > x:
            joined.append((x, y))
    return joined


def _coarsen(runs: list[tuple[int, int]], limit: int, page: int) -> list[tuple[int, int]]:
    """Return ``runs`` joined across their smallest gaps until at most ``limit`` are left
    (a joined gap is virtual pages of the stratum that are not resident: drawn in vain,
    never a bias)."""
    gap = page
    while len(runs) > limit:
        joined = [runs[0]]
        for x, y in runs[1:]:
            if x - joined[-1][1] <= gap:
                joined[-1] = (joined[-1][0], y)
            else:
                joined.append((x, y))
        runs, gap = joined, gap * 2
    return runs


def _scan_on(rs: RangeScan, present: PresentFn, calls: int, page: int, resident: int
             ) -> int:
    """Scan ``rs`` on from where it stands with at most ``calls`` calls of ``present``;
    return the calls made. A dense range no bigger than the resident bytes allow (not the
    reservation that makes the stratum sparse) is left after one call."""
    used = 0
    while used < calls:
        lo = rs.pos
        regions, walk_end = present(lo, rs.end, PAGES_PER_CALL)
        used += 1
        floor, new, covered = lo, [], 0
        for x, y in regions:  # in order, none overlapping, none outside [lo, end)
            x, y = max(x - x % page, floor), min(-(-y // page) * page, rs.end)
            if y > x:
                new.append((x, y))
                floor = y
                covered += y - x
        if walk_end <= lo:
            break  # no progress: the rest stays as it is
        rs.runs = _coarsen(_splice(rs.runs, lo, walk_end, new), MAX_RUNS, page)
        rs.pos = walk_end
        if rs.pos >= rs.end:
            rs.pos, rs.passes = rs.start, rs.passes + 1
            break  # one pass at most per read
        if 2 * covered >= walk_end - lo and rs.end - rs.start <= SPARSE_FACTOR * resident:
            break
    return used


def narrow(stratum: Stratum, present: PresentFn, calls: int, resident: int,
           state: ScanState | None = None, keep_tail: bool = False,
           max_range: int | None = None) -> Narrowed:
    """Return the stratum with its ranges of at least :data:`MIN_RANGE` replaced by their
    present runs (:class:`Narrowed`), scanning on from where ``state`` (this process's,
    updated; None: start afresh) stood, the biggest range first, with at most ``calls``
    calls of ``present`` in all, until the stratum is no longer sparse for ``resident``
    bytes. A range's part never scanned is left out of the stratum when the range alone is
    over :data:`SPARSE_FACTOR` times ``resident`` (a reservation: uniform draws there land
    on nothing), else, or with ``keep_tail``, it stays virtual. Ranges over ``max_range``
    bytes (None: any) are not scanned. The stratum is returned as it was when no page at
    all would be left in it."""
    ps = stratum.page_size
    spans = _spans(stratum)
    big = sorted((i for i, (a, b) in enumerate(spans) if b - a >= MIN_RANGE),
                 key=lambda i: spans[i][0] - spans[i][1])
    kept: ScanState = {} if state is None else state
    pieces: dict[int, list[tuple[int, int]]] = {}
    used = unscanned = found = 0
    virtual = stratum.pages * ps
    for i in big:
        a, b = spans[i]
        if max_range is not None and b - a > max_range:
            continue
        rs = kept.get((a, b))
        if rs is None and (used >= calls or virtual <= SPARSE_FACTOR * resident
                           or len(kept) >= MAX_SCANNED_RANGES):
            continue
        if rs is None:
            rs = kept[(a, b)] = RangeScan(a, b)
        if used < calls:
            used += _scan_on(rs, present, calls - used, ps, resident)
        got = list(rs.runs)
        tail: list[tuple[int, int]] = []
        if not rs.passes and rs.pos < b:
            got = [(x, min(y, rs.pos)) for x, y in got if x < rs.pos]
            if b - a > SPARSE_FACTOR * resident and not keep_tail:
                unscanned += b - rs.pos
            else:
                tail = [(rs.pos, b)]
        runs = sum(y - x for x, y in got)
        found += runs
        pieces[i] = got + tail
        virtual += runs + sum(y - x for x, y in tail) - (b - a)
    out: list[tuple[int, int]] = []
    for i, span in enumerate(spans):
        out.extend(pieces.get(i, (span,)))
    if not out:
        return Narrowed(stratum, used, 0)
    return Narrowed(make_stratum(stratum.kind, out, ps), used, unscanned, found)


def narrow_strata(strata: dict[Kind, Stratum], totals: dict[Kind, int],
                  present: PresentFn, calls: int = MAX_CALLS,
                  state: ScanState | None = None, keep_tail: bool = False,
                  max_range: int | None = None
                  ) -> tuple[dict[Kind, Stratum], int, dict[Kind, Unscanned]]:
    """Return the strata with the sparse ones narrowed (same kinds, same order), the calls
    of ``present`` made (at most ``calls`` in all), and, per kind with a part not scanned
    yet, what was left out and what was found (see :func:`narrow`, which ``keep_tail`` and
    ``max_range`` are passed to)."""
    out: dict[Kind, Stratum] = {}
    used = 0
    unscanned: dict[Kind, Unscanned] = {}
    if state:
        spans = {r for s in strata.values() for r in _spans(s) if r[1] - r[0] >= MIN_RANGE}
        for key in [k for k in state if k not in spans]:
            del state[key]  # the mapping changed: what was found there is stale
    for kind, s in strata.items():
        if is_sparse(s, totals.get(kind, 0)):
            got = narrow(s, present, max(calls - used, 0), totals.get(kind, 0), state,
                         keep_tail, max_range)
            used += got.calls
            s = got.stratum
            if got.unscanned:
                unscanned[kind] = Unscanned(got.unscanned, got.present)
        out[kind] = s
    return out, used, unscanned


def pagemap_present(pagemap: PagemapRead, page_size: int) -> PresentFn:
    """Return a :data:`PresentFn` over ``pagemap``'s entries (``page_size``: the base page
    the entries are of): one read of at most :data:`READ_PAGES` entries per call, whatever
    the present pages it finds (``max_pages`` is not needed: the read bounds itself)."""
    def present(start: int, end: int, max_pages: int) -> tuple[list[tuple[int, int]], int]:
        first = start // page_size
        want = min(-(-(end - first * page_size) // page_size), READ_PAGES)
        data = pagemap.entries(first, want)
        runs = [(a * page_size, b * page_size) for a, b in present_runs(data, first)]
        walk_end = (first + len(data) // 8) * page_size
        return runs, max(min(walk_end, end), start)
    return present


def narrowed(mm_dir: str, strata: dict[Kind, Stratum], totals: dict[Kind, int],
             scans: ScanCache, state: ScanState | None = None, page_size: int = 4096,
             fallback: bool = True
             ) -> tuple[dict[Kind, Stratum], dict[Kind, Unscanned]]:
    """Return ``strata`` with the sparse ones narrowed to their present runs through the
    ``pagemap`` of ``mm_dir`` (scanning on from ``state``, the process's kept scan; whether
    the kernel has PAGEMAP_SCAN is kept in ``scans``), and the unscanned bytes left out per
    kind. Without PAGEMAP_SCAN and with ``fallback``, the runs are read from the
    ``pagemap`` entries (of ``page_size`` pages; nothing is left out: module docstring).
    Unchanged (and none left out) where none is sparse, or neither way can be used or the
    process cannot be scanned (the page queries then say Gone or Denied themselves)."""
    if not any(is_sparse(s, totals.get(k, 0)) for k, s in strata.items()):
        return strata, {}
    if scans.usable is not False:
        try:
            with PagemapScan(mm_dir) as scan:
                got, _, unscanned = narrow_strata(strata, totals, scan.present,
                                                  state=state)
        except PagemapScanUnsupported:
            scans.usable = False
        except SourceError:
            return strata, {}
        else:
            scans.usable = True
            return got, unscanned
    if not fallback:
        return strata, {}
    try:
        with PagemapRead(mm_dir) as pagemap:
            got, _, _ = narrow_strata(strata, totals, pagemap_present(pagemap, page_size),
                                      calls=READ_CALLS, state=state, keep_tail=True,
                                      max_range=READ_MAX_RANGE)
    except SourceError:
        return strata, {}
    return got, {}


def set_aside(est: PlacementEstimate, unscanned: dict[Kind, Unscanned],
              totals: dict[Kind, int], page_size: int) -> PlacementEstimate:
    """Return ``est`` with the bytes the unscanned parts hold moved from its placed bytes to
    ``unsampled_bytes``: per kind, what ``totals`` counts beyond the resident bytes found
    in the stratum (the larger of its sample's (or census's) estimate and the present
    bytes the scans found), at most the unscanned virtual bytes and at most what was
    placed of the kind; the node shares of the rest stay."""
    if not unscanned:
        return est
    out = dict(est.bytes)
    moved = 0
    for res in est.strata:
        left = unscanned.get(res.kind)
        if left is None:
            continue
        sampled = (res.bytes if res.census else
                   res.virtual_pages * page_size * res.resident // max(res.queried, 1))
        placed = sum(v for (_, k), v in out.items() if k is res.kind)
        cut = min(max(totals.get(res.kind, 0) - max(sampled, left.present), 0),
                  left.virtual, placed)
        if not cut or not placed:
            continue
        for key in [k for k in out if k[1] is res.kind]:
            take = out[key] * cut // placed
            out[key] -= take
            moved += take
    return replace(est, bytes={k: v for k, v in out.items() if v},
                   unsampled_bytes=est.unsampled_bytes + moved)
