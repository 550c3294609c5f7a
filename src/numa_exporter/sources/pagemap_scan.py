"""``PAGEMAP_SCAN`` (Linux 6.7+): the present page ranges of another process's mapping, and
the categories of single pages (:func:`scan_pages`: present, huge); and, where the kernel
has no PAGEMAP_SCAN, the ``pagemap`` entries of a range read as they are
(:class:`PagemapRead`).

An ``ioctl`` on ``/proc/<pid>/pagemap`` (``fs/proc/task_mmu.c``, ``do_pagemap_scan``)
walks the page tables of ``[start, end)`` and returns the runs of pages that have the asked
categories, here ``PAGE_IS_PRESENT``, as ``struct page_region {start, end, categories}``.
Empty page-table levels are skipped whole, so a 16 TiB ``MAP_NORESERVE`` reservation with
1 GiB in it costs about what its 1 GiB costs (~1.5 ms per GiB of 4 KiB pages measured, a
third of a numa_maps read). ``max_pages`` ends a call after that many present pages: the
kernel takes the target's mmap lock for reading once per call (and again per 512 regions),
so each hold is bounded by it.

Opening ``pagemap`` needs what ``numa_maps`` needs (``PTRACE_MODE_READ``). A kernel without
the ioctl answers ``EINVAL`` or ``ENOTTY``: :class:`PagemapScanUnsupported`, and the caller does
without. Only architectures with the generic ``_IOC`` encoding are known here.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from numa_exporter.sources.errors import classify

SOURCE = "pagemap"
#: _IOWR('f', 16, struct pm_scan_arg) with the generic encoding (dir 3 << 30, 96-byte arg).
PAGEMAP_SCAN = (3 << 30) | (96 << 16) | (ord("f") << 8) | 16
PAGE_IS_PRESENT = 1 << 3
PAGE_IS_HUGE = 1 << 6
GENERIC_IOC = frozenset({"x86_64", "amd64", "aarch64", "arm64", "riscv64", "loongarch64",
                         "s390x", "i386", "i686"})
_ARG = struct.Struct("12Q")
#: Regions one call may return (the kernel's own buffer is 512: more only costs copies).
VEC_LEN = 512


class PagemapScanUnsupported(Exception):
    """PAGEMAP_SCAN cannot be used here (architecture, or a kernel without it)."""


class _PagemapFile:
    """An open ``pagemap`` of one process (``<mm_dir>/pagemap``), closed by :meth:`close` or
    at the end of a ``with`` block. Raises the classified SourceError of the open."""

    def __init__(self, mm_dir: Path | str) -> None:
        path = f"{mm_dir}/pagemap"
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            raise classify(SOURCE, path, err) from err
        self._path = path

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PagemapScan(_PagemapFile):
    """An open ``pagemap`` of one process; :meth:`present` asks for present page ranges.

    Raises the classified SourceError of the open (Gone, Denied, ...) or
    :class:`PagemapScanUnsupported` on an architecture whose ioctl encoding is not known here.
    """

    def __init__(self, mm_dir: Path | str, machine: str | None = None) -> None:
        arch = machine if machine is not None else platform.machine()
        if arch not in GENERIC_IOC:
            raise PagemapScanUnsupported(f"PAGEMAP_SCAN: ioctl encoding of {arch!r} not known")
        super().__init__(mm_dir)
        self._vec = (ctypes.c_uint64 * (3 * VEC_LEN))()
        self.calls = 0

    def present(self, start: int, end: int, max_pages: int) -> tuple[list[tuple[int, int]], int]:
        """Return (the present page ranges of ``[start, end)`` found by one call, in order,
        and where the walk stopped: ``end`` when it got there). One call finds at most
        ``max_pages`` present pages and :data:`VEC_LEN` ranges. Raises
        :class:`PagemapScanUnsupported` when the kernel has no PAGEMAP_SCAN, else the
        classified OSError."""
        arg = bytearray(_ARG.pack(_ARG.size, 0, start, end, 0, ctypes.addressof(self._vec),
                                  VEC_LEN, max(max_pages, 1), 0, PAGE_IS_PRESENT, 0,
                                  PAGE_IS_PRESENT))
        try:
            n = fcntl.ioctl(self._fd, PAGEMAP_SCAN, arg, True)
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ENOTTY, errno.EOPNOTSUPP):
                raise PagemapScanUnsupported(
                    f"PAGEMAP_SCAN on {self._path}: {err.strerror}") from err
            raise classify(SOURCE, self._path, err) from err
        self.calls += 1
        walk_end = _ARG.unpack_from(arg)[4]
        v = self._vec
        n = max(0, min(n, VEC_LEN))
        out = [(v[3 * i], v[3 * i + 1]) for i in range(n)]
        return out, max(min(walk_end, end), start)


#: Entries one :meth:`PagemapRead.entries` call reads at most (128 MiB of 4 KiB pages: 256 KiB).
READ_PAGES = 32_768


class PagemapRead(_PagemapFile):
    """An open ``pagemap`` of one process read by entries (8 bytes per virtual page): what
    finds a mapping's present pages where PAGEMAP_SCAN is missing (before Linux 6.7). The
    kernel (``pagemap_read``) walks the page tables of each 2 MiB of the range under its
    own hold of the target's mmap lock, so a hold stays short whatever is read; the cost is
    per virtual page (about 4.5 ms of CPU per GiB of 4 KiB pages measured, holes included).

    Raises the classified SourceError of the open (Gone, Denied, ...)."""

    def __init__(self, mm_dir: Path | str) -> None:
        super().__init__(mm_dir)
        self.calls = 0

    def entries(self, first_page: int, pages: int) -> bytes:
        """Return the entries of ``pages`` (at most :data:`READ_PAGES`) virtual pages from
        page number ``first_page`` (short or empty past the end of the address space).
        Raises the classified OSError."""
        try:
            data = os.pread(self._fd, max(min(pages, READ_PAGES), 0) * 8, first_page * 8)
        except OSError as err:
            raise classify(SOURCE, self._path, err) from err
        self.calls += 1
        return data


#: Bytes of one ``struct page_region`` (start, end, categories).
REGION_BYTES = 24
#: Pages one :func:`scan_pages` call asks about at most (a probe asks for a few dozen).
MAX_PROBES = 4096


def scan_pages(path: str, pages: Sequence[int], page_size: int, machine: str | None = None
               ) -> list[bytes] | None:
    """Return, for each virtual page number in ``pages``, the ``struct page_region`` one
    ioctl over that one page filled (24 bytes, categories PAGE_IS_PRESENT | PAGE_IS_HUGE;
    empty when it filled none), at most :data:`MAX_PROBES`: the kernel walks that one
    page's table entry under the mmap lock. Return None where the ioctl cannot be used
    (an architecture of unknown encoding, a kernel before 6.7, a file that is not
    ``pagemap``). Raises a classified SourceError (Gone, Denied, ReadFailed) otherwise."""
    if (machine if machine is not None else platform.machine()) not in GENERIC_IOC:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise classify(SOURCE, path, err) from err
    vec = ctypes.create_string_buffer(REGION_BYTES)
    mask = PAGE_IS_PRESENT | PAGE_IS_HUGE
    out: list[bytes] = []
    try:
        for page in pages[:MAX_PROBES]:
            start = page * page_size
            arg = bytearray(_ARG.pack(_ARG.size, 0, start, start + page_size, 0,
                                      ctypes.addressof(vec), 1, 0, 0, 0, 0, mask))
            try:
                n = fcntl.ioctl(fd, PAGEMAP_SCAN, arg, True)
            except OSError as err:
                if err.errno in (errno.EINVAL, errno.ENOTTY, errno.EOPNOTSUPP) and not out:
                    return None
                raise classify(SOURCE, path, err) from err
            out.append(vec.raw if n > 0 else b"")
    finally:
        os.close(fd)
    return out
