"""Small per-process procfs files read through descriptors kept open between scans.

A scan screens every process of the host from its ``statm``, ``status`` and (with patterns)
``cmdline``. Opening one of them walks the path and allocates a seq_file; closing frees it.
Kept open, each later read is one ``pread`` at offset 0, which makes the kernel write the
file anew (a seq_file restarts at position 0, ``cmdline`` reads the process's memory again).

Never stale: a descriptor of ``/proc/<pid>/<file>`` is bound to the process (its struct
pid), not to the number. Once that process is reaped every read of it fails with ESRCH,
even if the number is handed to another process; the descriptor is then closed and the file
opened again by its path, which reaches the new process (or fails: the process is gone).

Only for a live, kernel procfs (a fixture tree's files would be read as they were when
opened, after they were replaced or deleted), and only for files the kernel writes anew on
every read without a check at open (no ptrace-mode check at open time, no mm captured at
open: never ``numa_maps``, ``maps`` or ``mem``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import weakref
from collections.abc import Callable

from numa_exporter.sources.errors import classify
from numa_exporter.sources.files import CHUNK, MAX_SMALL_FILE, read_at_most

_FLAGS = os.O_RDONLY | os.O_CLOEXEC
MAX_HELD = 4096  # descriptors held at most, whatever the limit allows


def held_budget() -> int:
    """Return how many descriptors to hold: a tenth of the soft RLIMIT_NOFILE as it is now
    (the web server raises it to the hard limit at start and takes 80% for connections), at
    most ``MAX_HELD``; the rest stays for numa_maps reads, fd scans and the like."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_HELD
    return max(0, min(MAX_HELD, soft // 10))


def _pread_small(fd: int, whole: bool) -> bytes:
    """Return the whole file from offset 0 (at most MAX_SMALL_FILE; OSError passes).

    ``whole``: a read shorter than asked for is the end, and no second read is needed to
    find it. True of a single-record seq_file (status, statm, comm: the kernel writes the
    record whole into its buffer and hands it out as far as the caller's buffer goes) and of
    ``cmdline`` (``get_mm_cmdline`` copies until the count or the end of the argument area,
    stopping short only where the process's memory cannot be read, and a read from there
    fails the same way).
    """
    if whole:
        first = os.pread(fd, CHUNK, 0)
        if len(first) < CHUNK:
            return first
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        chunk = os.pread(fd, n, pos)
        pos += len(chunk)
        return chunk

    return read_at_most(read, MAX_SMALL_FILE)


def _close_all(fds: dict[str, tuple[int, int]]) -> None:
    """Close every descriptor in ``fds`` and forget them."""
    for _, fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


class HeldFiles:
    """Descriptors of small per-process files, by path, kept open across scans.

    Not thread-safe: one scanner's thread reads through it.
    """

    def __init__(self, budget: Callable[[], int] = held_budget) -> None:
        self.budget = budget  # asked when a file is opened anew: the limit may be raised
        self._fds: dict[str, tuple[int, int]] = {}  # path -> (pid, fd)
        self.reopened = 0  # descriptors dropped on an error and opened again (tests)
        # a scanner dropped (inspect, tests) closes what it held
        weakref.finalize(self, _close_all, self._fds)

    def __len__(self) -> int:
        return len(self._fds)

    def read(self, pid: int, path: str, source: str, whole: bool = False) -> bytes:
        """Return the bytes of ``path`` (a file of process ``pid``); raise a SourceError.

        ``whole``: a single-record seq_file (see ``_pread_small``).

        A held descriptor that fails is closed and the file opened again by its path, so
        an error is always the one a fresh open and read gives.
        """
        held = self._fds.get(path)
        if held is not None:
            try:
                return _pread_small(held[1], whole)
            except OSError as err:
                self._drop(path)
                self.reopened += 1
                if err.errno not in (errno.ESRCH, errno.ENOENT):
                    raise classify(source, path, err) from err
        try:
            fd = os.open(path, _FLAGS)
        except OSError as err:
            raise classify(source, path, err) from err
        try:
            data = _pread_small(fd, whole)
        except OSError as err:
            os.close(fd)
            raise classify(source, path, err) from err
        if len(self._fds) < self.budget():
            self._fds[path] = (pid, fd)
        else:
            os.close(fd)
        return data

    def _drop(self, path: str) -> None:
        held = self._fds.pop(path, None)
        if held is not None:
            os.close(held[1])

    def retain(self, pids: frozenset[int]) -> None:
        """Close the descriptors of processes not in ``pids`` (no longer listed)."""
        for path in [p for p, (pid, _) in self._fds.items() if pid not in pids]:
            self._drop(path)

    def close(self) -> None:
        """Close every descriptor held."""
        _close_all(self._fds)
