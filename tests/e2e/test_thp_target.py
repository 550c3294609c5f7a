"""A real THP-backed process on this machine's /proc, read by the scanner with the real
sampled reader (issue 14): its big mapping is walked a step per 2 MiB, so the full read is
chosen from the first scan and kept; the same size of 4 KiB pages stays sampled."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from numa_exporter.config import Config
from numa_exporter.readers.page_sizes import probe_page_sizes
from numa_exporter.readers.sampled.reader import SampledReader, sampling_available
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

pytestmark = pytest.mark.e2e
MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
CAP_SYS_ADMIN = 21
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")

_TARGET = (
    "import mmap, sys, time\n"
    "m = mmap.mmap(-1, 1 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "m.madvise(getattr(mmap, sys.argv[1]))\n"
    "for i in range(0, 1 << 30, 4096): m[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def _anon_huge(pid: int) -> int:
    """Return the AnonHugePages bytes of a process (smaps_rollup; 0 when absent)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.fixture
def targets() -> Iterator[tuple[int, int]]:
    """Yield the pids of a 1 GiB THP-backed process and a 1 GiB 4 KiB-page one."""
    ok, reason = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"move_pages unusable here: {reason}")
    if not THP_ENABLED.exists() or "[never]" in THP_ENABLED.read_text():
        pytest.skip("this kernel has transparent huge pages off (or none)")
    procs = [subprocess.Popen([sys.executable, "-c", _TARGET, advice, f"thp-target-{name}"],
                              stdout=subprocess.PIPE)
             for advice, name in (("MADV_HUGEPAGE", "huge"), ("MADV_NOHUGEPAGE", "small"))]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        if _anon_huge(procs[0].pid) < 900 * MiB:
            pytest.skip(f"the kernel gave only {_anon_huge(procs[0].pid) >> 20} MiB of THP "
                        "for a 1 GiB MADV_HUGEPAGE mapping (fragmented memory?)")
        proc = ProcFS(Path("/proc"))
        _, problem = probe_page_sizes(proc.process(procs[0].pid), proc, 1 << 30, 0.0,
                                      page_size=PAGE)
        if problem is not None:
            pytest.skip(f"page sizes cannot be seen here: {problem}")
        yield procs[0].pid, procs[1].pid
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_thp_target_keeps_the_full_read_and_a_4k_one_is_sampled(
        targets: tuple[int, int]) -> None:
    huge, small = targets
    cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 * MiB,
                 include=re.compile(r"thp-target-(huge|small)$"), scan_interval=1.0,
                 policy_interval=0.0,  # reader choice by hold and cost only: no policy
                 policy_hold_budget=0.0)  # or quiet full reads
    scanner = Scanner(cfg, sampled=SampledReader())
    seen: dict[int, list[tuple[str, str | None]]] = {huge: [], small: []}
    for _ in range(3):
        for p in scanner.scan().processes:
            if p.pid in seen:
                seen[p.pid].append((p.method, p.placement_reason))
    # before the probe both counted as 1 GiB of 4 KiB pages (8 ms > the 5 ms hold budget)
    assert seen[huge] == [("full", "cheaper")] * 3
    assert seen[small] == [("sampled", "hold")] * 3


def _without_cap_sys_admin() -> None:
    """Drop CAP_SYS_ADMIN from this process's effective set (capset(2), version 3)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0] &= ~(1 << CAP_SYS_ADMIN)  # effective, first 32 capabilities
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _probe_in_child(pid: int, scan: bool) -> tuple[int, int, str | None]:
    """Return (huge probes, probes, problem) of the largest mapping of ``pid``, probed by
    a forked child without CAP_SYS_ADMIN (by PAGEMAP_SCAN, or by pagemap and kpageflags
    when ``scan`` is False)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.close(r)
            _without_cap_sys_admin()
            if not scan:
                ProcessFiles.pagemap_scan = lambda self, pages, size: None  # type: ignore
            proc = ProcFS(Path("/proc"))
            shape, problem = probe_page_sizes(proc.process(pid), proc, 1 << 30, 0.0,
                                              page_size=PAGE)
            m = shape.mappings[0]
            os.write(w, json.dumps([m.huge, m.probes, problem and str(problem)]).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        got = fh.read()
    os.waitpid(child, 0)
    huge, probes, problem = json.loads(got)
    return huge, probes, problem


def test_without_cap_sys_admin_pagemap_scan_still_sees_the_huge_pages(
        targets: tuple[int, int]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop CAP_SYS_ADMIN and still open the targets' pagemap")
    huge, small = targets
    got, probes, problem = _probe_in_child(huge, scan=True)
    if problem is None and got == 0:
        pytest.skip("this kernel has no PAGEMAP_SCAN (before 6.7)")
    assert (got, problem) == (probes, None)
    assert _probe_in_child(small, scan=True)[0] == 0
    # the fallback cannot see frames without CAP_SYS_ADMIN: every page counts small
    got, _, problem = _probe_in_child(huge, scan=False)
    assert got == 0 and problem is not None and "CAP_SYS_ADMIN" in problem
