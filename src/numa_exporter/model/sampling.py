"""Sampled placement: estimate bytes per (node, kind) from the nodes of a few random pages.

Design (see docs/architecture.md, "Sampled placement"):

* **Frame.** Each mapping of ``/proc/<pid>/maps`` that can hold pages numa_maps counts is put
  in the stratum of its kind (anon, file, shmem, hugetlb). PROT_NONE mappings, the kernel's
  pseudo mappings (``[vdso]``, ...) and device files under ``/dev`` (other than shared memory
  and hugetlbfs) are left out: they hold no normal pages, only virtual size.
* **Census.** A stratum of at most ``census_pages`` virtual pages is queried page by page:
  its bytes per node are exact.
* **Sample.** In a bigger stratum, page addresses are drawn uniformly over its virtual pages
  (with replacement). Pages that are not resident (``-ENOENT``/``-EFAULT``) say nothing
  about placement and are *not* counted as samples; drawing continues until the stratum has
  its quota of resident samples or the query budget is spent. Conditioned on being resident,
  a uniform virtual page is a uniform resident page (THP and hugetlb pages included: every
  base page of a huge page is resident), so the resident samples estimate the stratum's node
  shares without bias. The stopping rule depends on residency only, not on nodes.
* **Scaling.** Each sampled stratum's node shares are multiplied by its resident bytes from
  ``/proc/<pid>/status`` (RssAnon, RssFile, RssShmem, HugetlbPages: counters, no page walk).
  Census strata are counted exactly, and what status counts beyond the census bytes is shared
  among the sampled strata in proportion to their counters (so a private file mapping's
  copied-on-write pages, which status counts as RssAnon and numa_maps as file, are not
  counted twice).
* **Sample size.** The remote ratio is ``sum_k w_k r_k`` (``w_k`` a stratum's share of the
  bytes, ``r_k`` its remote fraction, for *any* set of home nodes). With ``m_k`` resident
  samples, ``Var = sum_k w_k^2 r_k (1 - r_k) / m_k <= sum_k w_k^2 / (4 m_k)``. Allocating
  ``m_k >= m w_k`` (proportional to the stratum's bytes) bounds it by ``1 / (4 m)``; ``m =
  ceil(z^2 / (4 e^2))`` for target error ``e`` at confidence ``z`` (9604 for 1 percentage
  point at 95 %). Census strata add no variance, so the sampled strata together need only
  ``m (W_s)^2`` samples where ``W_s`` is their share of the bytes.

Pure: the page query is a function passed in, the random generator a parameter.
"""

from __future__ import annotations

import bisect
import errno
import math
import random
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Protocol

from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.numa_maps import SHMEM_PREFIXES, Kind, fold_nodes
from numa_exporter.parsers.pid_maps import (
    DEFAULT_HUGETLBFS_MOUNTS,
    PSEUDO_PATHS,
    MapsEntry,
    mapping_kind,
)
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.sources.deadline import NEVER, Deadline

#: A page query: addresses in, one status per address out (node id, or negative errno).
PageQuery = Callable[[Sequence[int]], Sequence[int]]

DEFAULT_TARGET_ERROR = 0.01
DEFAULT_CONFIDENCE = 0.95
#: Strata of at most this many virtual pages are queried whole (16 MiB of 4 KiB pages):
#: less than a full sample costs, and exact where the RSS counters are least so.
DEFAULT_CENSUS_PAGES = 4096
#: Least resident samples a sampled stratum gets, however small its share.
MIN_STRATUM_SAMPLES = 64
#: Queries (resident or not) allowed per resident sample wanted, for sparse mappings.
DEFAULT_BUDGET_FACTOR = 64
_NOT_RESIDENT = frozenset({-errno.ENOENT, -errno.EFAULT})
_BATCH = 256


def sample_size(target_error: float = DEFAULT_TARGET_ERROR,
                confidence: float = DEFAULT_CONFIDENCE) -> int:
    """Return the resident samples that bound the remote ratio's error by ``target_error``
    at ``confidence`` (two-sided, normal approximation, worst case r(1-r) = 1/4)."""
    if not 0 < target_error < 1 or not 0 < confidence < 1:
        raise ValueError("target_error and confidence must lie in (0, 1)")
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    return math.ceil(z * z / (4 * target_error * target_error))


