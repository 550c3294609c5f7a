"""Parser for entries of ``/proc/kpageflags`` (``kpageflags_read`` in fs/proc/page.c).

One little-endian 64-bit set of flags per page frame, at offset ``pfn * 8``
(include/uapi/linux/kernel-page-flags.h). The bits this exporter needs:

* 15 ``KPF_COMPOUND_HEAD``, 16 ``KPF_COMPOUND_TAIL``: a page of a compound (large) folio;
* 17 ``KPF_HUGE``: a page of a hugetlbfs huge page;
* 22 ``KPF_THP``: a page of a transparent huge page (the head and every tail);
* 20 ``KPF_NOPAGE``: no page frame at that PFN.

Total: a trailing partial entry is counted, never raised; at most :data:`MAX_ENTRIES`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ENTRY_BYTES = 8
MAX_ENTRIES = 4096
KPF_COMPOUND_HEAD = 15
KPF_COMPOUND_TAIL = 16
KPF_HUGE = 17
KPF_NOPAGE = 20
KPF_THP = 22


@dataclass(frozen=True, slots=True)
class PageFlags:
    """The flags of one page frame that tell its page size."""

    thp: bool
    hugetlb: bool
    compound: bool
    nopage: bool

    @property
    def huge(self) -> bool:
        """Return whether the frame is part of a huge page (THP or hugetlb)."""
        return (self.thp or self.hugetlb) and not self.nopage


@dataclass(frozen=True, slots=True)
class KpageflagsEntries:
    """The flags parsed, in the order given; ``error_count``: partial or excess entries."""

    entries: tuple[PageFlags, ...] = ()
    error_count: int = 0


def parse_page_flags(value: int) -> PageFlags:
    """Return the page-size flags of one 64-bit kpageflags value."""
    return PageFlags(thp=bool(value >> KPF_THP & 1), hugetlb=bool(value >> KPF_HUGE & 1),
                     compound=bool(value >> KPF_COMPOUND_HEAD & 1
                                   or value >> KPF_COMPOUND_TAIL & 1),
                     nopage=bool(value >> KPF_NOPAGE & 1))


def parse_kpageflags(data: bytes) -> KpageflagsEntries:
    """Return the flags of consecutive 8-byte kpageflags values (see the module)."""
    whole = min(len(data) // ENTRY_BYTES, MAX_ENTRIES)
    errors = (len(data) // ENTRY_BYTES - whole) + (1 if len(data) % ENTRY_BYTES else 0)
    values = struct.unpack_from(f"<{whole}Q", data) if whole else ()
    return KpageflagsEntries(tuple(parse_page_flags(v) for v in values), errors)
