"""Probes of what the running kernel accepts, asked without side effects: an ioctl on a procfs
file with an argument it must refuse, and a memory-policy mode on a page of the exporter's own.

Each answers True (the kernel knows it), False (the kernel says it does not) or None (cannot
tell: the file cannot be opened, another error, a platform the probe does not know).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
from pathlib import Path

#: What a kernel answers an ioctl it does not know on that file.
UNKNOWN_IOCTL = frozenset({errno.ENOTTY, errno.EOPNOTSUPP})
#: mbind(2)'s system call number by machine (no libc wrapper outside libnuma).
SYS_MBIND = {"x86_64": 237, "amd64": 237, "aarch64": 235, "arm64": 235}


def ioctl_known(path: Path, request: int, size: int = 128) -> bool | None:
    """Return whether the kernel knows ioctl ``request`` on the file ``path``.

    The argument is ``size`` zero bytes: an ioctl whose argument starts with its own size
    (PAGEMAP_SCAN, PROCMAP_QUERY) refuses it with EINVAL where it exists; a kernel without
    it answers ENOTTY. Returns None when the file cannot be opened or the answer is another
    error.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.ioctl(fd, request, bytearray(size))
    except OSError as err:
        if err.errno in UNKNOWN_IOCTL:
            return False
        return True if err.errno in (errno.EINVAL, errno.EFAULT, errno.E2BIG) else None
    finally:
        os.close(fd)
    return True


def mbind_mode_known(mode: int) -> bool | None:
    """Return whether ``mbind(2)`` accepts the memory-policy ``mode`` (e.g. 5,
    MPOL_PREFERRED_MANY) on one anonymous page of the exporter's own, mapped for the probe
    and unmapped after: False on EINVAL, None off Linux x86-64/arm64 or on another error."""
    nr = SYS_MBIND.get(platform.machine())
    if nr is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        page = mmap.mmap(-1, mmap.PAGESIZE)
    except (OSError, ValueError):
        return None
    try:
        view = ctypes.c_char.from_buffer(page)
        addr = ctypes.addressof(view)
        del view  # the page must have no exported pointer left when it closes
        mask = ctypes.c_ulong(~0 & ((1 << 64) - 1))  # every node: the kernel keeps the allowed
        rc = libc.syscall(nr, ctypes.c_void_p(addr), ctypes.c_ulong(mmap.PAGESIZE),
                          ctypes.c_int(mode), ctypes.byref(mask), ctypes.c_ulong(64),
                          ctypes.c_uint(0))
        err = ctypes.get_errno()
    finally:
        page.close()
    if rc == 0:
        return True
    return False if err == errno.EINVAL else None