def target_stderr(target_error: float = DEFAULT_TARGET_ERROR,
                  confidence: float = DEFAULT_CONFIDENCE) -> float:
    """Return the standard error that ``target_error`` at ``confidence`` stands for."""
    return target_error / NormalDist().inv_cdf((1 + confidence) / 2)


def sampleable(entry: MapsEntry,
               hugetlbfs_mounts: tuple[str, ...] = DEFAULT_HUGETLBFS_MOUNTS) -> bool:
    """Return True when the mapping can hold pages that numa_maps would count."""
    if not entry.accessible:
        return False
    path = entry.path
    if path is None:
        return True
    if path in PSEUDO_PATHS:
        return False
    if path.startswith("/dev/"):
        return path.startswith(SHMEM_PREFIXES) or any(
            path.startswith(m.rstrip("/") + "/") for m in hugetlbfs_mounts if m)
    return True


@dataclass(frozen=True, slots=True)
class Stratum:
    """The virtual pages of one kind: page-aligned ranges, each given by its start and by the
    pages before it (``cumulative``: one entry per range, then the total), and the bytes of
    its largest range. Both sequences are ``array('Q')`` as the readers build them."""

    kind: Kind
    starts: Sequence[int]
    cumulative: Sequence[int]
    page_size: int
    largest: int = 0

    @property
    def pages(self) -> int:
        """Return the number of virtual pages in the stratum."""
        return self.cumulative[-1] if self.cumulative else 0

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """Return the [start, end) byte ranges of the stratum, in order."""
        c, ps = self.cumulative, self.page_size
        return tuple((a, a + (c[i + 1] - c[i]) * ps) for i, a in enumerate(self.starts))

    def address(self, index: int) -> int:
        """Return the address of the stratum's ``index``-th page (0 <= index < pages)."""
        r = bisect.bisect_right(self.cumulative, index) - 1
        return self.starts[r] + (index - self.cumulative[r]) * self.page_size

    def all_addresses(self) -> Iterable[int]:
        """Yield the address of every page of the stratum, in order."""
        for start, end in self.ranges:
            yield from range(start, end, self.page_size)


