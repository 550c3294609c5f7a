"""Sparse strata narrowed to their present runs (readers/sampled/sparse.py, PAGEMAP_SCAN)."""

from __future__ import annotations

import errno
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from numa_exporter.model.sampling import PlacementEstimate, StratumResult, make_stratum
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled import sparse as sampled_sparse
from numa_exporter.readers.sampled.reader import (
    SampledReader,
    SampledRequest,
    SampledSettings,
    read_sampled,
    sampling_available,
)
from numa_exporter.readers.sampled.sparse import (
    MIN_RANGE,
    is_sparse,
    narrow,
    narrow_strata,
    narrowed,
)
from numa_exporter.sources import pagemap_scan
from numa_exporter.sources.pagemap_scan import PagemapScan, PagemapScanUnsupported
from numa_exporter.sources.procfs import ProcFS

PAGE = 4096
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40


class FakePagemap:
    """Present pages given as runs; answers like the kernel: runs in order, at most
    ``max_pages`` present pages a call (the walk stops inside a run there)."""

    def __init__(self, runs: list[tuple[int, int]]) -> None:
        self.runs = runs
        self.calls = 0

    def present(self, start: int, end: int, max_pages: int
                ) -> tuple[list[tuple[int, int]], int]:
        self.calls += 1
        out, left = [], max_pages
        for a, b in self.runs:
            a, b = max(a, start), min(b, end)
            if b <= a:
                continue
            take = min((b - a) // PAGE, left)
            out.append((a, a + take * PAGE))
            left -= take
            if left == 0:
                return out, a + take * PAGE
        return out, end


SMALL = (0x10000000, 0x10000000 + MiB)
EMPTY = (0x7E0000000000, 0x7E0000000000 + TiB)
DENSE = (0x7F0000000000, 0x7F0000000000 + 128 * MiB)


def test_an_empty_reservation_goes_and_small_and_dense_ranges_stay() -> None:
    s = make_stratum(Kind.ANON, [SMALL, EMPTY, DENSE], PAGE)
    fake = FakePagemap([SMALL, (EMPTY[0] + 5 * PAGE, EMPTY[0] + 9 * PAGE), DENSE])
    resident = 128 * MiB + MiB + 4 * PAGE
    assert is_sparse(s, resident)
    got, used, _, _ = narrow(s, fake.present, 8, resident)
    # the biggest range first: the reservation shrinks to its one run of 4 pages, and the
    # stratum is then dense enough: the dense range is not scanned at all
    assert got.ranges == (SMALL, (EMPTY[0] + 5 * PAGE, EMPTY[0] + 9 * PAGE), DENSE)
    assert used == fake.calls == 1
    assert got.pages == (MiB + 128 * MiB) // PAGE + 4


def test_the_calls_are_bounded_and_the_rest_stays_virtual() -> None:
    lone = (EMPTY[0] + 3 * GiB, EMPTY[0] + 3 * GiB + 128 * MiB)  # 32768 pages
    s = make_stratum(Kind.ANON, [EMPTY], PAGE)
    fake = FakePagemap([(EMPTY[0], EMPTY[0] + 64 * MiB), lone])
    got, used, unscanned, _ = narrow(s, fake.present, 1, 128 * MiB)  # 32768 pages at most
    assert used == 1
    # the first run whole (16384 pages) and half of the second (16384 of 32768); the rest
    # of the reservation was never scanned: left out, a stratum of its own
    half = lone[0] + 64 * MiB
    assert got.ranges == ((EMPTY[0], EMPTY[0] + 64 * MiB), (lone[0], half))
    assert unscanned == EMPTY[1] - half


def test_nothing_present_leaves_the_stratum_as_it_was() -> None:
    s = make_stratum(Kind.ANON, [EMPTY], PAGE)
    got, used, unscanned, _ = narrow(s, FakePagemap([]).present, 8, GiB)
    assert got is s and used == 1 and unscanned == 0


def test_only_sparse_strata_are_narrowed_in_their_order() -> None:
    dense = make_stratum(Kind.FILE, [DENSE], PAGE)
    sparse = make_stratum(Kind.ANON, [EMPTY], PAGE)
    small = make_stratum(Kind.SHMEM, [SMALL], PAGE)  # sparse, but no big range
    strata = {Kind.FILE: dense, Kind.ANON: sparse, Kind.SHMEM: small}
    fake = FakePagemap([(EMPTY[0], EMPTY[0] + PAGE)])
    got, used, _ = narrow_strata(strata, {Kind.FILE: 128 * MiB, Kind.ANON: PAGE},
                                 fake.present)
    assert list(got) == [Kind.FILE, Kind.ANON, Kind.SHMEM]
    assert got[Kind.FILE] is dense and got[Kind.SHMEM] is small
    assert got[Kind.ANON].ranges == ((EMPTY[0], EMPTY[0] + PAGE),) and used == 1
    assert not is_sparse(small, 0) and MiB < MIN_RANGE


def test_without_pagemap_scan_the_strata_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoScan:
        def __init__(self, mm_dir: str) -> None:
            raise PagemapScanUnsupported("old kernel")

    monkeypatch.setattr(sampled_sparse, "PagemapScan", NoScan)
    scans = sampled_sparse.ScanCache()
    strata = {Kind.ANON: make_stratum(Kind.ANON, [EMPTY], PAGE)}
    assert narrowed("/proc/self", strata, {Kind.ANON: PAGE}, scans) == (strata, {})
    assert scans.usable is False  # asked once, not every read


CHILD = textwrap.dedent("""
    import mmap, os, sys
    m = mmap.mmap(-1, 1 << 40, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)
    for i in range(0, 256 << 20, 4096):  # 256 MiB at the start of a 1 TiB reservation
        m[i] = 1
    print("ready", flush=True)
    os.read(0, 1)
""")


@pytest.fixture
def sparse_child() -> Iterator[subprocess.Popen[str]]:
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampling unavailable here: {why}")
    try:
        with PagemapScan("/proc/self") as scan:
            scan.present(0x10000, 0x20000, 1)
    except PagemapScanUnsupported as exc:
        pytest.skip(f"no PAGEMAP_SCAN here: {exc}")
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


def test_a_bounded_sample_places_a_sparse_reservation(
        sparse_child: subprocess.Popen[str]) -> None:
    pf = ProcFS(Path("/proc")).process(sparse_child.pid)
    st = parse_pid_status(pf.status())
    rss = (st.rss_anon or 0) + (st.rss_file or 0) + (st.rss_shmem or 0)
    # 2,000 queries: drawn over 1 TiB, 1 in 4,096 is resident (the old reader placed
    # next to nothing and said so in unsampled_bytes)
    blind = read_sampled(pf, st, SampledRequest(rng=random.Random(1), max_queries=2000),
                         SampledSettings(narrow=False))
    assert blind.unsampled_bytes > 0.8 * rss
    est = read_sampled(pf, st, SampledRequest(rng=random.Random(1), max_queries=2000))
    assert est.total_bytes >= 0.9 * rss and est.unsampled_bytes < 0.1 * rss
    anon = next(x for x in est.strata if x.kind is Kind.ANON)
    assert anon.resident >= 0.9 * anon.queried  # drawn where the pages are


def test_a_dense_range_costs_one_call_when_it_cannot_be_the_reservation() -> None:
    # 1 GiB written in a 1 GiB mapping among 500 empty 8 MiB thread stacks: sparse, but the
    # only big range is dense and no bigger than 4 x the resident bytes: one call, kept
    stacks = [(0x7E0000000000 + i * 9 * MiB, 0x7E0000000000 + i * 9 * MiB + 8 * MiB)
              for i in range(500)]
    dense = (0x7F0000000000, 0x7F0000000000 + GiB)
    s = make_stratum(Kind.ANON, [*stacks, dense], PAGE)
    fake = FakePagemap([dense])
    got, used, unscanned, _ = narrow(s, fake.present, 8, GiB)
    assert used == 1 and unscanned == 0
    assert got.pages == s.pages  # the present 128 MiB and the rest, still virtual


def test_a_reservation_is_scanned_past_its_dense_start() -> None:
    # the hostile shape: 512 MiB written at the start of one 16 TiB mapping: each call
    # finds a dense 128 MiB, but the range is far bigger than the resident bytes allow
    big = (0x7E0000000000, 0x7E0000000000 + 16 * TiB)
    s = make_stratum(Kind.ANON, [big], PAGE)
    fake = FakePagemap([(big[0], big[0] + 512 * MiB)])
    got, used, _, _ = narrow(s, fake.present, 8, 512 * MiB)
    assert used == 5  # four of 128 MiB, one that walks the rest and finds nothing
    assert got.pages == 512 * MiB // PAGE


def test_a_reservation_is_scanned_on_across_reads_and_its_runs_reused() -> None:
    # 1 GiB dense and then 64 spread pages in a 16 TiB reservation, 3 calls a read: the
    # scan goes on where the last read stopped; the part never scanned is left out
    big = (0x7E0000000000, 0x7E0000000000 + 16 * TiB)
    spread = [(big[0] + 2 * GiB + i * GiB, big[0] + 2 * GiB + i * GiB + PAGE)
              for i in range(64)]
    fake = FakePagemap([(big[0], big[0] + GiB), *spread])
    s = make_stratum(Kind.ANON, [big], PAGE)
    state: sampled_sparse.ScanState = {}
    resident = GiB + 64 * PAGE
    first = narrow(s, fake.present, 3, resident, state)
    assert first.stratum.ranges == ((big[0], big[0] + 3 * 128 * MiB),)
    assert first.unscanned == big[1] - (big[0] + 3 * 128 * MiB)
    assert first.present == 3 * 128 * MiB
    reads = [narrow(s, fake.present, 3, resident, state) for _ in range(2)]
    # 8 calls find the dense GiB, the ninth walks the rest and finds the spread pages
    assert [r.calls for r in reads] == [3, 3]
    assert [r.unscanned > 0 for r in reads] == [True, False]
    assert reads[-1].stratum.ranges == ((big[0], big[0] + GiB), *spread)
    # the next read starts a new pass; what it did not reach yet is the last pass's
    again = narrow(s, fake.present, 1, resident, state)
    assert again.unscanned == 0 and again.stratum.ranges == reads[-1].stratum.ranges
    # a changed mapping (another end) is scanned afresh
    moved = make_stratum(Kind.ANON, [(big[0], big[1] - GiB)], PAGE)
    got, _, _ = narrow_strata({Kind.ANON: moved}, {Kind.ANON: resident}, fake.present, 1,
                              state)
    assert list(state) == [(big[0], big[1] - GiB)]
    assert got[Kind.ANON].ranges == ((big[0], big[0] + 128 * MiB),)


def test_runs_beyond_the_bound_are_joined_across_their_smallest_gaps() -> None:
    runs = [(i * 3 * PAGE, i * 3 * PAGE + PAGE) for i in range(8)]
    got = sampled_sparse._coarsen(runs, 4, PAGE)
    assert len(got) <= 4 and got[0][0] == 0 and got[-1][1] == runs[-1][1]
    assert all(any(x <= a and b <= y for x, y in got) for a, b in runs)


RESERVATION = textwrap.dedent("""
    import mmap, os, sys
    size, dense = int(sys.argv[1]), int(sys.argv[2])
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)
    for i in range(0, dense, 4096):  # dense at the start of the reservation
        m[i] = 1
    print("ready", flush=True)
    os.read(0, 1)
""")


@pytest.fixture
def reservation_child() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A child with 2 GiB written at the start of a 64 TiB MAP_NORESERVE reservation
    (MAP_NORESERVE is not accounted at vm.overcommit_memory 0 or 1; where the address
    space is smaller, the largest of 64, 16, 4 TiB that maps)."""
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampling unavailable here: {why}")
    try:
        with PagemapScan("/proc/self") as scan:
            scan.present(0x10000, 0x20000, 1)
    except PagemapScanUnsupported as exc:
        pytest.skip(f"no PAGEMAP_SCAN here: {exc}")
    for size in (64 * TiB, 16 * TiB, 4 * TiB):
        p = subprocess.Popen([sys.executable, "-c", RESERVATION, str(size), str(2 * GiB)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        if p.stdout.readline().strip() == "ready":
            break
        p.wait(timeout=30)
    else:
        pytest.skip("no reservation of 4 TiB or more maps here")
    yield p, size
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


def test_two_gib_dense_in_a_huge_reservation_is_placed_in_every_read(
        reservation_child: tuple[subprocess.Popen[str], int]) -> None:
    # the case: more present pages than the old 8 calls reached (1 GiB); each read
    # of the sampled reader, as the scan makes them, must place >= 90 % of the bytes
    child, size = reservation_child
    assert size >= 4 * TiB
    pf = ProcFS(Path("/proc")).process(child.pid)
    reader = SampledReader()
    for seed in range(4):
        st = parse_pid_status(pf.status())
        rss = (st.rss_anon or 0) + (st.rss_file or 0) + (st.rss_shmem or 0)
        assert (st.rss_anon or 0) >= 2 * GiB
        est = reader.read(pf, st, SampledRequest(rng=random.Random(seed), max_queries=2000))
        assert est.total_bytes >= 0.9 * rss, (seed, est.total_bytes, est.unsampled_bytes)


def test_the_bytes_an_unscanned_part_may_hold_are_reported_unsampled() -> None:
    # 1,000 of 4,000 queried pages resident over 1 GiB drawn: 256 MiB found; status counts
    # 1 GiB of anon, so 768 MiB may lie in the part never scanned: taken off the placed
    # bytes (node shares kept) and reported unsampled
    res = StratumResult(Kind.ANON, GiB // PAGE, 4000, 1000, ((0, 750), (1, 250)), False, GiB)
    est = PlacementEstimate(bytes={(0, Kind.ANON): 768 * MiB, (1, Kind.ANON): 256 * MiB,
                                   (0, Kind.FILE): MiB},
                            strata=(res,), unsampled_bytes=PAGE)
    left = sampled_sparse.Unscanned
    got = sampled_sparse.set_aside(est, {Kind.ANON: left(TiB, 0)}, {Kind.ANON: GiB}, PAGE)
    assert got.bytes == {(0, Kind.ANON): 192 * MiB, (1, Kind.ANON): 64 * MiB,
                         (0, Kind.FILE): MiB}
    assert got.unsampled_bytes == PAGE + 768 * MiB
    # no more than the unscanned part's virtual bytes
    small = sampled_sparse.set_aside(est, {Kind.ANON: left(512 * MiB, 0)}, {Kind.ANON: GiB},
                                     PAGE)
    assert small.unsampled_bytes == PAGE + 512 * MiB
    # the present bytes the scans found count as found where the sample saw fewer
    seen = sampled_sparse.set_aside(est, {Kind.ANON: left(TiB, 768 * MiB)},
                                    {Kind.ANON: GiB}, PAGE)
    assert seen.unsampled_bytes == PAGE + 256 * MiB
    assert sampled_sparse.set_aside(est, {}, {Kind.ANON: GiB}, PAGE) is est


def test_a_kernel_without_the_ioctl_answers_enotty_and_nothing_is_narrowed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Linux 6.1: /proc/<pid>/pagemap opens, the ioctl answers ENOTTY: no narrowing, no
    # bytes set aside, and the kernel is not asked again
    calls = []

    def enotty(fd: int, request: int, arg: bytearray, mutate: bool) -> int:
        calls.append(request)
        raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

    monkeypatch.setattr(pagemap_scan.fcntl, "ioctl", enotty)
    scans = sampled_sparse.ScanCache()
    strata = {Kind.ANON: make_stratum(Kind.ANON, [EMPTY], PAGE)}
    state: sampled_sparse.ScanState = {}
    assert narrowed("/proc/self", strata, {Kind.ANON: PAGE}, scans, state) == (strata, {})
    assert narrowed("/proc/self", strata, {Kind.ANON: PAGE}, scans, state) == (strata, {})
    assert len(calls) == 1 and scans.usable is False


def test_the_scan_cache_is_bounded_in_runs_and_processes() -> None:
    cache = sampled_sparse.ScanCache(max_entries=3, max_runs=10)
    for pid in (1, 2, 3):
        cache.state(pid)[(pid, pid + 1)] = sampled_sparse.RangeScan(
            0, 1 << 30, [(i * 2 * PAGE, (i * 2 + 1) * PAGE) for i in range(4)])
    # 12 runs kept for 3 pids: asking for a fourth drops the oldest until both fit
    assert cache.runs() == 12
    cache.state(4)
    assert cache.runs() <= 10 and 1 not in cache._states and 4 in cache._states
    # asking for a kept one keeps it (the newest now) and what it holds
    assert list(cache.state(3)) == [(3, 4)]
    assert list(cache._states)[-1] == 3


THIN_CHILD = textwrap.dedent("""
    import mmap, os, sys
    m = mmap.mmap(-1, 2 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)
    for i in range(0, 2 << 30, 256 << 10):  # one page in 64, spread over 2 GiB
        m[i] = 1
    print("ready", flush=True)
    os.read(0, 1)
""")


@pytest.fixture
def thin_child() -> Iterator[subprocess.Popen[str]]:
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampling unavailable here: {why}")
    p = subprocess.Popen([sys.executable, "-c", THIN_CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


def _anon_hits(reader: SampledReader, pid: int, reads: int) -> list[float]:
    """Return, per read, the share of the anon stratum's queried pages that were resident
    (the carried reads off: each read on its own)."""
    pf = ProcFS(Path("/proc")).process(pid)
    out = []
    for seed in range(reads):
        est = reader.read(pf, parse_pid_status(pf.status()),
                          SampledRequest(rng=random.Random(seed), max_queries=3000))
        anon = next(x for x in est.strata if x.kind is Kind.ANON)
        out.append(anon.resident / max(anon.queried, 1))
    return out


def test_without_pagemap_scan_a_thin_mapping_is_narrowed_from_pagemap(
        thin_child: subprocess.Popen[str]) -> None:
    # Linux 6.1 (no PAGEMAP_SCAN): present pages spread thinly over 2 GiB were drawn
    # uniformly, 1 in 64 resident, read after read. Read from the pagemap entries (1 GiB a
    # read), the runs cover the mapping after two reads and the draws land on its pages.
    blind = SampledReader(SampledSettings(pagemap_read=False))
    blind.scans.usable = False
    assert max(_anon_hits(blind, thin_child.pid, 3)) < 0.2
    reader = SampledReader()
    reader.scans.usable = False  # as on a kernel that answered ENOTTY
    hits = _anon_hits(reader, thin_child.pid, 3)
    assert hits[-1] > 0.8, hits
    # nothing set aside: the part not read yet stayed in the stratum
    pf = ProcFS(Path("/proc")).process(thin_child.pid)
    st = parse_pid_status(pf.status())
    est = SampledReader()
    est.scans.usable = False
    first = est.read(pf, st, SampledRequest(rng=random.Random(9), max_queries=3000))
    assert first.unsampled_bytes < 0.05 * (st.rss_anon or 0)


def test_pagemap_present_reads_runs_and_stops_at_its_bound() -> None:
    class Entries:
        """A pagemap of pages 10-11 and 40 present, from page 0."""

        def __init__(self) -> None:
            self.asked: list[tuple[int, int]] = []

        def entries(self, first: int, pages: int) -> bytes:
            self.asked.append((first, pages))
            present = {10, 11, 40}
            return b"".join(((1 << 63) if p in present else 0).to_bytes(8, "little")
                            for p in range(first, first + min(pages, 32)))

    pm = Entries()
    present = sampled_sparse.pagemap_present(pm, PAGE)  # type: ignore[arg-type]
    runs, end = present(0, 100 * PAGE, 1)
    assert runs == [(10 * PAGE, 12 * PAGE)] and end == 32 * PAGE  # a short read: so far
    runs, end = present(32 * PAGE, 100 * PAGE, 1)
    assert runs == [(40 * PAGE, 41 * PAGE)] and end == 64 * PAGE
