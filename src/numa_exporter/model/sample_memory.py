"""What the sampled reads of one process learned, carried forward while evidence says nothing
moved; and the page movement the sample itself shows.

A sampled read (:mod:`numa_exporter.model.sampling`) draws a fresh sample each time. Two
things built on that sample need more than one read:

* **Movement.** The per-node estimate changes from read to read by sampling noise alone, so
  the difference of two estimates is not movement. Movement is counted from evidence
  instead: a *panel* of resident pages per kind is followed from read to read (their
  addresses and last nodes), and a panel page seen on another node is a page that moved,
  standing for ``bytes of its kind / resident panel pages of its kind`` bytes. Pages that
  left (freed, unmapped) and pages that arrived by allocation are not movement. The host's
  own migration counters (:func:`host_migrated_pages`) gate the check: when no page on the
  host migrated since the last read, nothing of this process moved and the panel is not
  queried at all.
* **Convergence.** While the evidence says nothing moved (the host moved nothing, or the
  panel saw no page change node), the mappings are the same and the resident bytes of a
  kind changed by at most :data:`STABLE_TOTAL`, the node counts of earlier reads are still a
  uniform sample of the same pages: they are added to the fresh one, up to
  :data:`CARRY_READS` reads' worth (and at least :data:`CARRY_FLOOR` samples, so a sparse
  stratum whose reads find few resident pages each converges too), so the per-node bytes of
  an unmoved process approach the truth read after read. Any change of a kind (a panel page
  moved, its mappings or its resident bytes changed) drops what that kind carried: the next
  estimate is a fresh one. Except growth: where a kind's resident bytes grew and its
  mappings of the last read all still stand (new mappings, or old ones extended), the
  ranges of the last read keep their counts for the bytes they held, and only the new
  ranges are estimated fresh (:func:`grown_part`, :func:`mixed_counts`). A kind that grew
  inside the same mappings (a heap touched further into its reservation) by at most
  :data:`GROWN_WITHIN` keeps its counts weighted by the share of its bytes they describe
  (:func:`kept_counts`).

State per process is bounded: at most :data:`PANEL_PAGES` followed pages (10 bytes each)
and one count per (kind, node).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from numa_exporter.model.sampling import (
    PlacementEstimate,
    Stratum,
    StratumResult,
    sample_size,
)
from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.numa_maps import Kind

#: Pages followed per process (all kinds together).
PANEL_PAGES = 512
#: Panel pages replaced by fresh draws per read, so the panel follows growth.
PANEL_REFRESH = 64
#: Pages drawn into a panel not yet full, per read (it fills over four reads: a first read
#: costs about what it did).
PANEL_FILL = 128
#: At most this many reads' worth of resident samples are carried per kind (older reads
#: fade out proportionally): the standard error falls by up to sqrt(CARRY_READS + 1).
CARRY_READS = 16
#: Resident samples a kind may carry whatever its reads find: the sample size of the default
#: design (1 % at 95 %, 9,604). A stratum whose reads each find few resident pages (present
#: pages spread thinly over a big mapping, where PAGEMAP_SCAN cannot narrow it) would else
#: carry at most CARRY_READS of its few, and its error stay where a few hundred samples put
#: it (issue 33: 6-11 % of its size over 18 reads on 6.1).
CARRY_FLOOR = sample_size()
#: A kind whose resident bytes changed by more than this fraction starts afresh, unless
#: it grew inside the same mappings by at most :data:`GROWN_WITHIN` (:func:`kept_counts`).
STABLE_TOTAL = 0.005
#: A kind that grew by at most this fraction since the last read, inside the mappings that
#: read saw (a heap touched further into its reservation), keeps its carried counts,
#: weighted down by the share of its bytes that is new. Where the new pages sit elsewhere
#: than the old, the fresh sample is at odds with the counts (:func:`at_odds`) and they go
#: (issue 33: a growing interleaved heap never carried anything, 3-8 % per-node error).
GROWN_WITHIN = 0.25
#: Host counters of pages migrated by anything (migrate_pages, move_pages, mbind, NUMA
#: balancing, demotion, promotion, compaction): ``pgmigrate_success`` counts every one.
HOST_MIGRATION = "pgmigrate_success"
#: Used only where ``pgmigrate_success`` is missing.
HOST_MIGRATION_PARTS = ("numa_pages_migrated", "pgpromote_success")
HOST_DEMOTION_PREFIX = "pgdemote_"

#: (from node, to node) -> bytes.
Moves = dict[tuple[int, int], int]


def host_migrated_pages(vmstat: Mapping[str, int]) -> int | None:
    """Return the host's count of migrated pages (``pgmigrate_success``; else the sum of
    the NUMA balancing, promotion and demotion counters; None when vmstat has none)."""
    if HOST_MIGRATION in vmstat:
        return vmstat[HOST_MIGRATION]
    parts = [v for k, v in vmstat.items()
             if k in HOST_MIGRATION_PARTS or k.startswith(HOST_DEMOTION_PREFIX)]
    return sum(parts) if parts else None


def migrated_since(before: int | None, now: int | None) -> int | None:
    """Return the pages the host migrated between two counter readings (None: unknown,
    or the counter went back)."""
    if before is None or now is None or now < before:
        return None
    return now - before


@dataclass(slots=True)
class Panel:
    """Resident pages of one kind followed from read to read: addresses, last nodes."""

    addresses: array[int] = field(default_factory=lambda: array("Q"))
    nodes: array[int] = field(default_factory=lambda: array("h"))

    def __len__(self) -> int:
        return len(self.addresses)


@dataclass(slots=True)
class SampleMemory:
    """What the sampled reads of one process carry to the next read."""

    shapes: dict[Kind, int] = field(default_factory=dict)  # stratum identity per kind
    totals: dict[Kind, int] = field(default_factory=dict)  # resident bytes per kind
    counts: dict[Kind, dict[int, float]] = field(default_factory=dict)  # carried samples
    panel: dict[Kind, Panel] = field(default_factory=dict)
    host_migrated: int | None = None  # the host's counter at the last read
    # the ranges of each kind's stratum at the last read (kinds of at most
    # MAX_GROWTH_RANGES ranges): what a grown process's unchanged part is
    ranges: dict[Kind, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # the last read found its fresh sample at odds with what was carried, or saw pages move:
    # the next read queries the panel whatever the host's counter says
    suspect: bool = False

    def panel_pages(self) -> int:
        """Return the number of pages followed."""
        return sum(len(p) for p in self.panel.values())

    def clear(self) -> None:
        """Forget everything (the process is then read as if for the first time)."""
        self.shapes, self.totals, self.counts, self.panel = {}, {}, {}, {}
        self.ranges = {}


def shape_of(stratum: Stratum) -> int:
    """Return an identity of the stratum's ranges: equal for the same mappings."""
    def raw(values: Sequence[int]) -> bytes:
        return values.tobytes() if isinstance(values, array) else array("Q", values).tobytes()
    return hash((stratum.page_size, raw(stratum.starts), raw(stratum.cumulative)))


