"""Accelerator device files a process has open, from the links in ``/proc/<pid>/fd``.

Each fd link is read with ``readlink`` under the procfs root, so fixture trees may hold
dangling symlinks (``3 -> /dev/nvidia0``). For the live procfs, ``stat`` on the fd link
follows the kernel's magic link to the open inode itself, so ``st_rdev`` is right even for
a process in another mount namespace, where the path may not resolve for the exporter.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import classify

# Per-device nodes (nvidia<N>, renderD<N>, card<N>, accel<N>, uverbs<N>) identify one device.
# /dev/nvidia-uvm is shared by every CUDA process and names no GPU; it is kept so callers can
# see CUDA use, but no accelerator has it as a device node.
ACCELERATOR_DEVICE_RE = re.compile(
    r"/dev/(?:nvidia\d+|nvidia-uvm|dri/renderD\d+|dri/card\d+|accel/accel\d+"
    r"|infiniband/uverbs\d+)"
)


class DeviceFd(NamedTuple):
    """One accelerator device file open in a process: its path and (major, minor), if known."""

    path: str
    rdev: tuple[int, int] | None


def is_live_procfs(procfs: Path) -> bool:
    """Return whether ``procfs`` is a mounted kernel procfs (not a fixture tree).

    A kernel procfs shows ``self`` as a link to a pid; fixture trees do not. Only on a live
    procfs does ``stat`` of an fd link reach the open file rather than a host path.
    """
    try:
        return os.readlink(procfs / "self").isdigit() and (procfs / "thread-self").exists()
    except OSError:
        return False


#: fds read between two looks at the deadline
CHECK_EVERY = 256
_DEV = "/dev/"


def open_device_files(procfs: Path, pid: int, *, stat_rdev: bool = True,
                      pattern: re.Pattern[str] = ACCELERATOR_DEVICE_RE,
                      deadline: Deadline = NEVER,
                      ) -> tuple[DeviceFd, ...]:
    """Return the device files matching ``pattern`` that ``pid`` has open, one per path.

    Sorted by path. ``rdev`` is the character device number from ``stat`` of the fd link
    when ``stat_rdev`` is true (the live procfs) and the open file is a character device;
    None for fixture trees (pass ``stat_rdev=False``) or when the stat fails. Fds closed
    while we read are skipped. Listing the fd folder raises ``Gone`` (ENOENT, ESRCH),
    ``Denied`` (EACCES, EPERM: another user's process without CAP_SYS_PTRACE) or
    ``ReadFailed``. ``deadline`` is checked every :data:`CHECK_EVERY` fds (``Expired``
    past it). Each link is read relative to the open folder (one
    ``readlinkat``, no path built), so a process with tens of thousands of fds costs a few
    microseconds per fd.
    """
    fd_dir = procfs / str(pid) / "fd"
    where = str(fd_dir)
    try:
        dfd = os.open(fd_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise classify("fd", where, err) from err
    try:
        try:
            names = os.listdir(dfd)
        except OSError as err:
            raise classify("fd", where, err) from err
        found: dict[str, DeviceFd] = {}
        readlink = os.readlink
        quick = pattern is ACCELERATOR_DEVICE_RE  # it matches paths under /dev only
        for i, name in enumerate(sorted(names, key=lambda n: (len(n), n))):
            if i % CHECK_EVERY == CHECK_EVERY - 1:
                deadline.check(where)
            if not name.isdigit():
                continue
            try:
                target = readlink(name, dir_fd=dfd)
            except OSError as err:
                if err.errno in (errno.ENOENT, errno.ESRCH, errno.EINVAL):
                    continue  # closed since the listing, or not a link (fixture junk)
                raise classify("fd", f"{where}/{name}", err) from err
            if ((quick and not target.startswith(_DEV)) or target in found
                    or not pattern.fullmatch(target)):
                continue
            found[target] = DeviceFd(target, _rdev(fd_dir / name) if stat_rdev else None)
        return tuple(found[k] for k in sorted(found))
    finally:
        os.close(dfd)


def _rdev(link: Path) -> tuple[int, int] | None:
    """Return (major, minor) of the character device open behind ``link``, else None."""
    try:
        st = os.stat(link)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev)
