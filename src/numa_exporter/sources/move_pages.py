"""``move_pages(2)`` in query mode: the NUMA node of individual pages of another process.

With ``nodes = NULL`` nothing moves: the kernel fills ``status[i]`` with the node of the page
at ``pages[i]``, or a negative errno (``-ENOENT``: not present; ``-EFAULT``: no mapping there,
the zero page, or, on kernels before 6.12, an anonymous page never touched). The kernel
(mm/migrate.c, ``do_pages_stat``) copies the address array 16 entries at a time and takes
the target's mmap lock for reading once per 16, so a query never holds it for long; we also
keep each system call to :data:`MAX_BATCH` pages.

Permission (``kernel_move_pages`` -> ``find_mm_struct``): the caller needs
``ptrace_may_access(target, PTRACE_MODE_READ_REALCREDS)`` - the same uid with a dumpable
target, or CAP_SYS_PTRACE - and the LSM ``task_movememory`` hook's consent; query mode needs
no CAP_SYS_NICE (that is only for MPOL_MF_MOVE_ALL). Errors map as elsewhere in sources/:
ESRCH (no such pid) -> Gone; EPERM/EACCES -> Denied; EINVAL from a target without an mm
(a zombie or a kernel thread: ``get_task_mm`` is NULL) -> Gone; ENOSYS (a kernel built
without CONFIG_MIGRATION/NUMA) -> :class:`MovePagesUnsupported`; anything else -> ReadFailed.

The pid is looked up in the *caller's* PID namespace (``find_get_task_by_vpid``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import time
from collections.abc import Callable, Sequence

from numa_exporter.sources.errors import Denied, Gone, ReadFailed, SourceError

#: ``__NR_move_pages`` per ``platform.machine()``, each checked against the kernel's tables:
#: arch/x86/entry/syscalls/syscall_64.tbl (279) and syscall_32.tbl (317),
#: include/uapi/asm-generic/unistd.h (239: arm64, riscv, loongarch),
#: arch/powerpc/kernel/syscalls/syscall.tbl (301), arch/s390/kernel/syscalls/syscall.tbl (310).
SYSCALL_NUMBERS: dict[str, int] = {
    "x86_64": 279,
    "amd64": 279,
    "i386": 317,
    "i486": 317,
    "i586": 317,
    "i686": 317,
    "aarch64": 239,
    "arm64": 239,
    "riscv64": 239,
    "loongarch64": 239,
    "ppc64le": 301,
    "ppc64": 301,
    "s390x": 310,
}
#: Pages per system call.
MAX_BATCH = 256
#: Seconds to sleep between two system calls of one query. The kernel's rwsem lets a new
#: reader take a reader-owned lock even while a writer waits, until that writer has waited
#: RWSEM_WAIT_TIMEOUT (4 ms at HZ 250 and 1000) and asks for a handoff; back-to-back calls
#: would therefore hold off the target's mmap/munmap for ~4 ms. A pause longer than a
#: wake-up lets the waiting writer in after at most one call.
DEFAULT_PAUSE_S = 0.001
SOURCE = "move_pages"

#: A query: page addresses in, one status per address out (node id, or negative errno).
QueryFn = Callable[[Sequence[int]], list[int]]


class MovePagesUnsupported(Exception):
    """move_pages cannot be called here: unknown architecture, or a kernel without it."""


_Syscall = Callable[..., int]


def _libc_syscall() -> _Syscall | None:
    """Return libc's ``syscall`` bound for move_pages, or None when libc has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn


def _libnuma_move_pages() -> _Syscall | None:
    """Return libnuma's ``move_pages`` (which knows its own syscall number), or None."""
    name = ctypes.util.find_library("numa") or "libnuma.so.1"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
        fn = lib.move_pages
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_int]
    return fn


