"""Whether a process has replaced its address space (exec) since it was first seen.

``execve()`` gives the process a new ``mm_struct`` (``fs/exec.c``: ``begin_new_exec`` ->
``exec_mmap`` installs the new mm and drops the old one with ``mmput``). Every exec does,
with or without address-space randomisation, of the same binary or another: that is what
an exec is. ``/proc/<pid>/environ`` captures the mm at open (``environ_open`` ->
``__mem_open``: ``proc_mem_open`` takes the task's mm with ``mmgrab``, after a
``PTRACE_MODE_READ`` check, the same access ``numa_maps`` needs) and every read goes to
that mm (``environ_read``: ``file->private_data``, then ``mmget_not_zero``). So a
descriptor opened once and read one byte at a time answers: one byte while the mm it was
opened on is the process's, **0 bytes once that mm is gone** (after an exec, or once the
process has exited). The stat fields that told an exec apart so far (start code, end code,
start stack: ``PidStat.image``) stay the same when an exec lays the new program out where
the old one was: address randomisation off (``setarch -R``, ``kernel.randomize_va_space=0``)
and the same binary, e.g. a server re-executing itself to upgrade.

:class:`ExecProbe` holds one such descriptor per process and counts, per pid, the address
spaces it has seen go (``generation``): a new number is an exec, whatever happened between
two looks (the descriptor stays bound to the old mm however long nobody reads it).

Limits, each of which leaves the generation unknown (None; the stat marker still decides,
as before): a process with an empty environment (``env -i``: ``env_start == env_end``
reads 0 bytes from the start), one not spawned far enough to have one, a descriptor the
budget leaves no room for, an open refused (EACCES: no ptrace read access). A process can
make its own environment unreadable (unmap it, or ``prctl(PR_SET_MM_ENV_*)`` with
CAP_SYS_RESOURCE); that looks like one exec and then unknown: it can at most reset its own
state once, as it could by exec'ing. The held descriptor keeps the old ``mm_struct``
allocated (not its pages) until the next look closes it. Each look is one ``pread`` of one
byte: the kernel takes the process's mmap lock for reading to copy it (a page of
environment swapped out is read back in); its cost per scan is in docs/architecture.md.

On a fixture root the file is a regular file: emptied in place it reads 0 bytes, as the
kernel's does after an exec; absent, the generation is unknown.
"""

from __future__ import annotations

import contextlib
import os
import stat
import weakref
from collections.abc import Callable

from numa_exporter.sources.held import held_budget

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _close_all(fds: dict[int, tuple[int, int]]) -> None:
    """Close every descriptor in ``fds`` (pid -> (fd, generation)) and forget them."""
    for fd, _ in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def _open(path: str) -> int | None:
    """Return a descriptor of ``path`` that reads at least one byte now (a regular file:
    procfs's are), or None (absent, refused, empty, not a regular file)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, 1, 0):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


class ExecProbe:
    """Held ``environ`` descriptors by pid and the generation of each process's address
    space (see the module). Not thread-safe: one scanner's thread looks through it."""

    def __init__(self, budget: Callable[[], int] = held_budget) -> None:
        self.budget = budget  # asked when a descriptor is to be held: the limit may rise
        self._fds: dict[int, tuple[int, int]] = {}  # pid -> (fd, generation)
        self._gone: dict[int, int] = {}  # pid -> generations counted while not held
        weakref.finalize(self, _close_all, self._fds)

    def __len__(self) -> int:
        return len(self._fds)

    def generation(self, pid: int, mm_dir: str) -> int | None:
        """Return how many address spaces of ``pid`` have been seen to go since it was
        first looked at (0 until its first exec), or None where that cannot be told;
        ``mm_dir`` is the folder its ``environ`` is read from (a live thread's for a
        zombie leader). Never raises."""
        held = self._fds.get(pid)
        gen = self._gone.get(pid, 0)
        if held is not None:
            fd, gen = held
            try:
                alive = bool(os.pread(fd, 1, 0))
            except OSError:  # not an answer (ENOMEM): look again next time, from scratch
                self._drop(pid)
                self._gone[pid] = gen
                return None
            if alive:
                return gen
            # 0 bytes: the mm it was opened on is gone: an exec (or an exit, then the pid
            # is another process's or none, and its start time says so)
            self._drop(pid)
            gen += 1
        opened = _open(f"{mm_dir}/environ")
        if opened is None:
            if held is not None:
                self._gone[pid] = gen  # counted: the next open starts from it
            return None
        if len(self._fds) >= self.budget():
            os.close(opened)
            return None
        self._fds[pid] = (opened, gen)
        self._gone.pop(pid, None)
        return gen

    def _drop(self, pid: int) -> None:
        held = self._fds.pop(pid, None)
        if held is not None:
            with contextlib.suppress(OSError):
                os.close(held[0])

    def retain(self, pids: frozenset[int]) -> None:
        """Close the descriptors (and forget the counts) of processes not in ``pids``."""
        for pid in [p for p in self._fds if p not in pids]:
            self._drop(pid)
        for pid in [p for p in self._gone if p not in pids]:
            del self._gone[pid]

    def close(self) -> None:
        """Close every descriptor held."""
        _close_all(self._fds)
