"""Sample design and estimator against synthetic processes whose every page is known.

The fake process decides each page's node (or absence) from its address with a fixed
hash, so the exact numa_maps-style totals can be computed by brute force over every page and
compared with the estimate.
"""

from __future__ import annotations

import errno
import math
import random
import statistics
from collections.abc import Sequence

import pytest

from numa_exporter.model.sampling import (
    PlacementEstimate,
    StratumResult,
    build_strata,
    estimate_placement,
    sample_size,
    target_stderr,
)
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_maps import MapsEntry
from numa_exporter.sources.deadline import Deadline, Expired

PAGE = 4096
MiB = 1 << 20
GiB = 1 << 30
ENOENT = -errno.ENOENT
M64 = (1 << 64) - 1


def _u(addr: int, salt: int) -> float:
    """Return a fixed pseudo-random number in [0, 1) for a page (splitmix64 finaliser)."""
    x = ((addr // PAGE) * 0x9E3779B97F4A7C15 + salt * 0xD1B54A32D192ED03) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return (x ^ (x >> 31)) / (1 << 64)


class FakeProcess:
    """Mappings with a resident fraction and a per-node split each; pages decided by hash."""

    def __init__(self) -> None:
        self.entries: list[MapsEntry] = []
        self.layout: list[tuple[int, int, Kind, float, dict[int, float]]] = []
        self.queried = 0
        self._truth: dict[tuple[int, Kind], int] | None = None
        self._next = 0x7F0000000000

    def add(self, size: int, kind: Kind, resident: float, nodes: dict[int, float],
            path: str | None = None, perms: str = "rw-p") -> None:
        start = self._next
        self._next += size + 16 * PAGE  # a hole between mappings
        if path is None and kind is Kind.FILE:
            path = f"/data/file{len(self.entries)}"
        if path is None and kind is Kind.SHMEM:
            path = f"/dev/shm/seg{len(self.entries)}"
        self.entries.append(MapsEntry(start, start + size, perms, 0, 0, 0, 0, path))
        self.layout.append((start, start + size, kind, resident, nodes))
        self._truth = None

    def status(self, addr: int) -> int:
        for start, end, _, resident, nodes in self.layout:
            if start <= addr < end:
                if _u(addr, 1) >= resident:
                    return ENOENT
                x = _u(addr, 2)
                acc = 0.0
                for node, share in sorted(nodes.items()):
                    acc += share
                    if x < acc:
                        return node
                return max(nodes)
        return -errno.EFAULT

    def query(self, addrs: Sequence[int]) -> list[int]:
        self.queried += len(addrs)
        return [self.status(a) for a in addrs]

    def truth(self) -> dict[tuple[int, Kind], int]:
        """Return exact bytes per (node, kind), page by page."""
        if self._truth is not None:
            return self._truth
        out: dict[tuple[int, Kind], int] = {}
        for start, end, kind, _, _ in self.layout:
            for a in range(start, end, PAGE):
                st = self.status(a)
                if st >= 0:
                    out[(st, kind)] = out.get((st, kind), 0) + PAGE
        self._truth = out
        return out

    def totals(self) -> dict[Kind, int]:
        out = {k: 0 for k in Kind}
        for (_, kind), b in self.truth().items():
            out[kind] += b
        return out


def ratio(b: dict[tuple[int, Kind], int], home: frozenset[int]) -> float:
    tot = sum(b.values())
    return sum(v for (n, _), v in b.items() if n not in home) / tot if tot else 0.0


def run(p: FakeProcess, seed: int, totals: dict[Kind, int] | None = None,
        **kw: object) -> PlacementEstimate:
    strata = build_strata(p.entries, PAGE)
    return estimate_placement(strata, totals if totals is not None else p.totals(), p.query,
                              rng=random.Random(seed), **kw)  # type: ignore[arg-type]


def test_sample_size_for_one_point_at_95_percent() -> None:
    # (1.959964 / 0.01)^2 / 4 = 9603.6
    assert sample_size(0.01, 0.95) == 9604
    assert sample_size(0.02, 0.95) == 2401
    assert math.isclose(target_stderr(0.01), 0.0051021, rel_tol=1e-4)
    with pytest.raises(ValueError):
        sample_size(0.0)


def test_small_strata_are_counted_exactly() -> None:
    p = FakeProcess()
    p.add(8 * MiB, Kind.ANON, 0.7, {0: 0.5, 1: 0.5})
    p.add(4 * MiB, Kind.FILE, 0.3, {1: 1.0})
    est = run(p, 1)
    assert est.bytes == p.truth()
    assert all(s.census for s in est.strata)
    assert est.samples == 3 * 1024  # every page once
    assert est.remote_ratio_stderr(frozenset({0})) == 0.0


def test_stratified_shares_scaled_to_status_totals() -> None:
    p = FakeProcess()
    p.add(1 * GiB, Kind.ANON, 0.9, {0: 0.2, 1: 0.8})
    p.add(256 * MiB, Kind.SHMEM, 1.0, {0: 1.0})
    p.add(16 * MiB, Kind.FILE, 0.5, {0: 0.5, 1: 0.5})
    truth = p.truth()
    est = run(p, 7)
    by = {s.kind: s for s in est.strata}
    assert by[Kind.FILE].census and not by[Kind.ANON].census and not by[Kind.SHMEM].census
    # Each kind's bytes are exactly its status total (file is counted, the others scaled).
    totals = p.totals()
    for kind in Kind:
        got = sum(v for (_, k), v in est.bytes.items() if k is kind)
        assert got == totals[kind], kind
    # Per (node, kind) within 3 % of the kind's bytes; no node the process does not use.
    assert set(est.bytes) <= set(truth)
    for key, b in truth.items():
        assert abs(est.bytes.get(key, 0) - b) <= 0.03 * totals[key[1]], key
    # Far fewer pages queried than a census, and the quota of resident samples was met.
    assert est.samples < 0.05 * (1280 * MiB // PAGE)
    assert est.resident_samples >= sample_size() * 0.95
    assert not est.budget_exhausted


def test_allocation_is_proportional_to_stratum_bytes() -> None:
    p = FakeProcess()
    p.add(1 * GiB, Kind.ANON, 1.0, {0: 0.5, 1: 0.5})
    p.add(256 * MiB, Kind.SHMEM, 1.0, {0: 0.5, 1: 0.5})
    est = run(p, 3)
    by = {s.kind: s for s in est.strata}
    share = by[Kind.ANON].resident / (by[Kind.ANON].resident + by[Kind.SHMEM].resident)
    assert 0.78 <= share <= 0.82  # 1 GiB of 1.25 GiB


def test_non_resident_samples_are_not_evidence() -> None:
    """A sparse mapping (3 % resident): quotas count resident samples only; shares unbiased."""
    p = FakeProcess()
    p.add(4 * GiB, Kind.ANON, 0.03, {0: 0.3, 1: 0.7})
    est = run(p, 11)
    s = est.strata[0]
    assert s.resident >= sample_size() * 0.99
    assert s.queried > 20 * s.resident  # most queries found nothing
    truth = p.truth()
    assert abs(est.remote_ratio(frozenset({0})) - ratio(truth, frozenset({0}))) < 0.015


def test_budget_exhaustion_is_reported_and_widens_the_error() -> None:
    p = FakeProcess()
    p.add(4 * GiB, Kind.ANON, 0.01, {0: 0.5, 1: 0.5})
    est = run(p, 5, max_queries=50_000)
    assert est.budget_exhausted
    assert est.samples <= 50_000 + 4096
    assert est.resident_samples < sample_size()
    assert est.remote_ratio_stderr(frozenset({0})) > target_stderr()


def test_status_bytes_without_any_mapping_are_unsampled() -> None:
    p = FakeProcess()
    p.add(512 * MiB, Kind.ANON, 1.0, {1: 1.0})
    totals = p.totals()
    totals[Kind.SHMEM] = 64 * MiB  # the status counts shmem, but maps shows none
    est = run(p, 2, totals=totals)
    assert est.unsampled_bytes == 64 * MiB
    assert est.bytes == {(1, Kind.ANON): 512 * MiB}


def test_census_bytes_are_not_counted_twice() -> None:
    """Copy-on-write pages of a private file mapping: status says anon, numa_maps file."""
    p = FakeProcess()
    p.add(1 * GiB, Kind.ANON, 1.0, {0: 1.0})
    p.add(8 * MiB, Kind.FILE, 1.0, {1: 1.0})
    totals = p.totals()
    totals[Kind.ANON] += 4 * MiB  # 4 MiB of the file mapping were written: RssAnon
    totals[Kind.FILE] -= 4 * MiB
    est = run(p, 4, totals=totals)
    assert est.bytes[(1, Kind.FILE)] == 8 * MiB
    assert est.bytes[(0, Kind.ANON)] == 1 * GiB
    assert est.total_bytes == sum(totals.values())


def test_nothing_resident_anywhere() -> None:
    p = FakeProcess()
    p.add(1 * GiB, Kind.ANON, 0.0, {0: 1.0})
    est = run(p, 1, totals={Kind.ANON: 10 * MiB}, max_queries=20_000)
    assert est.bytes == {} and est.unsampled_bytes == 10 * MiB and est.budget_exhausted
    assert est.remote_ratio(frozenset({0})) == 0.0


def test_query_errors_other_than_absent_are_counted() -> None:
    p = FakeProcess()
    p.add(4 * MiB, Kind.ANON, 1.0, {0: 1.0})

    def q(addrs: Sequence[int]) -> list[int]:
        return [-errno.EACCES if i % 2 else 0 for i, _ in enumerate(addrs)]

    est = estimate_placement(build_strata(p.entries, PAGE), p.totals(), q)
    assert est.other_errors == 512 and est.resident_samples == 512


def test_short_answers_from_the_query_are_padded() -> None:
    p = FakeProcess()
    p.add(4 * MiB, Kind.ANON, 1.0, {0: 1.0})
    est = estimate_placement(build_strata(p.entries, PAGE), p.totals(),
                             lambda a: [0] * (len(a) // 2))
    assert est.samples == 1024 and est.resident_samples == 512


def test_stderr_formula_by_hand() -> None:
    est = PlacementEstimate(
        bytes={(0, Kind.ANON): 30, (1, Kind.ANON): 70, (0, Kind.FILE): 100},
        strata=(
            StratumResult(Kind.ANON, 10**6, 150, 100, ((0, 30), (1, 70)), False, 100),
            StratumResult(Kind.FILE, 100, 100, 25, ((0, 25),), True, 100),
        ),
    )
    # w = 100/200; r = 0.7; var = 0.25 * 0.21 / 100
    assert math.isclose(est.remote_ratio_stderr(frozenset({0})), math.sqrt(0.000525))
    assert math.isclose(est.remote_ratio(frozenset({0})), 0.35)
    assert est.remote_ratio_stderr(frozenset({0, 1})) == 0.0


def _mixed_process() -> FakeProcess:
    p = FakeProcess()
    p.add(1 * GiB, Kind.ANON, 0.6, {0: 0.75, 1: 0.25})
    p.add(256 * MiB, Kind.SHMEM, 1.0, {0: 0.1, 1: 0.9})
    p.add(512 * MiB, Kind.FILE, 0.2, {0: 0.5, 1: 0.3, 2: 0.2})
    p.add(64 * MiB, Kind.FILE, 1.0, {0: 1.0}, path="/usr/lib/libbig.so")
    return p


def _simulate(p: FakeProcess, runs: int, target: float) -> tuple[list[float], list[float]]:
    home = frozenset({0})
    truth = ratio(p.truth(), home)
    errs, ses = [], []
    for seed in range(runs):
        est = run(p, 1000 + seed, target_error=target)
        errs.append(est.remote_ratio(home) - truth)
        ses.append(est.remote_ratio_stderr(home))
    return errs, ses


def test_empirical_error_within_the_stated_bound() -> None:
    """Over many seeded runs the error of the remote ratio stays within the design bound:
    its spread is at most the target standard error and >= 95 % of runs land within the
    target error; the reported standard error matches the spread actually seen."""
    target = 0.02  # 2401 samples per run keeps the simulation quick; the bound scales
    errs, ses = _simulate(_mixed_process(), 150, target)
    sd = statistics.pstdev(errs)
    bias = statistics.fmean(errs)
    assert sd <= target_stderr(target), (sd, target_stderr(target))
    assert abs(bias) < 3 * sd / math.sqrt(len(errs)) + 1e-4, bias
    within = sum(abs(e) <= target for e in errs) / len(errs)
    assert within >= 0.95, within
    mean_se = statistics.fmean(ses)
    assert 0.8 * sd <= mean_se <= 1.25 * sd, (mean_se, sd)


def test_default_target_one_point() -> None:
    """A few runs at the default (1 point at 95 %): every error within 1 point."""
    errs, ses = _simulate(_mixed_process(), 12, 0.01)
    assert max(abs(e) for e in errs) <= 0.01, errs
    assert max(ses) <= target_stderr(0.01)


def test_seeded_runs_are_deterministic() -> None:
    p = _mixed_process()
    assert run(p, 42).bytes == run(p, 42).bytes
    assert run(p, 42).bytes != run(p, 43).bytes



def test_hugetlb_scaled_to_its_own_counter() -> None:
    """HugetlbPages scales the hugetlb stratum alone; RSS surplus never leaks into it."""
    p = FakeProcess()
    p.add(1 * MiB, Kind.ANON, 1.0, {0: 1.0})  # small: counted
    p.add(4 * MiB, Kind.FILE, 1.0, {0: 1.0})  # small: counted
    p.add(512 * MiB, Kind.HUGETLB, 1.0, {1: 1.0}, path="/anon_hugepage")
    totals = p.totals()
    totals[Kind.ANON] += 3 * MiB  # status counts more anon than the mappings show
    est = run(p, 8, totals=totals)
    assert est.bytes[(1, Kind.HUGETLB)] == 512 * MiB
    assert est.bytes[(0, Kind.ANON)] == 1 * MiB and est.bytes[(0, Kind.FILE)] == 4 * MiB
    assert est.unsampled_bytes == 3 * MiB  # no sampled anon/file/shmem stratum takes it


def test_a_sparse_mapping_costs_what_the_caller_allows() -> None:
    # 1 GiB resident in a 64 TiB reservation: the default budget drew 615,000 queries
    p = FakeProcess()
    p.add(64 << 40, Kind.ANON, GiB / (64 << 40), {0: 1.0})
    counted: list[int] = []

    def counting(addrs: Sequence[int]) -> Sequence[int]:
        counted.append(len(addrs))
        return p.query(addrs)

    est = estimate_placement(build_strata(p.entries, PAGE), {Kind.ANON: GiB}, counting,
                             rng=random.Random(3), max_queries=4_000)
    assert est.samples == sum(counted) <= 4_000
    assert est.budget_exhausted


def test_the_caller_can_give_up_between_batches() -> None:
    p = FakeProcess()
    p.add(4 * GiB, Kind.ANON, 1.0, {0: 1.0})
    batches = 0

    def clock() -> float:  # the deadline passes at the fourth look
        nonlocal batches
        batches += 1
        return float(batches)

    queried: list[int] = []

    def counting(addrs: Sequence[int]) -> Sequence[int]:
        queried.append(len(addrs))
        return p.query(addrs)

    with pytest.raises(Expired):
        estimate_placement(build_strata(p.entries, PAGE), {Kind.ANON: 4 * GiB}, counting,
                           rng=random.Random(1), deadline=Deadline(4.0, clock=clock))
    assert len(queried) == 3  # asked before every batch; the fourth was never sent
