"""Helper processes with known memory layouts that the benchmarks start and stop; the one
mmap/munmap latency target and its driver (interference.py, sampled.py)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# One target, the one process every benchmark here watches: an anonymous region of MIB MiB
# (4 KiB pages or THP, every page written; KIND "reserve": at the start of a 64 TiB
# MAP_NORESERVE reservation), NMAPS separate mappings of MAP_PAGES pages each (protections
# alternate so the kernel cannot merge neighbours into one VMA, every page written; with
# NAMED=1 each is a MAP_SHARED mapping of a memfd of its own name, so that maps shows NMAPS
# distinct paths) and NTHREADS threads in all, idle, under the name COMM. Prints "ready" once its
# memory is in place. With LATENCY=1 it then loops mmap/write/munmap of a 64 KiB region and
# records each iteration's latency (mmap and munmap take its mmap lock for writing, so they
# stall while a reader walks its page tables), wall and net of its own run-queue wait
# (/proc/thread-self/schedstat): "start" on stdin begins a window ("started"), "stop" ends it
# and prints the iterations and p50, p99, p99.9 and worst in ns, wall then net. It lives
# until its stdin closes.
TARGET = r"""
import array, ctypes, gc, mmap, os, sys, threading, time
kind, mib, nthreads, nmaps, map_pages = sys.argv[1], *map(int, sys.argv[2:6])
latency, comm = sys.argv[6] == "1", sys.argv[7].encode()
named = len(sys.argv) > 8 and sys.argv[8] == "1"
gc.disable()
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(15, comm, 0, 0, 0)
page = os.sysconf("SC_PAGE_SIZE")
keep = []
if mib:
    size = mib << 20
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if kind == "reserve":  # MIB MiB written at the start of a 64 TiB MAP_NORESERVE range
        m = mmap.mmap(-1, 64 << 40, flags=flags | 0x4000)
    else:
        m = mmap.mmap(-1, size, flags=flags)
    m.madvise(mmap.MADV_HUGEPAGE if kind == "thp" else mmap.MADV_NOHUGEPAGE)
    try:
        m.madvise(23, 0, size)  # MADV_POPULATE_WRITE (Linux 5.14)
    except OSError:
        for i in range(0, size, page):
            m[i] = 1
    keep.append(m)
if nmaps:
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    length = map_pages * page
    for i in range(nmaps):
        if named:
            fd = os.memfd_create(f"numa-bench-{i}")
            os.ftruncate(fd, length)
            addr = libc.mmap(None, length, rw, mmap.MAP_SHARED, fd, 0)
            os.close(fd)
        else:
            addr = libc.mmap(None, length, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            print("mmap failed after", i, flush=True)
            sys.exit(1)
        ctypes.memset(addr, 1, length)
        libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(length),
                      rw if i % 2 == 0 else mmap.PROT_READ)
stop = threading.Event()
for _ in range(nthreads - 1):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
if not latency:
    sys.stdin.read()
    sys.exit(0)
fd = sys.stdin.fileno()
os.set_blocking(fd, False)
sfd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
def run_delay():
    return int(os.pread(sfd, 128, 0).split()[1])
def quantiles(a):
    s = sorted(a)
    n = len(s)
    q = lambda p: s[min(n - 1, int(n * p))] if n else 0
    return [q(0.5), q(0.99), q(0.999), s[-1] if n else 0]
lat, net = array.array("q"), array.array("q")
clock = time.perf_counter_ns
buf = b""
while True:
    for _ in range(64):
        d0 = run_delay()
        t0 = clock()
        r = mmap.mmap(-1, 65536)
        r[0] = 1
        r.close()
        t1 = clock()
        lat.append(t1 - t0)
        net.append(t1 - t0 - (run_delay() - d0))
    try:
        data = os.read(fd, 4096)
    except BlockingIOError:
        continue
    if not data:
        break
    buf += data
    while b"\n" in buf:
        cmd, _, buf = buf.partition(b"\n")
        if cmd == b"stop":
            print(len(lat), *quantiles(lat), *quantiles(net), flush=True)
        lat, net = array.array("q"), array.array("q")
        if cmd == b"start":
            print("started", flush=True)
