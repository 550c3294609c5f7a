"""Parser for the ``PAGEMAP_SCAN`` ioctl's answer on ``/proc/<pid>/pagemap`` (Linux 6.7+,
``do_pagemap_scan`` in fs/proc/task_mmu.c).

The ioctl fills ``struct page_region {__u64 start, end, categories;}`` records (24 bytes,
little-endian on the machines this runs on) for the pages of the asked range, adjacent pages
of equal categories merged. The categories that matter here
(include/uapi/linux/fs.h):

* ``PAGE_IS_PRESENT`` (bit 3): the page is in memory;
* ``PAGE_IS_HUGE`` (bit 6): the page is mapped by a PMD (a transparent huge page,
  ``pagemap_thp_category``) or is a hugetlb page (``pagemap_hugetlb_category``): one step of
  a page-table walk, not 512. A PTE-mapped THP is not ``HUGE``: it is walked page by page.

Unlike the PFN of ``pagemap``, the categories are given to any reader allowed to open the
file (no CAP_SYS_ADMIN). Total: a partial record is counted; at most :data:`MAX_REGIONS`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

REGION_BYTES = 24
MAX_REGIONS = 4096
PAGE_IS_PRESENT = 1 << 3
PAGE_IS_SWAPPED = 1 << 4
PAGE_IS_HUGE = 1 << 6


@dataclass(frozen=True, slots=True)
class PageRegion:
    """Pages [start, end) of equal categories."""

    start: int
    end: int
    present: bool
    huge: bool


@dataclass(frozen=True, slots=True)
class PageRegions:
    """The regions parsed, in the order given; ``error_count``: partial, excess or empty
    (end <= start) records."""

    regions: tuple[PageRegion, ...] = ()
    error_count: int = 0


def parse_pagemap_scan(data: bytes) -> PageRegions:
    """Return the regions of consecutive ``struct page_region`` records (see the module)."""
    whole = min(len(data) // REGION_BYTES, MAX_REGIONS)
    errors = (len(data) // REGION_BYTES - whole) + (1 if len(data) % REGION_BYTES else 0)
    out: list[PageRegion] = []
    for start, end, cats in struct.iter_unpack("<3Q", data[:whole * REGION_BYTES]):
        if end <= start:
            errors += 1
            continue
        out.append(PageRegion(start, end, bool(cats & PAGE_IS_PRESENT),
                              bool(cats & PAGE_IS_HUGE)))
    return PageRegions(tuple(out), errors)
