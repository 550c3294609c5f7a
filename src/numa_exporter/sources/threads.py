"""The task folder of one process: thread ids and each thread's files, as bytes.

A scan reads every thread of every selected process, so this path is kept to few system calls
per thread: the ``task`` folder is opened once, each thread's files are opened relative to it
(``openat``), read with one ``read`` each (they are single-record seq files that the kernel
produces whole) and closed. Which files are read, and when, is decided in
``readers/threads.py``.
"""

from __future__ import annotations

import errno
import os

from numa_exporter.sources.errors import GONE_ERRNOS, Gone, classify
from numa_exporter.sources.procfs import ProcessFiles

_FLAGS = os.O_RDONLY | os.O_CLOEXEC
_DIR_FLAGS = _FLAGS | os.O_DIRECTORY
_READ = 64 << 10  # above any stat/schedstat/sched record


class ThreadMissing(Exception):
    """A thread file could not be opened or read because it (or its thread) is gone."""


class TaskDir:
    """The open ``task`` folder of one process; close it (or use ``with``)."""

    def __init__(self, files: ProcessFiles) -> None:
        """Open the folder; raise the classified SourceError when it cannot be opened."""
        self.pid = files.pid
        self.path = str(files.path / "task")
        try:
            self._fd = os.open(self.path, _DIR_FLAGS)
        except OSError as err:
            raise classify("task", self.path, err) from err

    def __enter__(self) -> TaskDir:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the folder."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def tids(self) -> list[int]:
        """Return the thread ids listed, sorted; raise Gone when none is (a live process
        always lists its leader)."""
        try:
            names = os.listdir(self._fd)
        except OSError as err:
            raise classify("task", self.path, err) from err
        tids = sorted(int(n) for n in names if n.isascii() and n.isdigit() and len(n) <= 10)
        if not tids:
            raise Gone("task", self.path, OSError(errno.ESRCH, "no threads"))
        return tids

    def read(self, rel: str, source: str) -> bytes:
        """Return one read of ``rel`` (``<tid>/stat``); raise ThreadMissing or a SourceError."""
        try:
            fd = os.open(rel, _FLAGS, dir_fd=self._fd)
        except OSError as err:
            if err.errno in GONE_ERRNOS:
                raise ThreadMissing from None
            raise classify(source, f"{self.path}/{rel}", err) from err
        try:
            return os.read(fd, _READ)
        except OSError as err:
            if err.errno in GONE_ERRNOS:
                raise ThreadMissing from None
            raise classify(source, f"{self.path}/{rel}", err) from err
        finally:
            os.close(fd)

    def exists(self, rel: str) -> bool:
        """Return whether ``task/<rel>`` still exists."""
        try:
            os.stat(rel, dir_fd=self._fd)
        except OSError as err:
            if err.errno in GONE_ERRNOS:
                return False
            raise classify("task", f"{self.path}/{rel}", err) from err
        return True


def thread_affinity(tid: int) -> frozenset[int]:
    """Return the CPUs thread ``tid`` (of the caller's PID namespace) may run on: one
    ``sched_getaffinity`` call. Raises ThreadMissing when the thread is gone, else the
    classified SourceError."""
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError as err:
        if err.errno in GONE_ERRNOS:
            raise ThreadMissing from None
        raise classify("affinity", f"sched_getaffinity({tid})", err) from err