class MovePages:
    """The move_pages entry point of this machine (syscall table first, then libnuma).

    Raises :class:`MovePagesUnsupported` when neither is available; never guesses a number.
    """

    def __init__(self, machine: str | None = None, allow_libnuma: bool = True,
                 batch: int = MAX_BATCH, pause_s: float = DEFAULT_PAUSE_S) -> None:
        self.batch = max(1, min(batch, MAX_BATCH))
        self.pause_s = max(pause_s, 0.0)
        self._last_end = -1e9  # when the last system call returned (monotonic)
        arch = machine if machine is not None else platform.machine()
        self.machine = arch
        nr = SYSCALL_NUMBERS.get(arch)
        self._syscall: _Syscall | None = None
        self._libnuma: _Syscall | None = None
        if nr is not None:
            self._syscall = _libc_syscall()
        if self._syscall is None and allow_libnuma:
            self._libnuma = _libnuma_move_pages()
        if self._syscall is None and self._libnuma is None:
            raise MovePagesUnsupported(f"move_pages: no system call number known for architecture "
                              f"{arch!r} and libnuma.so.1 is not loadable")
        self.number = nr if self._syscall is not None else None
        self.via = "syscall" if self._syscall is not None else "libnuma"

    def _call(self, pid: int, pages: ctypes.Array[ctypes.c_void_p],
              status: ctypes.Array[ctypes.c_int], n: int) -> int:
        """Return the raw result of one move_pages call (errno left in ctypes)."""
        if self._syscall is not None:
            return int(self._syscall(ctypes.c_long(self.number or 0), ctypes.c_long(pid),
                                     ctypes.c_ulong(n), pages, None, status,
                                     ctypes.c_long(0)))
        assert self._libnuma is not None
        return int(self._libnuma(pid, n, ctypes.addressof(pages), None,
                                 ctypes.addressof(status), 0))

    def query(self, pid: int, addresses: Sequence[int]) -> list[int]:
        """Return the status of each address of process ``pid`` (node id or -errno).

        Calls the kernel in batches of at most ``batch`` pages, at least ``pause_s`` apart
        (counted from the end of the previous call, of this query or an earlier one); raises
        Gone, Denied, ReadFailed (classified as in the module docstring) or
        :class:`MovePagesUnsupported`.
        """
        out: list[int] = []
        where = f"move_pages({pid})"
        for i in range(0, len(addresses), self.batch):
            self.pace()
            chunk = addresses[i:i + self.batch]
            n = len(chunk)
            pages = (ctypes.c_void_p * n)(*chunk)
            status = (ctypes.c_int * n)(*([-errno.EINVAL] * n))
            ctypes.set_errno(0)
            rc = self._call(pid, pages, status, n)
            self.called()
            if rc < 0:
                raise classify_errno(ctypes.get_errno(), where)
            out.extend(status)
        return out

    def pace(self) -> None:
        """Sleep until ``pause_s`` has passed since the last system call returned (callers
        that make the system call themselves, the compiled sampler, call this first)."""
        if self.pause_s:
            wait = self._last_end + self.pause_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)

    def called(self) -> None:
        """Note that a system call of this entry point has just returned."""
        self._last_end = time.monotonic()

    def for_pid(self, pid: int) -> QueryFn:
        """Return a query function bound to ``pid``."""
        def q(addresses: Sequence[int]) -> list[int]:
            return self.query(pid, addresses)
        return q


def classify_errno(err: int, where: str) -> SourceError | MovePagesUnsupported:
    """Return the exception for a failed move_pages call with ``errno`` ``err``."""
    ose = OSError(err, os.strerror(err) if err else "unknown error")
    if err in (errno.ESRCH, errno.EINVAL):
        return Gone(SOURCE, where, ose)
    if err in (errno.EPERM, errno.EACCES):
        return Denied(SOURCE, where, ose)
    if err == errno.ENOSYS:
        return MovePagesUnsupported(f"{where}: the kernel has no move_pages (ENOSYS)")
    return ReadFailed(SOURCE, where, ose)
