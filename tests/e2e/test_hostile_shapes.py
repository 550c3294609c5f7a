"""Hostile process shapes on this machine's /proc, read by the scanner with the real
sampled reader (issue 14): their cost is bounded and they cannot starve the others."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from numa_exporter.config import Config
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.readers.sampled.reader import SampledReader, sampling_available
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

pytestmark = pytest.mark.e2e
MiB = 1 << 20

# 1 GiB resident at the start of a 16 TiB MAP_NORESERVE reservation: 1 page in 16,384
_SPARSE = (
    "import mmap, sys, time\n"
    "m = mmap.mmap(-1, 16 << 40, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS"
    " | getattr(mmap, 'MAP_NORESERVE', 0x4000))\n"
    "m.madvise(mmap.MADV_NOHUGEPAGE, 0, 1 << 30)\n"
    "for i in range(0, 1 << 30, 4096): m[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)
_SMALL = "import time\nb = bytearray(80 << 20)\nprint('ready', flush=True)\ntime.sleep(120)\n"


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    ok, reason = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"move_pages unusable here: {reason}")
    procs = [subprocess.Popen([sys.executable, "-c", _SPARSE, "hostile-sparse"],
                              stdout=subprocess.PIPE)]
    procs += [subprocess.Popen([sys.executable, "-c", _SMALL, f"hostile-normal{i}"],
                               stdout=subprocess.PIPE) for i in range(3)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_sparse_reservation_costs_a_bounded_sample(children: list[subprocess.Popen[bytes]]
                                                     ) -> None:
    # the old fixed budget drew up to 615,000 page queries here (seconds per scan)
    cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 * MiB,
                 include=re.compile(r"hostile-(sparse|normal\d)$"), scan_interval=1.0,
                 scan_budget=0.7, policy_interval=0.0,  # no policy or quiet full reads:
                 policy_hold_budget=0.0)  # the sample is the subject
    scanner = Scanner(cfg, sampled=SampledReader())
    pids = {p.pid for p in children}
    sparse = children[0].pid
    methods = []
    for _ in range(3):
        snap = scanner.scan()
        read = {p.pid: p for p in snap.processes if p.pid in pids
                and p.last_scan_timestamp == max(q.last_scan_timestamp or 0
                                                 for q in snap.processes)}
        assert set(read) == pids  # every process, the hostile one too, every scan
        s = read[sparse]
        methods.append(s.method)
        if s.method == "sampled":
            # about what a full read of its 1 GiB is estimated to cost (8 ms at the default
            # 8 ms/GiB, 0.75 us a query: ~10,700) or measured to (at no less than 0.1875 us
            # a query: ~43,000)
            assert s.samples is not None and s.samples <= 60_000, s.samples
            # what the bounded sample could not place is said, not hidden
            assert s.unsampled_bytes is not None
            placed = sum(s.memory.values())
            assert placed + s.unsampled_bytes >= 0.9 * s.rss_bytes
    assert methods[0] == "sampled"  # one 16 TiB mapping with 1 GiB in it: the hold requires it


# 2 GiB written at the start of a 64 TiB MAP_NORESERVE reservation (issue 23): more present
# pages than the sampled reader's first PAGEMAP_SCAN narrowing reached (8 calls, 1 GiB)
_RESERVATION = (
    "import mmap, sys, time\n"
    "m = mmap.mmap(-1, 64 << 40, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)\n"
    "m.madvise(mmap.MADV_NOHUGEPAGE, 0, 2 << 30)\n"
    "for i in range(0, 2 << 30, 4096): m[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def reservation() -> Iterator[subprocess.Popen[bytes]]:
    ok, reason = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"move_pages unusable here: {reason}")
    p = subprocess.Popen([sys.executable, "-c", _RESERVATION, "hostile-reserve"],
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        if line != b"ready\n":
            pytest.skip("no 64 TiB MAP_NORESERVE reservation maps here")
        yield p
    finally:
        p.kill()
        p.wait()


def test_two_gib_in_a_64_tib_reservation_is_placed_every_scan(
        reservation: subprocess.Popen[bytes]) -> None:
    cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 * MiB,
                 include=re.compile(r"hostile-reserve$"), scan_interval=1.0,
                 policy_interval=0.0,  # no policy or quiet full reads: the sampled
                 policy_hold_budget=0.0)  # placement is the subject
    scanner = Scanner(cfg, sampled=SampledReader())
    for _ in range(3):
        snap = scanner.scan()
        (s,) = [p for p in snap.processes if p.pid == reservation.pid]
        assert s.method == "sampled"  # a 64 TiB mapping: the hold requires it
        placed = sum(s.memory.values())
        assert placed >= 0.9 * s.rss_bytes, (placed, s.unsampled_bytes, s.rss_bytes)


# 80 MiB anonymous and 3,000 memfds of distinct names (one written page each): a list whose
# text costs the kernel a d_path a line, read by PROCMAP_QUERY where the kernel has it
_MEMFDS = (
    "import ctypes, mmap, os, sys, time\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.mmap.restype = ctypes.c_void_p\n"
    "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,"
    " ctypes.c_int, ctypes.c_long]\n"
    "b = bytearray(80 << 20)\n"
    "for i in range(3000):\n"
    "    fd = os.memfd_create('hostile-memfd-%d' % i)\n"
    "    os.ftruncate(fd, 4096)\n"
    "    a = libc.mmap(None, 4096, 3, mmap.MAP_SHARED, fd, 0)\n"
    "    os.close(fd)\n"
    "    ctypes.memset(a, 1, 4096)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_process_of_many_memfds_is_placed_whichever_way_its_list_is_read() -> None:
    ok, reason = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"move_pages unusable here: {reason}")
    child = subprocess.Popen([sys.executable, "-c", _MEMFDS, "hostile-memfds"],
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        # a hold budget of 1 us: sampled whenever the hold allows nothing else
        cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 * MiB,
                     include=re.compile(r"hostile-memfds$"), hold_budget=1e-6,
                     policy_interval=0.0, policy_hold_budget=0.0)
        reader = SampledReader()
        scanner = Scanner(cfg, sampled=reader)
        shmem = 3000 * 4096
        for _ in range(4):
            (s,) = [p for p in scanner.scan().processes if p.pid == child.pid]
            assert s.method == "sampled"
            by_kind: dict[Kind, int] = {}
            for (_, kind), b in s.memory.items():
                by_kind[kind] = by_kind.get(kind, 0) + b
            # the memfds' pages are shmem and placed (3,000 pages: a census, exact)
            assert abs(by_kind.get(Kind.SHMEM, 0) - shmem) <= 0.05 * shmem, by_kind
            assert by_kind.get(Kind.ANON, 0) >= 70 * MiB, by_kind
        (costs,) = [kept.costs for (pid, _, _), kept in reader.frames._frames.items()
                    if pid == child.pid]
        if reader.frames.query_usable:  # 6.11+: the query was tried and measured
            assert costs.query is not None and costs.text is not None
    finally:
        child.kill()
        child.wait()
