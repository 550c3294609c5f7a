"""Helper processes with known memory layouts that the benchmark starts and stops."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# One target: an anonymous region of MIB MiB (4 KiB pages or THP), NMAPS separate 8 KiB
# mappings (protections alternate so the kernel cannot merge neighbours into one VMA) and
# NTHREADS threads in all, idle. Prints "ready" and lives until its stdin closes.
TARGET = r"""
import ctypes, mmap, sys, threading
kind, mib, nthreads, nmaps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(15, b"numa-bench-t", 0, 0, 0)
keep = []
if mib:
    size = mib << 20
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE if kind == "thp" else mmap.MADV_NOHUGEPAGE)
    for i in range(0, size, 4096):
        m[i] = 1
    keep.append(m)
if nmaps:
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    for i in range(nmaps):
        addr = libc.mmap(None, 8192, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            print("mmap failed after", i, flush=True)
            sys.exit(1)
        ctypes.memset(addr, 1, 8192)
        libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(8192),
                      rw if i % 2 == 0 else mmap.PROT_READ)
stop = threading.Event()
for _ in range(nthreads - 1):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

# The daemon case: N processes that each map one shared 70 MiB file and touch every page, so
# each has ~70 MiB resident (over --process.min-resident=64MiB) while the machine holds the
# pages once. Forked from one launcher; each exits when stdin closes.
FLEET = r"""
import ctypes, mmap, os, sys
n, mib = int(sys.argv[1]), int(sys.argv[2])
size = mib << 20
fd = os.memfd_create("numa-bench-pool")
os.ftruncate(fd, size)
os.pwrite(fd, b"\1" * size, 0)
libc = ctypes.CDLL(None, use_errno=True)
for _ in range(n):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        libc.prctl(15, b"numa-bench-d", 0, 0, 0)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        total = 0
        for i in range(0, size, 4096):
            total += m[i]
        os.write(w, b"x")
        os.close(w)
        sys.stdin.buffer.read()
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
print("ready", flush=True)
sys.stdin.buffer.read()
"""


@dataclass
class Target:
    """A started helper process; ``close()`` ends it (and any children)."""

    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()


def _start(code: str, *args: object) -> Target:
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != b"ready":
        proc.kill()
        raise RuntimeError(f"target failed to start: {line.decode(errors='replace')}")
    return Target(proc)


def start_target(kind: str, mib: int, threads: int = 1, mappings: int = 0) -> Target:
    """Start a target (``kind`` "4k" or "thp") and return it once its memory is touched."""
    return _start(TARGET, kind, mib, threads, mappings)


def start_fleet(n: int, mib: int) -> Target:
    """Start ``n`` processes of ``mib`` MiB resident (shared pages) named numa-bench-d."""
    return _start(FLEET, n, mib)


def thp_available() -> bool:
    """Return whether transparent huge pages can be asked for with madvise."""
    p = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return p.exists() and "[never]" not in p.read_text()


MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")


def ensure_map_count(needed: int) -> int | None:
    """Raise vm.max_map_count to ``needed`` if it is lower; return the old value to restore.

    Returns None when nothing was changed. Raises PermissionError/OSError when it cannot be set.
    """
    old = int(MAX_MAP_COUNT.read_text())
    if old >= needed:
        return None
    MAX_MAP_COUNT.write_text(str(needed))
    return old


def restore_map_count(old: int | None) -> None:
    """Put vm.max_map_count back after :func:`ensure_map_count`."""
    if old is not None:
        MAX_MAP_COUNT.write_text(str(old))
