"""Sparse strata narrowed to their present pages, so a bounded sample finds resident pages.

A stratum drawn uniformly over its virtual pages wastes its queries where most of them are
not resident: 1 GiB inside a 16 TiB ``MAP_NORESERVE`` reservation is resident at 1 page in
16,384, and the query budget (sized to what a full read costs) found ~7 MiB of it. Where a
stratum's virtual size is many times its resident bytes (``status``), its big ranges are
replaced by their present page runs (``PAGEMAP_SCAN``, :mod:`sources.pagemap_scan`), in a
bounded number of calls; what the calls did not reach stays a virtual range.

Unbiased: the sample is uniform over the pages of the new ranges; conditioned on being
resident (pages that left between the scan and the query are not samples, as before), a
page is uniform over the resident pages of the ranges, and every resident page of the
stratum is in them (a page that became resident after the scan is missed: the scan is
taken right before the queries). Without PAGEMAP_SCAN (kernels before 6.7) the strata stay
as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from numa_exporter.model.sampling import Stratum, make_stratum
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.pagemap_scan import PagemapScan, PagemapScanUnsupported

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
#: Calls per read: at most 8 x 32768 present pages (1 GiB of 4 KiB pages, ~1.5 ms) are
#: scanned, plus the holes the kernel skips.
MAX_CALLS = 8
#: Strata of more ranges than this are left as they are (the Python loop over them would
#: cost more than it saves).
MAX_RANGES = 16_384


def is_sparse(stratum: Stratum, resident: int) -> bool:
    """Return whether ``stratum`` is worth narrowing: many times more virtual bytes than
    ``resident`` bytes, a range of at least :data:`MIN_RANGE`, few enough ranges."""
    return (stratum.pages * stratum.page_size > SPARSE_FACTOR * max(resident, 0)
            and stratum.largest >= MIN_RANGE and len(stratum.starts) <= MAX_RANGES)


def narrow(stratum: Stratum, present: PresentFn, calls: int, resident: int
           ) -> tuple[Stratum, int]:
    """Return the stratum with its ranges of at least :data:`MIN_RANGE` replaced by their
    present runs, the biggest range first (an empty reservation costs one call and goes;
    a dense range needs a call per :data:`PAGES_PER_CALL` pages) until the stratum is no
    longer sparse for ``resident`` bytes or ``calls`` calls of ``present`` are made (the
    rest of a range stays virtual), and the calls used. The stratum is returned as it was
    when no page at all was left in it."""
    ps = stratum.page_size
    cum = stratum.cumulative
    spans = [(a, a + (cum[i + 1] - cum[i]) * ps) for i, a in enumerate(stratum.starts)]
    big = sorted((i for i, (a, b) in enumerate(spans) if b - a >= MIN_RANGE),
                 key=lambda i: spans[i][0] - spans[i][1])
    runs: dict[int, list[tuple[int, int]]] = {}
    used = 0
    virtual = stratum.pages * ps
    for i in big:
        if used >= calls or virtual <= SPARSE_FACTOR * resident:
            break
        a, b = spans[i]
        got: list[tuple[int, int]] = []
        pos = a
        while pos < b and used < calls:
            regions, walk_end = present(pos, b, PAGES_PER_CALL)
            used += 1
            floor = pos  # runs in order, none overlapping, none outside [pos, b)
            covered = 0
            for x, y in regions:
                x, y = max(x - x % ps, floor), min(-(-y // ps) * ps, b)
                if y > x:
                    got.append((x, y))
                    floor = y
                    covered += y - x
            if walk_end <= pos:
                break  # no progress: keep the rest virtual
            dense = 2 * covered >= walk_end - pos
            pos = walk_end
            if dense and b - a <= SPARSE_FACTOR * resident:
                break  # a dense range no bigger than the resident bytes allow: not the
                # reservation that makes the stratum sparse; the rest stays virtual
        if pos < b:
            got.append((pos, b))
        runs[i] = got
        virtual += sum(y - x for x, y in got) - (b - a)
    out: list[tuple[int, int]] = []
    for i, span in enumerate(spans):
        out.extend(runs.get(i, (span,)))
    if not out:
        return stratum, used
    return make_stratum(stratum.kind, out, ps), used


def narrow_strata(strata: dict[Kind, Stratum], totals: dict[Kind, int],
                  present: PresentFn, calls: int = MAX_CALLS
                  ) -> tuple[dict[Kind, Stratum], int]:
    """Return the strata with the sparse ones narrowed (same kinds, same order), and the
    calls of ``present`` made (at most ``calls`` in all)."""
    out: dict[Kind, Stratum] = {}
    used = 0
    for kind, s in strata.items():
        if used < calls and is_sparse(s, totals.get(kind, 0)):
            s, n = narrow(s, present, calls - used, totals.get(kind, 0))
            used += n
        out[kind] = s
    return out, used


class _Availability:
    """Whether PAGEMAP_SCAN worked here (None: not tried yet); a kernel without it is asked
    once, not every read."""

    usable: bool | None = None


def narrowed(mm_dir: str, strata: dict[Kind, Stratum], totals: dict[Kind, int]
             ) -> dict[Kind, Stratum]:
    """Return ``strata`` with the sparse ones narrowed to their present runs through the
    ``pagemap`` of ``mm_dir``; unchanged where none is sparse, PAGEMAP_SCAN is missing or
    the process cannot be scanned (the page queries then say Gone or Denied themselves)."""
    if _Availability.usable is False or not any(
            is_sparse(s, totals.get(k, 0)) for k, s in strata.items()):
        return strata
    try:
        with PagemapScan(mm_dir) as scan:
            got, _ = narrow_strata(strata, totals, scan.present)
    except PagemapScanUnsupported:
        _Availability.usable = False
        return strata
    except SourceError:
        return strata
    _Availability.usable = True
    return got
