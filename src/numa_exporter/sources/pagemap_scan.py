"""The ``PAGEMAP_SCAN`` ioctl of ``/proc/<pid>/pagemap`` (Linux 6.7+): the categories of a
few single pages (present, huge), each one ioctl over one page, so the kernel walks that one
page's table entry under the mmap lock. Bytes and classified errors only; the records are
parsed by ``parsers/pid_pagemap_scan.py``.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from collections.abc import Sequence

from numa_exporter.sources.errors import classify

#: _IOWR('f', 16, struct pm_scan_arg): 96 bytes of argument.
PAGEMAP_SCAN = (3 << 30) | (96 << 16) | (ord("f") << 8) | 16
ARG_BYTES = 96
REGION_BYTES = 24
#: What the answer says of each page: PAGE_IS_PRESENT | PAGE_IS_HUGE.
RETURN_MASK = (1 << 3) | (1 << 6)
#: Errors that mean "no such ioctl here" (a kernel before 6.7, a file that is not pagemap).
UNSUPPORTED = frozenset({errno.ENOTTY, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})
MAX_PROBES = 4096


def scan_pages(path: str, pages: Sequence[int], page_size: int) -> list[bytes] | None:
    """Return, for each virtual page number in ``pages``, the ``struct page_region`` the
    ioctl filled for that one page (24 bytes; empty when it filled none), at most
    :data:`MAX_PROBES`; None where the ioctl is not supported. Raises a classified
    SourceError (Gone, Denied, ReadFailed) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise classify("pagemap", path, err) from err
    vec = ctypes.create_string_buffer(REGION_BYTES)
    out: list[bytes] = []
    try:
        for page in pages[:MAX_PROBES]:
            start = page * page_size
            arg = bytearray(struct.pack("<12Q", ARG_BYTES, 0, start, start + page_size, 0,
                                        ctypes.addressof(vec), 1, 0, 0, 0, 0, RETURN_MASK))
            try:
                n = fcntl.ioctl(fd, PAGEMAP_SCAN, arg, True)
            except OSError as err:
                if err.errno in UNSUPPORTED and not out:
                    return None
                raise classify("pagemap", path, err) from err
            out.append(vec.raw if n > 0 else b"")
    finally:
        os.close(fd)
    return out
