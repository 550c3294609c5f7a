"""A sampled read that carries what earlier reads of the process learned and follows a panel
of its pages: the reader side of :mod:`numa_exporter.model.sample_memory`.

Per read, within the query budget the scan gives (``max_queries``):

1. When the host migrated any page since the last read (its ``pgmigrate_success`` moved, or
   it is unknown), the process faulted or changed size since (``faulted``), or the last read
   was suspect (its fresh sample at odds with the carried counts, or panel pages seen
   changing node), the followed pages are queried again. Those on another node count as
   moved only where the host's counter is known and moved (the movement rule of
   ``model/change_evidence.py``, docs/movement.md; ``DriftTrack.observe`` bounds them by
   what it moved): a page on another node while the host migrated nothing was freed and
   faulted again there (recycled), and only updates the panel. At most a quarter of the
   budget goes to the panel (trimmed to fit).
2. Unless pages are moving, the panel is topped up with fresh draws (resident ones join,
   the oldest leave): a page that joins after it moved would hide its move.
3. The rest of the budget draws the fresh estimate, to which each kind's carried node
   counts are added where the evidence says they still stand: the host or the panel says
   nothing moved, the mappings and resident bytes are the same, and the fresh sample is
   not at odds with them (a long migrate_pages call adds to the host's counter only when
   it ends; the fresh sample shows it while it runs).
4. A kind that grew while its mappings of the last read all stand (``grown_part``): those
   ranges are drawn as one stratum that keeps its counts for the bytes the last read
   found, the new ranges as another, estimated fresh with a share of the budget, for the
   bytes it grew by; what is carried next mixes the two (``mixed_counts``).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

from numa_exporter.model.sample_memory import (
    MAX_GROWTH_RANGES,
    PANEL_FILL,
    PANEL_PAGES,
    PANEL_REFRESH,
    Followed,
    Growth,
    Panel,
    SampleMemory,
    at_odds,
    combine,
    follow,
    grown_part,
    kept_counts,
    migrated_since,
    mixed_counts,
    moved_bytes,
    refill,
    shape_of,
)
from numa_exporter.model.sampling import (
    PlacementEstimate,
    Stratum,
    draw_addresses,
    make_stratum,
)
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.sources.deadline import NEVER, Deadline

#: addresses in, one status per address out (node id or -errno); raises like move_pages.
Query = Callable[[Sequence[int]], Sequence[int]]
#: the fresh estimate, given the queries it may make (None: the default budget).
Estimate = Callable[[int | None], PlacementEstimate]
#: the fresh estimate of the given strata and resident bytes, with the queries it may make.
EstimateOf = Callable[[dict[Kind, Stratum], dict[Kind, int], int | None], PlacementEstimate]
#: Fewest queries the new part of a grown kind gets (one batch).
MIN_GROWTH_QUERIES = 256


def _trim(panel: dict[Kind, Panel], allowance: int) -> dict[Kind, Panel]:
    """Return the panel cut to at most ``allowance`` pages, each kind in proportion (the
    newest pages kept)."""
    total = sum(len(p) for p in panel.values())
    if total <= allowance:
        return panel
    out: dict[Kind, Panel] = {}
    for kind, p in panel.items():
        keep = len(p) * allowance // total
        out[kind] = Panel(p.addresses[len(p) - keep:], p.nodes[len(p) - keep:])
    return out


def recheck(panel: dict[Kind, Panel], query: Query, check: Callable[[], None]
            ) -> dict[Kind, Followed]:
    """Return what querying every panel page again shows, per kind."""
    out: dict[Kind, Followed] = {}
    for kind, p in panel.items():
        if not len(p):
            continue
        check()
        out[kind] = follow(p, query(p.addresses))
    return out


def top_up(panel: dict[Kind, Panel], strata: dict[Kind, Stratum], totals: dict[Kind, int],
           pages: int, query: Query, rng: random.Random, check: Callable[[], None]
           ) -> tuple[dict[Kind, Panel], int]:
    """Return the panel with ``pages`` fresh draws made over the strata in proportion to
    their resident bytes (the resident ones added, the oldest beyond each kind's share of
    :data:`PANEL_PAGES` dropped), and the queries made (one query for all kinds)."""
    weights = {k: totals.get(k, 0) for k in strata if totals.get(k, 0) > 0}
    whole = sum(weights.values())
    out = dict(panel)
    if pages <= 0 or not whole:
        return out, 0
    drawn: list[tuple[Kind, list[int]]] = []
    for kind, w in weights.items():
        n = pages * w // whole
        if n:
            drawn.append((kind, draw_addresses(strata[kind], n, rng)))
    addrs = [a for _, got in drawn for a in got]
    if not addrs:
        return out, 0
    check()
    statuses = list(query(addrs))
    at = 0
    for kind, got in drawn:
        limit = max(1, PANEL_PAGES * weights[kind] // whole)
        out[kind] = refill(out.get(kind, Panel()), got, statuses[at:at + len(got)], limit)
        at += len(got)
    return out, len(addrs)


def _growths(memory: SampleMemory, frame: dict[Kind, Stratum],
             strata: dict[Kind, Stratum], totals: dict[Kind, int],
             unsure: Callable[[Kind], bool]) -> dict[Kind, Growth]:
    """Return the kinds that grew with their earlier mappings standing (``grown_part``),
    among those drawn as parsed (not narrowed) whose pages nothing says moved."""
    out: dict[Kind, Growth] = {}
    for kind, s in frame.items():
        if (strata.get(kind) is not s or unsure(kind) or kind not in memory.ranges
                or len(s.starts) > MAX_GROWTH_RANGES):
            continue
        g = grown_part(memory, kind, s.ranges, totals.get(kind, 0))
        if g is not None:
            out[kind] = g
    return out


def _split_budget(memory: SampleMemory, growth: dict[Kind, Growth], queries: int | None
                  ) -> tuple[int | None, int | None]:
    """Return the queries of the main estimate and of the grown kinds' new parts: the new
    parts get what evens the two parts' errors out (their bytes against the old parts'
    carried and fresh samples), at least :data:`MIN_GROWTH_QUERIES` where there are any."""
    if queries is None:
        return None, None
    old = sum(g.old_bytes for g in growth.values())
    new = sum(g.new_bytes for g in growth.values())
    carried = sum(sum(memory.counts.get(k, {}).values()) for k in growth)
    want = round(new * (carried + queries) / max(old + new, 1))
    part = min(max(want, MIN_GROWTH_QUERIES), queries // 2)
    return queries - part, part


def _add(out: PlacementEstimate, part: PlacementEstimate) -> PlacementEstimate:
    """Return ``out`` with the estimate of other ranges ``part`` added (bytes, strata,
    samples and what was not placed)."""
    merged = dict(out.bytes)
    for key, b in part.bytes.items():
        merged[key] = merged.get(key, 0) + b
    return dataclasses.replace(
        out, bytes=merged, strata=out.strata + part.strata,
        samples=out.samples + part.samples,
        resident_samples=out.resident_samples + part.resident_samples,
        unsampled_bytes=out.unsampled_bytes + part.unsampled_bytes,
        other_errors=out.other_errors + part.other_errors,
        budget_exhausted=out.budget_exhausted or part.budget_exhausted)


def _estimate_grown(memory: SampleMemory, strata: dict[Kind, Stratum],
                    totals: dict[Kind, int], growth: dict[Kind, Growth],
                    estimate_of: EstimateOf, budget: int | None
                    ) -> tuple[PlacementEstimate, PlacementEstimate]:
    """Return the estimate of the strata with each grown kind cut to its old ranges (for
    the bytes the last read found), and the estimate of the grown kinds' new ranges (for
    the bytes they grew by), the budget split between them (:func:`_split_budget`)."""
    main, rest = _split_budget(memory, growth, budget)
    est = estimate_of({k: make_stratum(k, growth[k].old, s.page_size) if k in growth else s
                       for k, s in strata.items()},
                      {k: growth[k].old_bytes if k in growth else t
                       for k, t in totals.items()}, main)
    part = estimate_of({k: make_stratum(k, g.new, strata[k].page_size)
                        for k, g in growth.items()},
                       {k: g.new_bytes for k, g in growth.items()}, rest)
    return est, part


def _with_part(out: PlacementEstimate, part: PlacementEstimate, growth: dict[Kind, Growth],
               keep: dict[Kind, dict[int, float]]) -> PlacementEstimate:
    """Return ``out`` with the new ranges' estimate ``part`` added, and set ``keep`` (the
    counts to carry) of each grown kind to both parts mixed (none where the new part found
    no resident page)."""
    for res in part.strata:
        g = growth[res.kind]
        if not res.resident or res.kind not in keep:
            keep.pop(res.kind, None)  # the new part unknown: nothing to carry
            continue
        keep[res.kind] = mixed_counts(keep[res.kind], g.old_bytes,
                                      {n: float(c) for n, c in res.node_counts},
                                      g.new_bytes)
    return _add(out, part)


def _ranges(memory: SampleMemory, frame: dict[Kind, Stratum], shapes: dict[Kind, int]
            ) -> dict[Kind, tuple[tuple[int, int], ...]]:
    """Return the ranges to keep per kind (the kept ones while its shape is the same; none
    for a kind of more than :data:`MAX_GROWTH_RANGES`)."""
    out: dict[Kind, tuple[tuple[int, int], ...]] = {}
    for kind, s in frame.items():
        if shapes[kind] == memory.shapes.get(kind) and kind in memory.ranges:
            out[kind] = memory.ranges[kind]
        elif len(s.starts) <= MAX_GROWTH_RANGES:
            out[kind] = s.ranges
    return out


def read_with_memory(memory: SampleMemory, frame: dict[Kind, Stratum],
                     strata: dict[Kind, Stratum], totals: dict[Kind, int], query: Query,
                     estimate: Estimate, *, host_migrated: int | None,
                     max_queries: int | None, rng: random.Random,
                     deadline: Deadline = NEVER,
                     estimate_of: EstimateOf | None = None,
                     faulted: bool = True) -> PlacementEstimate:
    """Return the estimate of one read with the carried counts added and ``moved`` set,
    and update ``memory`` for the next read.

    ``frame``: the strata of maps as parsed (their identity says whether the mappings
    changed); ``strata``: as drawn from (perhaps narrowed); ``host_migrated``: the host's
    migrated-pages counter now (None: unknown, the panel is then always queried, and no
    page counts as moved). ``faulted``: the process took a fault or changed size since its
    last read (True where unknown): its panel is queried again to follow recycled pages.
    ``deadline`` is checked before each batch of queries (``Expired`` past it).
    ``estimate_of`` estimates given strata (None: no growth split, step 4 of the module).
    """
    check = deadline.check
    allowance = PANEL_PAGES if max_queries is None else max(max_queries // 4, 0)
    migrated = migrated_since(memory.host_migrated, host_migrated)
    quiet = migrated == 0
    panel = {k: p for k, p in memory.panel.items() if k in strata}
    followed: dict[Kind, Followed] = {}
    used = 0
    if panel and (not quiet or memory.suspect or faulted):
        panel = _trim(panel, allowance)
        followed = recheck(panel, query, check)
        used = sum(len(p) for p in panel.values())
        panel = {k: f.panel for k, f in followed.items()}
    seen = any(f.moves for f in followed.values())
    have = sum(len(p) for p in panel.values())
    want = min(PANEL_FILL, PANEL_PAGES - have) if have < PANEL_PAGES else PANEL_REFRESH
    top = max(min(want, allowance - used), 0)  # kept for the top-up, made after the estimate
    budget = None if max_queries is None else max(max_queries - used - top, 0)

    def unsure(kind: Kind) -> bool:
        # pages of the kind seen on another node, however they got there, drop its counts
        return ((not quiet and kind not in followed)
                or (kind in followed and bool(followed[kind].moves)))

    growth = (_growths(memory, frame, strata, totals, unsure) if estimate_of is not None
              else {})
    part: PlacementEstimate | None = None
    if estimate_of is not None and growth:
        est, part = _estimate_grown(memory, strata, totals, growth, estimate_of, budget)
    else:
        est = estimate(budget)
    moved: dict[tuple[int, int], int] | None
    if followed and migrated is not None and migrated > 0:
        moved = moved_bytes(followed, {s.kind: s.bytes for s in est.strata})
    elif followed or (memory.panel and quiet and not memory.suspect):
        moved = {}  # the host migrated no page (or is unknown): nothing moved
    else:
        moved = None  # nothing followed: no evidence either way
    fresh = {s.kind: s.node_counts for s in est.strata}
    carried: dict[Kind, dict[int, float]] = {}
    shapes: dict[Kind, int] = {}
    odd = False
    for kind, s in frame.items():
        shapes[kind] = shape_of(s)
        if kind in growth:
            kept = dict(memory.counts.get(kind, {}))
        else:
            kept = kept_counts(memory, kind, shapes[kind], totals.get(kind, 0),
                               unsure(kind))
        if kept and at_odds(kept, fresh.get(kind, ()), len(frame)):
            kept, odd = {}, True
        carried[kind] = kept
    if not (seen or odd or memory.suspect):  # a page that joins after it moved hides it
        panel, drawn = top_up(panel, strata, totals, top, query, rng, check)
        used += drawn
    out, keep = combine(est, carried)
    if part is not None:
        out = _with_part(out, part, growth, keep)
    memory.ranges = _ranges(memory, frame, shapes)
    memory.shapes, memory.totals, memory.counts = shapes, dict(totals), keep
    memory.panel, memory.host_migrated = panel, host_migrated
    memory.suspect = odd or seen
    return dataclasses.replace(out, moved=moved, samples=out.samples + used)
