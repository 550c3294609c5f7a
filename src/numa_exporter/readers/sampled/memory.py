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
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

from numa_exporter.model.sample_memory import (
    PANEL_FILL,
    PANEL_PAGES,
    PANEL_REFRESH,
    Followed,
    Panel,
    SampleMemory,
    at_odds,
    combine,
    follow,
    kept_counts,
    migrated_since,
    moved_bytes,
    refill,
    shape_of,
)
from numa_exporter.model.sampling import PlacementEstimate, Stratum, draw_addresses
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.sources.deadline import NEVER, Deadline

#: addresses in, one status per address out (node id or -errno); raises like move_pages.
Query = Callable[[Sequence[int]], Sequence[int]]
#: the fresh estimate, given the queries it may make (None: the default budget).
Estimate = Callable[[int | None], PlacementEstimate]


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


def read_with_memory(memory: SampleMemory, frame: dict[Kind, Stratum],
                     strata: dict[Kind, Stratum], totals: dict[Kind, int], query: Query,
                     estimate: Estimate, *, host_migrated: int | None,
                     max_queries: int | None, rng: random.Random,
                     deadline: Deadline = NEVER, faulted: bool = True) -> PlacementEstimate:
    """Return the estimate of one read with the carried counts added and ``moved`` set,
    and update ``memory`` for the next read.

    ``frame``: the strata of maps as parsed (their identity says whether the mappings
    changed); ``strata``: as drawn from (perhaps narrowed); ``host_migrated``: the host's
    migrated-pages counter now (None: unknown, the panel is then always queried, and no
    page counts as moved). ``faulted``: the process took a fault or changed size since its
    last read (True where unknown): its panel is queried again to follow recycled pages.
    ``deadline`` is checked before each batch of queries (``Expired`` past it).
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
    est = estimate(None if max_queries is None else max(max_queries - used - top, 0))
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
        # pages of the kind seen on another node, however they got there, drop its counts
        unsure = ((not quiet and kind not in followed)
                  or (kind in followed and bool(followed[kind].moves)))
        kept = kept_counts(memory, kind, shapes[kind], totals.get(kind, 0), unsure)
        if kept and at_odds(kept, fresh.get(kind, ()), len(frame)):
            kept, odd = {}, True
        carried[kind] = kept
    if not (seen or odd or memory.suspect):  # a page that joins after it moved hides it
        panel, drawn = top_up(panel, strata, totals, top, query, rng, check)
        used += drawn
    out, keep = combine(est, carried)
    memory.shapes, memory.totals, memory.counts = shapes, dict(totals), keep
    memory.panel, memory.host_migrated = panel, host_migrated
    memory.suspect = odd or seen
    return dataclasses.replace(out, moved=moved, samples=out.samples + used)
