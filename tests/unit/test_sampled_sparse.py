"""Sparse strata narrowed to their present runs (readers/sampled_sparse.py, PAGEMAP_SCAN)."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from numa_exporter.model.sampling import make_stratum
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers import sampled_sparse
from numa_exporter.readers.sampled_placement import read_sampled, sampling_available
from numa_exporter.readers.sampled_sparse import (
    MIN_RANGE,
    is_sparse,
    narrow,
    narrow_strata,
    narrowed,
)
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
    got, used = narrow(s, fake.present, 8, resident)
    # the biggest range first: the reservation shrinks to its one run of 4 pages, and the
    # stratum is then dense enough: the dense range is not scanned at all
    assert got.ranges == (SMALL, (EMPTY[0] + 5 * PAGE, EMPTY[0] + 9 * PAGE), DENSE)
    assert used == fake.calls == 1
    assert got.pages == (MiB + 128 * MiB) // PAGE + 4


def test_the_calls_are_bounded_and_the_rest_stays_virtual() -> None:
    lone = (EMPTY[0] + 3 * GiB, EMPTY[0] + 3 * GiB + 128 * MiB)  # 32768 pages
    s = make_stratum(Kind.ANON, [EMPTY], PAGE)
    fake = FakePagemap([(EMPTY[0], EMPTY[0] + 64 * MiB), lone])
    got, used = narrow(s, fake.present, 1, 128 * MiB)  # one call: 32768 pages at most
    assert used == 1
    # the first run whole (16384 pages) and half of the second (16384 of 32768); from
    # there on the range is virtual
    half = lone[0] + 64 * MiB
    assert got.ranges[:2] == ((EMPTY[0], EMPTY[0] + 64 * MiB), (lone[0], half))
    assert got.ranges[2] == (half, EMPTY[1])


def test_nothing_present_leaves_the_stratum_as_it_was() -> None:
    s = make_stratum(Kind.ANON, [EMPTY], PAGE)
    got, used = narrow(s, FakePagemap([]).present, 8, GiB)
    assert got is s and used == 1


def test_only_sparse_strata_are_narrowed_in_their_order() -> None:
    dense = make_stratum(Kind.FILE, [DENSE], PAGE)
    sparse = make_stratum(Kind.ANON, [EMPTY], PAGE)
    small = make_stratum(Kind.SHMEM, [SMALL], PAGE)  # sparse, but no big range
    strata = {Kind.FILE: dense, Kind.ANON: sparse, Kind.SHMEM: small}
    fake = FakePagemap([(EMPTY[0], EMPTY[0] + PAGE)])
    got, used = narrow_strata(strata, {Kind.FILE: 128 * MiB, Kind.ANON: PAGE}, fake.present)
    assert list(got) == [Kind.FILE, Kind.ANON, Kind.SHMEM]
    assert got[Kind.FILE] is dense and got[Kind.SHMEM] is small
    assert got[Kind.ANON].ranges == ((EMPTY[0], EMPTY[0] + PAGE),) and used == 1
    assert not is_sparse(small, 0) and MiB < MIN_RANGE


def test_without_pagemap_scan_the_strata_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoScan:
        def __init__(self, mm_dir: str) -> None:
            raise PagemapScanUnsupported("old kernel")

    monkeypatch.setattr(sampled_sparse, "PagemapScan", NoScan)
    monkeypatch.setattr(sampled_sparse._Availability, "usable", None)
    strata = {Kind.ANON: make_stratum(Kind.ANON, [EMPTY], PAGE)}
    assert narrowed("/proc/self", strata, {Kind.ANON: PAGE}) is strata
    assert sampled_sparse._Availability.usable is False  # asked once, not every read


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
    blind = read_sampled(pf, st, rng=random.Random(1), max_queries=2000, narrow=False)
    assert blind.unsampled_bytes > 0.8 * rss
    est = read_sampled(pf, st, rng=random.Random(1), max_queries=2000)
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
    got, used = narrow(s, fake.present, 8, GiB)
    assert used == 1
    assert got.pages == s.pages  # the present 128 MiB and the rest, still virtual


def test_a_reservation_is_scanned_past_its_dense_start() -> None:
    # the hostile shape: 512 MiB written at the start of one 16 TiB mapping: each call
    # finds a dense 128 MiB, but the range is far bigger than the resident bytes allow
    big = (0x7E0000000000, 0x7E0000000000 + 16 * TiB)
    s = make_stratum(Kind.ANON, [big], PAGE)
    fake = FakePagemap([(big[0], big[0] + 512 * MiB)])
    got, used = narrow(s, fake.present, 8, 512 * MiB)
    assert used == 5  # four of 128 MiB, one that walks the rest and finds nothing
    assert got.pages == 512 * MiB // PAGE