"""

# The daemon case: N processes that each map one shared 70 MiB file and touch every page, so
# each has ~70 MiB resident (over --process.min-resident=64MiB) while the machine holds the
# pages once. Forked from one launcher; each exits when stdin closes. The third argument:
# "shared" (that pool), "private" (each its own private anonymous memory, written once, then
# asleep) or "running" (private, and each writes one of its resident pages every second:
# it runs without faulting).
FLEET = r"""
import ctypes, mmap, os, select, sys
n, mib = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "shared"
size = mib << 20
if mode == "shared":
    fd = os.memfd_create("numa-bench-pool")
    os.ftruncate(fd, size)
    os.pwrite(fd, b"\1" * size, 0)
libc = ctypes.CDLL(None, use_errno=True)
for _ in range(n):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        libc.prctl(15, b"numa-bench-d", 0, 0, 0)
        if mode == "shared":
            m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
            total = 0
            for i in range(0, size, 4096):
                total += m[i]
        else:
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            for i in range(0, size, 4096):
                m[i] = 1
        os.write(w, b"x")
        os.close(w)
        if mode == "running":
            page = 0
            while not select.select([sys.stdin], [], [], 1.0)[0]:
                m[page] = (m[page] + 1) & 0xFF  # resident and written before: no fault
                page = (page + 4096) % size
        sys.stdin.buffer.read()
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
print("ready", flush=True)
sys.stdin.buffer.read()
"""


LATENCY_KEYS = ("p50_ms", "p99_ms", "p999_ms", "worst_ms")


@dataclass
class Target:
    """A started helper process; ``close()`` ends it (and any children)."""

    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _send(self, cmd: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + b"\n")
        self.proc.stdin.flush()

    def _line(self, timeout: float = 60.0) -> bytes:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("target did not answer")
        return self.proc.stdout.readline().strip()

    def start_window(self) -> None:
        """Begin a latency window (a target started with ``latency=True``); return once the
        target has begun it, so that a stall caused right after falls inside the window."""
        self._send(b"start")
        if self._line() != b"started":
            raise RuntimeError("target did not start a window")

    def stop_window(self) -> dict[str, float]:
        """End the window; return its iterations and the p50, p99, p99.9 and worst latency of
        mmap/munmap in ms, wall (``worst_ms``...) and net of the target's run-queue wait
        (``net_worst_ms``...)."""
        self._send(b"stop")
        n, *q = (int(x) for x in self._line().split())
        out: dict[str, float] = {"iterations": n}
        for i, key in enumerate(LATENCY_KEYS):
            out[key] = q[i] / 1e6
            out[f"net_{key}"] = q[4 + i] / 1e6
        return out

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()


def _start(code: str, *args: object, cpu: int | None = None, timeout: float = 900) -> Target:
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    target = Target(proc)
    try:
        line = target._line(timeout)
    except RuntimeError:
        line = b"(no answer)"
    if line != b"ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"target failed to start: {line.decode(errors='replace')}")
    return target


COMM = "numa-bench-t"


def start_target(kind: str, mib: int, threads: int = 1, mappings: int = 0, *,
                 map_pages: int = 2, latency: bool = False, cpu: int | None = None,
                 comm: str = COMM, named: bool = False) -> Target:
    """Start a target (``kind`` "4k", "thp" or "reserve": 4 KiB pages at the start of a
    64 TiB ``MAP_NORESERVE`` reservation) named ``comm`` (at most 15 bytes), pinned to
    ``cpu`` if given, and return it once its memory is written; ``latency`` makes it record
    mmap/munmap latency in windows (:meth:`Target.start_window`); ``named``: its
    ``mappings`` are memfds of distinct names (shared memory), not anonymous."""
    return _start(TARGET, kind, mib, threads, mappings, map_pages, int(latency), comm,
                  int(named), cpu=cpu)


FLEET_MODES = ("shared", "private", "running")


def start_fleet(n: int, mib: int, mode: str = "shared") -> Target:
    """Start ``n`` processes of ``mib`` MiB resident named numa-bench-d: pages of one shared
    pool, or (``mode`` "private", "running") each its own private anonymous pages, asleep
    or writing one resident page a second (see ``FLEET``)."""
    if mode not in FLEET_MODES:
        raise ValueError(f"fleet mode {mode!r}: one of {', '.join(FLEET_MODES)}")
    return _start(FLEET, n, mib, mode)


def available_bytes() -> int:
    """Return MemAvailable from /proc/meminfo in bytes (0 when unreadable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


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
