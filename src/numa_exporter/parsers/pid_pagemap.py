"""Parser for entries of ``/proc/<pid>/pagemap`` (``pagemap_read`` in fs/proc/task_mmu.c).

The file holds one little-endian 64-bit entry per virtual page of the process
(Documentation/admin-guide/mm/pagemap.rst); the entry of the page at ``addr`` is at offset
``addr // page_size * 8``. Bits:

* 0-54: the page frame number (PFN) when present; 0 for a reader without CAP_SYS_ADMIN;
* 55: soft-dirty; 56: page exclusively mapped; 57: uffd-wp write-protected;
* 61: file page or shared anonymous; 62: swapped; 63: present.

The bytes are given by the caller as read (a short read leaves a partial entry): the
parser is total, counts a trailing partial entry as malformed and keeps at most
:data:`MAX_ENTRIES` entries.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

ENTRY_BYTES = 8
MAX_ENTRIES = 4096  # entries one parse keeps; a probe asks for a few dozen
PFN_MASK = (1 << 55) - 1
PRESENT_BIT = 63
SWAPPED_BIT = 62
FILE_BIT = 61
EXCLUSIVE_BIT = 56


@dataclass(frozen=True, slots=True)
class PagemapEntry:
    """One page's entry: ``pfn`` is None when the page is not present or the PFN is hidden
    (0: the reader lacks CAP_SYS_ADMIN)."""

    present: bool
    swapped: bool
    file_or_shared: bool
    exclusive: bool
    pfn: int | None


@dataclass(frozen=True, slots=True)
class PagemapEntries:
    """The entries parsed, in the order given; ``error_count``: partial entries and
    entries past :data:`MAX_ENTRIES`."""

    entries: tuple[PagemapEntry, ...] = ()
    error_count: int = 0


def parse_pagemap_entry(value: int) -> PagemapEntry:
    """Return the entry of one 64-bit pagemap value."""
    present = bool(value >> PRESENT_BIT & 1)
    pfn = value & PFN_MASK if present else 0
    return PagemapEntry(present=present, swapped=bool(value >> SWAPPED_BIT & 1),
                        file_or_shared=bool(value >> FILE_BIT & 1),
                        exclusive=bool(value >> EXCLUSIVE_BIT & 1),
                        pfn=pfn or None)


def parse_pid_pagemap(data: bytes) -> PagemapEntries:
    """Return the entries of consecutive 8-byte pagemap values (see the module)."""
    whole = min(len(data) // ENTRY_BYTES, MAX_ENTRIES)
    errors = (len(data) // ENTRY_BYTES - whole) + (1 if len(data) % ENTRY_BYTES else 0)
    values = struct.unpack_from(f"<{whole}Q", data) if whole else ()
    return PagemapEntries(tuple(parse_pagemap_entry(v) for v in values), errors)


#: Byte -> 1 where the top byte of a little-endian entry has the present bit (bit 63), else 0.
_PRESENT_TOP = bytes(1 if i & 0x80 else 0 for i in range(256))
_RUN = re.compile(rb"\x01+")


def present_runs(data: bytes, first_page: int) -> list[tuple[int, int]]:
    """Return the runs of present pages, as ``[start, end)`` virtual page numbers in order,
    of consecutive pagemap entries read from the entry of page ``first_page`` (a trailing
    partial entry is not an entry). Any number of entries (the runs are found in C by
    ``bytes.translate`` and ``re``: a GiB of 4 KiB pages, 2 MiB of entries, in ~2 ms)."""
    whole = len(data) // ENTRY_BYTES
    flags = data[ENTRY_BYTES - 1:whole * ENTRY_BYTES:ENTRY_BYTES].translate(_PRESENT_TOP)
    return [(first_page + m.start(), first_page + m.end()) for m in _RUN.finditer(flags)]