def is_node(status: int) -> bool:
    """Return whether a page status is a node (the page is resident there)."""
    return 0 <= status <= MAX_NODE_ID


@dataclass(frozen=True, slots=True)
class Followed:
    """The panel of one kind as a read found it: ``moves`` pages per (from, to) node,
    ``resident`` panel pages still resident, and the panel with what left dropped."""

    moves: dict[tuple[int, int], int]
    resident: int
    panel: Panel


def follow(panel: Panel, statuses: Sequence[int]) -> Followed:
    """Return what the statuses (one per panel page, in order) say of the panel: pages on
    another node than last time moved; pages no longer resident left the panel (freed or
    unmapped: not movement)."""
    moves: dict[tuple[int, int], int] = {}
    out = Panel()
    for addr, was, now in zip(panel.addresses, panel.nodes, statuses, strict=False):
        if not is_node(now):
            continue
        if now != was:
            moves[(was, now)] = moves.get((was, now), 0) + 1
        out.addresses.append(addr)
        out.nodes.append(now)
    return Followed(moves, len(out), out)


def moved_bytes(followed: Mapping[Kind, Followed], kind_bytes: Mapping[Kind, int]) -> Moves:
    """Return the bytes moved per (from, to) node: each moved panel page of a kind stands
    for that kind's bytes over its resident panel pages."""
    out: Moves = {}
    for kind, f in followed.items():
        if not f.resident or not f.moves:
            continue
        per_page = kind_bytes.get(kind, 0) / f.resident
        for pair, pages in f.moves.items():
            out[pair] = out.get(pair, 0) + round(pages * per_page)
    return {k: v for k, v in out.items() if v}


def refill(panel: Panel, addresses: Iterable[int], statuses: Iterable[int],
           limit: int) -> Panel:
    """Return the panel with the resident pages among ``addresses`` added (their statuses
    in order) and the oldest pages dropped beyond ``limit``."""
    out = Panel(array("Q", panel.addresses), array("h", panel.nodes))
    for addr, st in zip(addresses, statuses, strict=False):
        if is_node(st):
            out.addresses.append(addr)
            out.nodes.append(st)
    extra = len(out) - max(limit, 0)
    if extra > 0:
        del out.addresses[:extra]
        del out.nodes[:extra]
    return out


def stable(before: int | None, now: int) -> bool:
    """Return whether resident bytes ``now`` are within :data:`STABLE_TOTAL` of ``before``."""
    if before is None:
        return False
    top = max(before, now)
    return top == 0 or abs(now - before) / top <= STABLE_TOTAL


