"""Page-size probe: how much of a process's largest mappings huge pages back, read from a
few dozen pages (``maps`` for the mappings, ``pagemap`` for each probed page's frame,
``kpageflags`` for that frame's flags), never by a walk of a whole mapping.

Each ``pagemap`` read of one entry walks that one page's table entry under the mmap lock;
``maps`` walks no page table. The model's :func:`numa_exporter.model.page_sizes.walk_hold`
turns the result into the estimated longest lock hold of a full ``numa_maps`` read.

Without CAP_SYS_ADMIN the kernel hides page frames (pagemap PFNs read 0, kpageflags cannot
be opened): every page counts as small, which is the estimate without a probe, and the
reason is returned for the caller to say once.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence

from numa_exporter.model.page_sizes import MappingPages, PageShape
from numa_exporter.parsers.kpageflags import parse_kpageflags
from numa_exporter.parsers.pid_maps import parse_maps_range
from numa_exporter.parsers.pid_pagemap import parse_pid_pagemap
from numa_exporter.readers.sampled_placement import maps_lines
from numa_exporter.sources.errors import Denied, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

#: Mappings probed: the largest few (a full read's longest hold is one mapping's walk).
TOP_MAPPINGS = 4
#: Pages probed in all, shared among the probed mappings by size, at least
#: :data:`MIN_PROBES` each.
PROBES = 64
MIN_PROBES = 8
#: maps lines read at most (the kernel's default vm.max_map_count is 65,530): past it the
#: probe stops, and what it did not see counts as one mapping of all resident bytes.
MAX_LINES = 1 << 16
CHECK_EVERY = 4096  # maps lines between calls of ``check`` (the scan's deadline)


def _largest(files: ProcessFiles, check: Callable[[], None]
             ) -> tuple[list[tuple[int, int]], int, int, bool]:
    """Return the :data:`TOP_MAPPINGS` largest mappings as (start, end), the size of the
    next largest, the malformed lines met and whether the text was cut at MAX_LINES."""
    top: list[tuple[int, int, int]] = []  # (size, start, end): a min-heap of the largest
    rest = errors = 0
    for n, line in enumerate(maps_lines(files)):
        if n >= MAX_LINES:
            return [(s, e) for _, s, e in top], rest, errors, True
        if n % CHECK_EVERY == CHECK_EVERY - 1:
            check()
        r = parse_maps_range(line)
        if r is None:
            errors += 1
            continue
        item = (r[1] - r[0], r[0], r[1])
        if len(top) < TOP_MAPPINGS:
            heapq.heappush(top, item)
        else:
            rest = max(rest, heapq.heappushpop(top, item)[0])
    return [(s, e) for _, s, e in sorted(top, reverse=True)], rest, errors, False


def _pages(ranges: Sequence[tuple[int, int]], page_size: int, rng: random.Random
           ) -> list[list[int]]:
    """Return the virtual page numbers to probe in each range: a share of :data:`PROBES`
    by size (at least :data:`MIN_PROBES`, at most its pages), one drawn at random in each
    of that many equal slices."""
    total = sum(e - s for s, e in ranges) or 1
    out: list[list[int]] = []
    for s, e in ranges:
        first, count = s // page_size, max((e - s) // page_size, 1)
        n = min(count, max(MIN_PROBES, round(PROBES * (e - s) / total)))
        out.append([first + int((j + rng.random()) * count / n) for j in range(n)])
    return out


def _aligned(records: Sequence[bytes], n: int) -> bytes:
    """Return ``n`` 8-byte records as one text, a missing or short one as zeros (a page not
    present, a frame without flags: counted small)."""
    return b"".join(r if len(r) == 8 else bytes(8) for r in [*records[:n],
                                                               *[b""] * (n - len(records))])


def probe_page_sizes(files: ProcessFiles, proc: ProcFS, resident: int, now: float, *,
                     page_size: int, rng: random.Random | None = None,
                     check: Callable[[], None] | None = None
                     ) -> tuple[PageShape, SourceError | None]:
    """Return the page-size probe of one process and why page frames could not be seen
    (None when they could).

    Raises Gone/Denied/ReadFailed of ``maps`` and ``pagemap`` (the process's own files);
    a ``kpageflags`` that cannot be read (absent, denied, failing) is returned as the
    reason, with every page counted small. ``check`` is called every :data:`CHECK_EVERY`
    maps lines and may raise to give the probe up.
    """
    rng = rng or random.Random()
    ranges, rest, errors, cut = _largest(files, check or (lambda: None))
    if cut:
        rest = max(rest, resident)
    pages = _pages(ranges, page_size, rng)
    flat = [p for group in pages for p in group]
    records = files.pagemap(flat)
    errors += sum(1 for r in records if len(r) != 8)  # short: past the end, counted small
    got = parse_pid_pagemap(_aligned(records, len(flat)))
    pfns = sorted({e.pfn for e in got.entries if e.pfn is not None})
    problem: SourceError | None = None
    huge_pfns: set[int] = set()
    if pfns:
        try:
            got_flags = proc.kpageflags(pfns)
            errors += sum(1 for r in got_flags if len(r) != 8)
            flags = parse_kpageflags(_aligned(got_flags, len(pfns)))
        except SourceError as err:  # absent, denied or failing: every page counts small
            problem = err
        else:
            errors += flags.error_count
            huge_pfns = {p for p, f in zip(pfns, flags.entries, strict=True) if f.huge}
    elif any(e.present for e in got.entries):
        problem = Denied("pagemap", f"{files.path}/pagemap",
                         OSError(1, "page frames hidden (needs CAP_SYS_ADMIN)"))
    it = iter(got.entries)
    probed = []
    for (s, e), group in zip(ranges, pages, strict=True):
        huge = 0
        for _ in group:
            entry = next(it, None)
            if entry is not None and entry.pfn in huge_pfns:
                huge += 1
        probed.append(MappingPages(e - s, len(group), huge))
    return PageShape(tuple(probed), rest, resident, now, errors), problem
