"""Page-size probe: how much of a process's largest mappings huge pages back, read from a
few dozen pages, never by a walk of a whole mapping. ``maps`` gives the mappings (no page
walk); then, for each probed page:

* where the kernel has the ``PAGEMAP_SCAN`` ioctl (6.7+), its ``PAGE_IS_HUGE`` category: a
  PMD-mapped THP or a hugetlb page, exactly what makes a ``numa_maps`` walk take one step
  for the whole huge page; any reader that may open ``pagemap`` gets it;
* else its ``pagemap`` entry's frame and that frame's ``kpageflags`` (KPF_THP, KPF_HUGE).
  Without CAP_SYS_ADMIN the kernel hides frames (PFNs read 0, kpageflags cannot be opened):
  every page counts small, which is the estimate without a probe, and the reason is
  returned for the caller to say once.

Each ioctl or ``pagemap`` read covers one page: the kernel walks that one page's table
entry under the mmap lock. The model's :func:`numa_exporter.model.page_sizes.walk_hold`
turns the result into the estimated longest lock hold of a full ``numa_maps`` read.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence

from numa_exporter.model.page_sizes import MappingPages, PageShape
from numa_exporter.parsers.kpageflags import parse_kpageflags
from numa_exporter.parsers.pid_maps import parse_maps_range
from numa_exporter.parsers.pid_pagemap import parse_pid_pagemap
from numa_exporter.parsers.pid_pagemap_scan import parse_pagemap_scan
from numa_exporter.readers.sampled.frames import maps_lines
from numa_exporter.sources.deadline import NEVER, Deadline
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
CHECK_EVERY = 4096  # maps lines between looks at the scan's deadline


def _largest(files: ProcessFiles, deadline: Deadline
             ) -> tuple[list[tuple[int, int]], int, int, bool]:
    """Return the :data:`TOP_MAPPINGS` largest mappings as (start, end), the size of the
    next largest, the malformed lines met and whether the text was cut at MAX_LINES."""
    top: list[tuple[int, int, int]] = []  # (size, start, end): a min-heap of the largest
    rest = errors = 0
    for n, line in enumerate(maps_lines(files)):
        if n >= MAX_LINES:
            return [(s, e) for _, s, e in top], rest, errors, True
        if n % CHECK_EVERY == CHECK_EVERY - 1:
            deadline.check(f"{files.path}/maps")
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


def _scanned(files: ProcessFiles, pages: list[int], page_size: int
             ) -> tuple[list[bool], int] | None:
    """Return whether each page is huge by the PAGEMAP_SCAN ioctl, and the malformed
    answers; None where the ioctl is not supported."""
    records = files.pagemap_scan(pages, page_size)
    if records is None:
        return None
    huge: list[bool] = []
    errors = 0
    for raw in records:
        got = parse_pagemap_scan(raw)
        errors += got.error_count
        huge.append(any(r.huge and r.present for r in got.regions))
    return huge + [False] * (len(pages) - len(huge)), errors


def _flagged(files: ProcessFiles, proc: ProcFS, pages: list[int]
             ) -> tuple[list[bool], int, SourceError | None]:
    """Return whether each page is huge by its pagemap PFN's kpageflags, the malformed or
    short entries, and why frames could not be seen (None when they could)."""
    records = files.pagemap(pages)
    errors = sum(1 for r in records if len(r) != 8)  # short: past the end, counted small
    got = parse_pid_pagemap(_aligned(records, len(pages)))
    errors += got.error_count
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
    return [e.pfn in huge_pfns for e in got.entries], errors, problem


def _huge_pages(files: ProcessFiles, proc: ProcFS, pages: list[int], page_size: int
                ) -> tuple[list[bool], int, SourceError | None]:
    """Return whether each page is huge, the malformed answers and why page sizes could
    not be seen: by PAGEMAP_SCAN where the kernel has it (6.7+; no privilege needed),
    else by pagemap and kpageflags (CAP_SYS_ADMIN)."""
    scanned = _scanned(files, pages, page_size)
    if scanned is not None:
        return scanned[0], scanned[1], None
    return _flagged(files, proc, pages)


def probe_page_sizes(files: ProcessFiles, proc: ProcFS, resident: int, now: float, *,
                     page_size: int, rng: random.Random | None = None,
                     deadline: Deadline = NEVER
                     ) -> tuple[PageShape, SourceError | None]:
    """Return the page-size probe of one process and why page frames could not be seen
    (None when they could).

    Raises Gone/Denied/ReadFailed of ``maps`` and ``pagemap`` (the process's own files);
    a ``kpageflags`` that cannot be read (absent, denied, failing) is returned as the
    reason, with every page counted small. ``deadline`` is checked every
    :data:`CHECK_EVERY` maps lines (``Expired`` past it).
    """
    rng = rng or random.Random()
    ranges, rest, errors, cut = _largest(files, deadline)
    if cut:
        rest = max(rest, resident)
    pages = _pages(ranges, page_size, rng)
    flat = [p for group in pages for p in group]
    huge, errs, problem = _huge_pages(files, proc, flat, page_size)
    errors += errs
    it = iter(huge)
    probed = [MappingPages(e - s, len(group), sum(1 for _ in group if next(it)))
              for (s, e), group in zip(ranges, pages, strict=True)]
    return PageShape(tuple(probed), rest, resident, now, errors), problem