def kept_counts(memory: SampleMemory, kind: Kind, shape: int, total: int, moved: bool
                ) -> dict[int, float]:
    """Return the node counts of earlier reads still valid for ``kind``: none when pages of
    the kind moved or its mappings changed; all where its resident bytes are
    :func:`stable`; where they grew by at most :data:`GROWN_WITHIN` inside the same
    mappings, the counts weighted by the share of its bytes they describe (the last read's
    total over this one's: the new pages are estimated by the fresh sample alone); none
    where they shrank or grew more."""
    if moved or memory.shapes.get(kind) != shape:
        return {}
    before = memory.totals.get(kind)
    counts = memory.counts.get(kind, {})
    if stable(before, total):
        return dict(counts)
    if before and before < total <= before * (1 + GROWN_WITHIN):
        share = before / total
        return {n: c * share for n, c in counts.items()}
    return {}


#: False-alarm probability of :func:`at_odds` per read, all kinds together: a process that
#: nothing moves has its carried counts dropped about once in 100,000 reads.
CHANGE_ALPHA = 1e-5
#: The least samples by which a fresh node count must differ from the carried share.
CHANGE_SAMPLES = 8


def chi2_sf(x: float, dof: int) -> float:
    """Return the probability that a chi-square variable of ``dof`` (>= 1) degrees of
    freedom exceeds ``x`` (closed forms for integer degrees of freedom)."""
    if x <= 0:
        return 1.0
    h = x / 2
    if dof % 2 == 0:
        term = math.exp(-h)
        total = term
        for i in range(1, dof // 2):
            term *= h / i
            total += term
        return min(total, 1.0)
    total = math.erfc(math.sqrt(h))
    term = math.exp(-h) * math.sqrt(h) / (math.sqrt(math.pi) / 2)
    for i in range(1, (dof + 1) // 2):
        total += term
        term *= h / (i + 0.5)
    return min(total, 1.0)


def at_odds(carried: Mapping[int, float], fresh: Iterable[tuple[int, int]],
            tests: int = 1) -> bool:
    """Return whether a fresh sample's node counts differ from the carried ones by more
    than sampling explains: Pearson's chi-square test of homogeneity of the two samples
    over the nodes either saw rejects at :data:`CHANGE_ALPHA` / ``tests`` (``tests``: the
    kinds tested in the same read), and some node's fresh count is off the carried share
    by at least :data:`CHANGE_SAMPLES` samples.

    The carried counts stand for as many samples as they sum to (fading only scales them
    down, so the test is conservative). The host's migration counter is added to only when
    a migrate_pages call ends, so a long migration (a big migrate_pages(2), mbind or
    move_pages) looks quiet while it runs; the fresh sample shows it."""
    got = dict(fresh)
    m = sum(got.values())
    w = sum(carried.values())
    if not m or w <= 0:
        return False
    stat, cells, biggest = 0.0, 0, 0.0
    for n in set(got) | set(carried):
        f, c = got.get(n, 0), carried.get(n, 0.0)
        pooled = (f + c) / (m + w)
        if pooled <= 0:
            continue
        cells += 1
        diff = f / m - c / w
        stat += diff * diff / (pooled * (1 / m + 1 / w))
        biggest = max(biggest, abs(diff) * m)
    if cells < 2 or biggest < CHANGE_SAMPLES:
        return False
    return chi2_sf(stat, cells - 1) < CHANGE_ALPHA / max(tests, 1)


def _allocate(total: int, counts: Mapping[int, float]) -> dict[int, int]:
    """Return ``total`` bytes split over nodes in proportion to ``counts`` (summing to it)."""
    whole = sum(counts.values())
    out: dict[int, int] = {}
    if whole <= 0:
        return out
    acc = 0
    items = sorted((n, c) for n, c in counts.items() if c > 0)
    for i, (n, c) in enumerate(items):
        v = total - acc if i == len(items) - 1 else int(total * c // whole)
        acc += v
        out[n] = v
    return out


def combine(est: PlacementEstimate, carried: Mapping[Kind, Mapping[int, float]],
            reads: int = CARRY_READS) -> tuple[PlacementEstimate, dict[Kind, dict[int, float]]]:
    """Return the estimate with each sampled stratum's fresh node counts added to what it
    carried (at most ``reads`` times the fresh resident samples, or :data:`CARRY_FLOOR` if
    more; beyond, they fade out in proportion), and the counts to carry next. Census strata
    are exact: nothing added. A carried count below 0 (none is made here; hostile arithmetic
    is not trusted) counts as 0, so counts never cancel a fresh sample's bytes away. A
    stratum whose read found no resident page keeps what it carried."""
    out_bytes = dict(est.bytes)
    results: list[StratumResult] = []
    keep: dict[Kind, dict[int, float]] = {}
    for s in est.strata:
        if s.census or not s.resident or not s.bytes:
            if not s.census and not s.resident and carried.get(s.kind):
                # a read that found no resident page of a thin stratum: what it carried
                # still stands (its bytes are unsampled this once)
                keep[s.kind] = {n: c for n, c in carried[s.kind].items()
                                if c > 0 and math.isfinite(c)}
            results.append(s)
            continue
        counts: dict[int, float] = {n: float(c) for n, c in s.node_counts}
        for n, c in carried.get(s.kind, {}).items():
            if c > 0 and math.isfinite(c):
                counts[n] = counts.get(n, 0.0) + c
        whole = sum(counts.values())
        limit = max((reads + 1) * s.resident, CARRY_FLOOR)
        if whole > limit:
            counts = {n: c * limit / whole for n, c in counts.items()}
            whole = float(limit)
        keep[s.kind] = counts
        for n, _ in s.node_counts:
            out_bytes.pop((n, s.kind), None)
        for n, b in _allocate(s.bytes, counts).items():
            if b:
                out_bytes[(n, s.kind)] = out_bytes.get((n, s.kind), 0) + b
        results.append(replace(s, resident=max(int(whole), s.resident), node_counts=tuple(
            sorted((n, round(c)) for n, c in counts.items() if round(c) > 0))))
    return replace(est, bytes={k: v for k, v in out_bytes.items() if v},
                   strata=tuple(results)), keep


#: Ranges of one kind whose list is kept for growth (16 bytes each; more: no growth split).
MAX_GROWTH_RANGES = 4096


def _subtract(ranges: Sequence[tuple[int, int]], cut: Sequence[tuple[int, int]]
              ) -> list[tuple[int, int]]:
    """Return the parts of sorted, disjoint ``ranges`` outside sorted, disjoint ``cut``."""
    out: list[tuple[int, int]] = []
    j = 0
    for a, b in ranges:
        while j < len(cut) and cut[j][1] <= a:
            j += 1
        k, lo = j, a
        while k < len(cut) and cut[k][0] < b:
            if cut[k][0] > lo:
                out.append((lo, cut[k][0]))
            lo = max(lo, cut[k][1])
            k += 1
        if lo < b:
            out.append((lo, b))
    return out


@dataclass(frozen=True, slots=True)
class Growth:
    """A kind that grew while its earlier mappings stood: ``old`` the ranges of the last
    read (their pages keep their counts, ``old_bytes`` of them), ``new`` the ranges added
    since (estimated fresh, ``new_bytes``: what the resident bytes grew by)."""

    old: tuple[tuple[int, int], ...]
    new: tuple[tuple[int, int], ...]
    old_bytes: int
    new_bytes: int


def grown_part(memory: SampleMemory, kind: Kind, ranges: Sequence[tuple[int, int]],
               total: int) -> Growth | None:
    """Return how ``kind`` grew since the last read (None: it did not grow that way): its
    resident bytes ``total`` are over :data:`STABLE_TOTAL` above the last read's, it
    carried counts, every range of the last read lies inside today's ``ranges`` (sorted,
    disjoint; none unmapped or shrunk: the pages counted then are still there, unless freed
    inside a mapping, which the fresh sample's test at odds catches) and some range is new
    (growth inside the old ranges alone cannot be told from a change)."""
    old = memory.ranges.get(kind)
    before = memory.totals.get(kind)
    if (not old or before is None or before <= 0 or total <= before
            or stable(before, total) or not memory.counts.get(kind)):
        return None
    if _subtract(old, ranges):
        return None  # a range of the last read is gone (in part)
    new = _subtract(ranges, old)
    if not new:
        return None
    return Growth(tuple(old), tuple(new), before, total - before)


def mixed_counts(old: Mapping[int, float], old_bytes: int, new: Mapping[int, float],
                 new_bytes: int) -> dict[int, float]:
    """Return counts to carry for a kind of ``old_bytes`` placed by counts ``old`` and
    ``new_bytes`` placed by counts ``new``: the node shares of the whole, as many samples
    as the less sampled part supports at its weight (conservative: the whole is never
    claimed more precise than either part)."""
    wo, wn = sum(old.values()), sum(new.values())
    whole = old_bytes + new_bytes
    if whole <= 0 or (wo <= 0 and wn <= 0):
        return {}
    if wo <= 0 or old_bytes <= 0:
        return dict(new)
    if wn <= 0 or new_bytes <= 0:
        return dict(old)
    fo, fn = old_bytes / whole, new_bytes / whole
    size = min(wo / fo, wn / fn)
    out: dict[int, float] = {}
    for n, c in old.items():
        out[n] = out.get(n, 0.0) + size * fo * c / wo
    for n, c in new.items():
        out[n] = out.get(n, 0.0) + size * fn * c / wn
    return {n: c for n, c in out.items() if c > 0}