def make_stratum(kind: Kind, ranges: Sequence[tuple[int, int]], page_size: int) -> Stratum:
    """Return the stratum of page-aligned [start, end) ranges (each non-empty), in order."""
    starts = array("Q", (a for a, _ in ranges))
    cum = array("Q", [0])
    largest = 0
    for start, end in ranges:
        cum.append(cum[-1] + (end - start) // page_size)
        largest = max(largest, end - start)
    return Stratum(kind, starts, cum, page_size, largest)


def build_strata(entries: Iterable[MapsEntry], page_size: int,
                 hugetlbfs_mounts: tuple[str, ...] = DEFAULT_HUGETLBFS_MOUNTS
                 ) -> dict[Kind, Stratum]:
    """Return the strata (by kind) of the sampleable mappings, in address order."""
    ranges: dict[Kind, list[tuple[int, int]]] = {}
    for e in entries:
        if not sampleable(e, hugetlbfs_mounts):
            continue
        start = e.start - e.start % page_size
        end = -(-e.end // page_size) * page_size
        if end > start:
            ranges.setdefault(mapping_kind(e, hugetlbfs_mounts), []).append((start, end))
    return {kind: make_stratum(kind, rs, page_size) for kind, rs in ranges.items()}


def status_totals(status: PidStatus) -> dict[Kind, int]:
    """Return resident bytes per kind from status (absent fields count as 0)."""
    return {
        Kind.ANON: status.rss_anon or 0,
        Kind.FILE: status.rss_file or 0,
        Kind.SHMEM: status.rss_shmem or 0,
        Kind.HUGETLB: status.hugetlb or 0,
    }


@dataclass(frozen=True, slots=True)
class StratumResult:
    """What was learnt about one stratum.

    ``bytes`` is the resident bytes attributed to it; ``census`` True when every page was
    queried (its bytes are then exact counts, not scaled shares).
    """

    kind: Kind
    virtual_pages: int
    queried: int
    resident: int
    node_counts: tuple[tuple[int, int], ...]
    census: bool
    bytes: int

    def remote_fraction(self, home: frozenset[int]) -> float:
        """Return the fraction of resident samples on nodes outside ``home`` (0 if none), in
        0-1: over the node counts where they sum to more than ``resident`` (counts carried
        from earlier reads are rounded one by one, so their sum may exceed it)."""
        whole = max(self.resident, sum(c for _, c in self.node_counts))
        if whole <= 0:
            return 0.0
        remote = sum(c for n, c in self.node_counts if n not in home)
        return min(max(remote / whole, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class PlacementEstimate:
    """Estimated resident bytes per (node, kind), same shape as ``NumaMaps.bytes``.

    ``samples``: pages queried; ``resident_samples``: those that were resident;
    ``unsampled_bytes``: bytes status counts that could not be placed (a stratum whose
    samples found nothing resident within the budget, or no sampleable mapping of that
    kind) and that are *not* in ``bytes``; ``other_errors``: statuses other than a node,
    ``-ENOENT`` or ``-EFAULT``; ``budget_exhausted``: the query budget ran out before every
    stratum had its quota; ``parse_errors``: malformed maps lines.
    """

    bytes: dict[tuple[int, Kind], int] = field(default_factory=dict)
    samples: int = 0
    resident_samples: int = 0
    strata: tuple[StratumResult, ...] = ()
    unsampled_bytes: int = 0
    other_errors: int = 0
    budget_exhausted: bool = False
    parse_errors: int = 0  # malformed maps lines (set by the reader)
    largest_mapping: int = 0  # bytes of the largest sampleable mapping (set by the reader)
    mappings: int = 0  # maps lines read (set by the reader)
    #: how the pages were drawn: "move_pages" (over the mappings) or "pagemap_scan" (a
    #: sparse stratum narrowed to its present runs first; set by the reader)
    path: str = "move_pages"
    #: how the VMA list was read: "text" (the maps text) or "query" (PROCMAP_QUERY; set
    #: by the reader, readers/sampled/frames.py)
    maps_way: str = "text"
    #: bytes moved per (from, to) node since the previous read, from the pages followed
    #: (model/sample_memory.py); None: no evidence (a first read, or nothing followed)
    moved: dict[tuple[int, int], int] | None = None

    @property
    def total_bytes(self) -> int:
        """Return the estimated resident bytes over all nodes and kinds."""
        return sum(self.bytes.values())

    def node_bytes(self) -> dict[int, int]:
        """Return estimated resident bytes per node, all kinds together."""
        return fold_nodes(self.bytes)

    def remote_ratio(self, home: frozenset[int]) -> float:
        """Return estimated remote bytes / estimated bytes (0 when there are none)."""
        total = self.total_bytes
        if not total:
            return 0.0
        return sum(b for (n, _), b in self.bytes.items() if n not in home) / total

    def remote_ratio_stderr(self, home: frozenset[int]) -> float:
        """Return the standard error of :meth:`remote_ratio` for this set of home nodes.

        ``sqrt(sum_k w_k^2 r_k (1 - r_k) / m_k)`` over the sampled strata (``w_k`` their
        share of the estimated bytes, ``r_k`` their sampled remote fraction, ``m_k`` their
        resident samples); census strata contribute nothing. Like any plug-in estimate it is
        0 when every sample of every stratum fell on one side; the design bound
        (:func:`target_stderr`) is what the sample size guarantees. Each variance is
        clamped at 0 (rounding must not make it negative: ``sqrt`` would raise).
        """
        total = self.total_bytes
        if not total:
            return 0.0
        var = 0.0
        for s in self.strata:
            if s.census or not s.resident or not s.bytes:
                continue
            w = s.bytes / total
            r = s.remote_fraction(home)
            var += max(w * w * r * (1 - r) / s.resident, 0.0)
        return math.sqrt(max(var, 0.0))

    def node_bytes_stderr(self) -> float:
        """Return the largest standard error (bytes) of the estimated bytes on one node, all
        kinds together: ``sqrt(sum_k B_k^2 p_kn (1 - p_kn) / m_k)`` over the sampled strata
        (``B_k`` their bytes, ``p_kn`` the share of their ``m_k`` resident samples on node
        ``n``); census strata add nothing. 0 when every sample fell on one node; each
        variance clamped at 0."""
        var: dict[int, float] = {}
        for s in self.strata:
            if s.census or not s.resident or not s.bytes:
                continue
            m = sum(c for _, c in s.node_counts) or s.resident
            if m <= 0:
                continue
            for n, c in s.node_counts:
                p = min(max(c / m, 0.0), 1.0)
                var[n] = var.get(n, 0.0) + max(s.bytes * s.bytes * p * (1 - p) / m, 0.0)
        return math.sqrt(max(max(var.values(), default=0.0), 0.0))


@dataclass
class Tally:
    """The statuses of a stratum's queried pages: how many queried, resident (on a node),
    other (neither a node nor not-resident), and resident pages per node."""

    queried: int = 0
    resident: int = 0
    other: int = 0
    nodes: dict[int, int] = field(default_factory=dict)

    def add(self, statuses: Iterable[int]) -> None:
        """Count the statuses of a batch of queried pages."""
        for st in statuses:
            self.queried += 1
            if 0 <= st <= MAX_NODE_ID:
                self.resident += 1
                self.nodes[st] = self.nodes.get(st, 0) + 1
            elif st not in _NOT_RESIDENT:
                self.other += 1

    def add_counts(self, queried: int, resident: int, other: int,
                   nodes: Iterable[tuple[int, int]]) -> None:
        """Count a batch already tallied: pages queried, resident, other, (node, pages)."""
        self.queried += queried
        self.resident += resident
        self.other += other
        for n, c in nodes:
            self.nodes[n] = self.nodes.get(n, 0) + c


class PageSampler(Protocol):
    """Draws a stratum's page addresses and queries and tallies them in batches: the inner
    loops of :func:`estimate_placement`, pure-Python (:class:`QuerySampler`) or compiled."""

    def every_page(self, stratum: Stratum) -> Sequence[int]:
        """Return the address of every page of ``stratum``, in order."""

    def draw(self, stratum: Stratum, n: int, rng: random.Random) -> Sequence[int]:
        """Return ``n`` addresses drawn as :func:`draw_addresses` draws them, sorted."""

    def tally(self, addresses: Sequence[int], lo: int, hi: int, into: Tally) -> None:
        """Query ``addresses[lo:hi]`` (one batch) and count their statuses ``into``."""


def draw_addresses(stratum: Stratum, n: int, rng: random.Random) -> list[int]:
    """Return ``n`` page addresses drawn uniformly (with replacement) over the stratum's
    virtual pages, sorted."""
    rand, pages, addr = rng.random, stratum.pages, stratum.address
    # int(random() * pages) is uniform to within 2^-53 for the <= 2^52 pages of any
    # address space, and three times cheaper than randrange().
    return sorted(addr(int(rand() * pages)) for _ in range(n))


class QuerySampler:
    """The pure-Python :class:`PageSampler` over a page query function."""

    def __init__(self, query: PageQuery) -> None:
        self.query = query

    def every_page(self, stratum: Stratum) -> Sequence[int]:
        """Return the address of every page of ``stratum``, in order."""
        return list(stratum.all_addresses())

    def draw(self, stratum: Stratum, n: int, rng: random.Random) -> Sequence[int]:
        """Return ``n`` sorted addresses (:func:`draw_addresses`)."""
        return draw_addresses(stratum, n, rng)

    def tally(self, addresses: Sequence[int], lo: int, hi: int, into: Tally) -> None:
        """Query ``addresses[lo:hi]`` and count their statuses ``into``."""
        into.add(_query(self.query, addresses[lo:hi]))


def largest_mapping(strata: dict[Kind, Stratum]) -> int:
    """Return the bytes of the largest range of any stratum (0 when there is none).

    A range is one mapping that can hold pages; its virtual size bounds its resident bytes,
    and so the walk of it a full numa_maps read makes under one mmap-lock hold.
    """
    return max((s.largest for s in strata.values()), default=0)


def _query(query: PageQuery, addresses: Sequence[int]) -> Sequence[int]:
    """Return the query's statuses, padded with -EFAULT if it answered too few."""
    st = list(query(addresses))
    if len(st) < len(addresses):
        st.extend([-errno.EFAULT] * (len(addresses) - len(st)))
    return st[:len(addresses)]


def estimate_placement(
    strata: dict[Kind, Stratum],
    totals: dict[Kind, int],
    query: PageQuery | None,
    *,
    target_error: float = DEFAULT_TARGET_ERROR,
    confidence: float = DEFAULT_CONFIDENCE,
    rng: random.Random | None = None,
    census_pages: int = DEFAULT_CENSUS_PAGES,
    max_queries: int | None = None,
    deadline: Deadline = NEVER,
    sampler: PageSampler | None = None,
) -> PlacementEstimate:
    """Return the placement estimate of one process.

    ``strata``: from :func:`build_strata`; ``totals``: resident bytes per kind
    (:func:`status_totals`); ``query``: the page query of that process (raises what it
    raises: Gone, Denied, ...), or None when ``sampler`` is given: it draws, queries and
    tallies instead (the compiled loops; same results for the same ``rng``).
    ``max_queries`` bounds the pages queried in sampled strata (default, and at most,
    ``DEFAULT_BUDGET_FACTOR`` times the sample size); census strata are not counted
    against it. ``deadline`` is checked before each batch of queries (``Expired``
    gives the estimate up at a scan's deadline).
    """
    rng = rng if rng is not None else random.Random()
    if sampler is None:
        if query is None:
            raise ValueError("estimate_placement needs a query or a sampler")
        sampler = QuerySampler(query)
    m = sample_size(target_error, confidence)
    budget = DEFAULT_BUDGET_FACTOR * m
    if max_queries is not None:
        budget = min(budget, max(max_queries, 0))
    tallies, census = _census(strata, sampler, census_pages, deadline)
    page = next(iter(strata.values())).page_size if strata else 4096
    census_bytes = sum(tallies[k].resident for k in census) * page
    sampled, share, orphan = _shares(strata, totals, tallies, census, page)
    quota = _quotas(m, sampled, share, census_bytes)
    exhausted = _draw_quotas(quota, strata, tallies, sampler, rng, budget, deadline)
    out, results, unsampled = _scale(strata, tallies, census, share, page)
    return PlacementEstimate(
        bytes={k: v for k, v in out.items() if v},
        samples=sum(t.queried for t in tallies.values()),
        resident_samples=sum(t.resident for t in tallies.values()),
        strata=tuple(results),
        unsampled_bytes=orphan + unsampled,
        other_errors=sum(t.other for t in tallies.values()),
        budget_exhausted=exhausted,
    )


def _census(strata: dict[Kind, Stratum], sampler: PageSampler, census_pages: int,
            deadline: Deadline) -> tuple[dict[Kind, Tally], set[Kind]]:
    """Query every page of each stratum of at most ``census_pages`` pages.

    Returns the tallies of those strata by kind, and the set of their kinds.
    """
    tallies: dict[Kind, Tally] = {}
    census: set[Kind] = set()
    for kind, s in strata.items():
        if s.pages <= census_pages:
            t = Tally()
            addrs = sampler.every_page(s)
            for i in range(0, len(addrs), _BATCH):
                deadline.check()
                sampler.tally(addrs, i, min(i + _BATCH, len(addrs)), t)
            tallies[kind] = t
            census.add(kind)
    return tallies, census


def _shares(strata: dict[Kind, Stratum], totals: dict[Kind, int],
            tallies: dict[Kind, Tally], census: set[Kind],
            page: int) -> tuple[list[Kind], dict[Kind, int], int]:
    """Split the status bytes not counted by the census among the sampled strata.

    Returns the sampled kinds (not census, with status bytes), each one's share of bytes,
    and the orphan bytes: status bytes that no stratum can place.
    """
    # Status bytes of a kind without any sampleable mapping cannot be placed.
    orphan = sum(b for k, b in totals.items() if k not in strata)
    sampled = [k for k in strata if k not in census and totals.get(k, 0) > 0]
    share: dict[Kind, int] = {}
    # hugetlb has a counter of its own; anon, file and shmem share one pool, because the
    # kernel's RSS counters and numa_maps disagree on the kind of some pages (see above).
    pooled = [kd for kd in sampled if kd is not Kind.HUGETLB]
    pool = sum(b for kd, b in totals.items() if kd is not Kind.HUGETLB and kd in strata)
    pool -= sum(tallies[kd].resident for kd in census if kd is not Kind.HUGETLB) * page
    counted = sum(totals[kd] for kd in pooled)
    rest = max(pool, 0) if counted else 0
    for kd in pooled:
        share[kd] = rest * totals[kd] // counted
    if Kind.HUGETLB in sampled:
        share[Kind.HUGETLB] = totals[Kind.HUGETLB]
    if not counted and pool > 0:
        orphan += pool  # the pool's bytes have no sampled stratum to go to
    return sampled, share, orphan


def _quotas(m: int, sampled: list[Kind], share: dict[Kind, int],
            census_bytes: int) -> dict[Kind, int]:
    """Return the resident samples each sampled stratum needs: proportional allocation of
    ``m`` by share, scaled down by the census's weight (census strata need no samples)."""
    quota: dict[Kind, int] = {}
    share_total = sum(share.values())
    if share_total:
        w_s = share_total / (share_total + census_bytes)
        m_s = math.ceil(m * w_s * w_s)
        for k in sampled:
            if share[k]:
                quota[k] = max(MIN_STRATUM_SAMPLES, math.ceil(m_s * share[k] / share_total))
    return quota


def _draw_quotas(quota: dict[Kind, int], strata: dict[Kind, Stratum],
                 tallies: dict[Kind, Tally], sampler: PageSampler, rng: random.Random,
                 budget: int, deadline: Deadline) -> bool:
    """Draw and tally pages of each stratum in ``quota`` (into new ``tallies``) in rounds
    until each has its quota of resident samples or ``budget`` queries are spent.

    Returns whether the budget ran out before every quota was met.
    """
    used = 0
    exhausted = False
    for k in quota:
        tallies[k] = Tally()
    pending = list(quota)
    while pending:
        nxt: list[Kind] = []
        for k in pending:
            t = tallies[k]
            need = quota[k] - t.resident
            if need <= 0:
                continue
            left = budget - used
            if left <= 0:
                exhausted = True
                continue
            frac = (t.resident + 1) / (t.queried + 1)
            n = min(max(16, math.ceil(need / frac * 1.1)), 4096, left)
            addrs = sampler.draw(strata[k], n, rng)
            for i in range(0, n, _BATCH):
                deadline.check()
                sampler.tally(addrs, i, min(i + _BATCH, n), t)
            used += n
            nxt.append(k)
        pending = nxt
    return exhausted


def _scale(strata: dict[Kind, Stratum], tallies: dict[Kind, Tally], census: set[Kind],
           share: dict[Kind, int], page: int,
           ) -> tuple[dict[tuple[int, Kind], int], list[StratumResult], int]:
    """Scale each stratum's tally to bytes: census pages count as pages, a sampled
    stratum's share is split over its nodes by their sample counts (the last node takes
    the rounding).

    Returns bytes by (node, kind), the per-stratum results, and the bytes of sampled
    strata that got no resident sample (unplaced).
    """
    out: dict[tuple[int, Kind], int] = {}
    results: list[StratumResult] = []
    unsampled = 0
    for kind, s in strata.items():
        t = tallies.get(kind, Tally())
        if kind in census:
            b = t.resident * page
            for n, c in t.nodes.items():
                out[(n, kind)] = out.get((n, kind), 0) + c * page
        else:
            b = share.get(kind, 0)
            if t.resident:
                acc = 0
                items = sorted(t.nodes.items())
                for i, (n, c) in enumerate(items):
                    v = b - acc if i == len(items) - 1 else b * c // t.resident
                    acc += v
                    out[(n, kind)] = out.get((n, kind), 0) + v
            else:
                unsampled += b
                b = 0
        results.append(StratumResult(kind, s.pages, t.queried, t.resident,
                                     tuple(sorted(t.nodes.items())), kind in census, b))
    return out, results, unsampled
