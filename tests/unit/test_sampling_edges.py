"""The estimator's arithmetic at its edges (issue 33): every standard error is a finite
number >= 0 whatever the counts, including all pages on one node, a stratum of one page,
counts that cancel, and carried counts added to fresh ones (on 5.10, right after
``migratepages``, a variance that rounding had made negative cost a process its scan:
``math.sqrt`` raised ``ValueError``)."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from numa_exporter.model.sample_memory import combine
from numa_exporter.model.sampling import PlacementEstimate, StratumResult
from numa_exporter.parsers.numa_maps import Kind

PAGE = 4096
NODES = (0, 1, 2, 3)
HOMES = [frozenset(), frozenset({0}), frozenset({1}), frozenset({0, 1}), frozenset(NODES)]

counts = st.dictionaries(st.sampled_from(NODES), st.integers(0, 5000), max_size=4)
carried = st.dictionaries(st.sampled_from(NODES),
                          st.floats(0.0, 5000.0, allow_nan=False, allow_infinity=False),
                          max_size=4)


def _stratum(kind: Kind, nodes: dict[int, int], resident: int, size: int) -> StratumResult:
    """Return a sampled (not census) stratum of ``size`` bytes whose resident samples fell on
    ``nodes`` (``resident`` need not be their sum: a combined stratum's is not)."""
    return StratumResult(kind, max(resident, 1) * 4, max(resident, 1) * 2, resident,
                         tuple(sorted((n, c) for n, c in nodes.items() if c)), False, size)


def _estimate(*strata: StratumResult) -> PlacementEstimate:
    """Return an estimate of ``strata`` with each one's bytes split by its counts."""
    out: dict[tuple[int, Kind], int] = {}
    for s in strata:
        whole = sum(c for _, c in s.node_counts)
        for n, c in s.node_counts:
            out[(n, s.kind)] = out.get((n, s.kind), 0) + s.bytes * c // max(whole, 1)
    return PlacementEstimate(bytes={k: v for k, v in out.items() if v}, strata=strata)


def _assert_sound(est: PlacementEstimate) -> None:
    """Assert every standard error of ``est`` is finite and not negative."""
    for home in HOMES:
        se = est.remote_ratio_stderr(home)
        assert math.isfinite(se) and se >= 0, (home, se)
    se = est.node_bytes_stderr()
    assert math.isfinite(se) and se >= 0, se


@settings(max_examples=300, deadline=None)
@given(fresh=counts, kept=carried, size=st.integers(PAGE, 1 << 40))
# a fresh page on node 1 and 1.6 carried samples there: 2.6 counts, rounded to 3 node
# samples over 2 resident ones: a remote fraction of 3/2 and a negative variance
@example(fresh={1: 1}, kept={1: 1.6}, size=1 << 30)
# all on one node, a stratum of one page
@example(fresh={2: 1}, kept={}, size=PAGE)
@example(fresh={0: 1}, kept={0: 0.5}, size=PAGE)
def test_carried_and_fresh_counts_give_sound_errors(fresh: dict[int, int],
                                                     kept: dict[int, float],
                                                     size: int) -> None:
    resident = sum(fresh.values())
    est = _estimate(_stratum(Kind.ANON, fresh, resident, size))
    out, keep = combine(est, {Kind.ANON: kept})
    _assert_sound(out)
    for k in keep.values():
        assert all(c >= 0 for c in k.values())


@settings(max_examples=300, deadline=None)
@given(nodes=counts, resident=st.integers(0, 5000), size=st.integers(0, 1 << 40),
       other=counts)
# counts that do not add up to the resident samples (rounded): more on the remote side
# than resident samples, and the same with another stratum alongside
@example(nodes={1: 3}, resident=2, size=1 << 30, other={})
@example(nodes={0: 2, 1: 3}, resident=4, size=1 << 30, other={0: 7})
def test_any_counts_give_sound_errors(nodes: dict[int, int], resident: int, size: int,
                                      other: dict[int, int]) -> None:
    est = _estimate(_stratum(Kind.ANON, nodes, resident, size),
                    _stratum(Kind.FILE, other, sum(other.values()), size // 3))
    _assert_sound(est)


@settings(max_examples=200, deadline=None)
@given(fresh=counts.filter(lambda d: sum(d.values()) > 0), size=st.integers(PAGE, 1 << 40),
       kept=st.dictionaries(st.sampled_from(NODES), st.floats(-5000.0, 5000.0,
                                                               allow_nan=False),
                            max_size=4))
# carried counts that cancel the fresh ones: the fresh sample's bytes stay placed
@example(fresh={1: 2}, kept={1: -2.0}, size=1 << 30)
@example(fresh={0: 1, 1: 1}, kept={0: -1.0, 1: -1.0}, size=1 << 30)
def test_counts_that_cancel_keep_the_bytes(fresh: dict[int, int], kept: dict[int, float],
                                           size: int) -> None:
    resident = sum(fresh.values())
    est = _estimate(_stratum(Kind.ANON, fresh, resident, size))
    out, keep = combine(est, {Kind.ANON: kept})
    _assert_sound(out)
    assert sum(out.bytes.values()) == size  # every byte of the stratum still placed
    assert all(c >= 0 for k in keep.values() for c in k.values())


def test_a_variance_that_rounds_below_zero_is_zero() -> None:
    # every sample on node 1 of a stratum whose counts (rounded after a carried read) exceed
    # its resident samples: with home {0} the remote fraction is over 1
    est = _estimate(_stratum(Kind.ANON, {1: 3}, 2, 1 << 30))
    assert est.remote_ratio_stderr(frozenset({0})) == 0.0
    assert est.remote_ratio_stderr(frozenset({1})) == 0.0
    assert est.node_bytes_stderr() == 0.0


def test_a_thin_stratum_carries_more_than_its_reads_few_samples() -> None:
    # 20 resident samples a read (present pages spread thinly, no PAGEMAP_SCAN): sixteen
    # reads' worth was all it could carry (340 samples), so its error stopped falling there
    est = _estimate(_stratum(Kind.ANON, {0: 12, 1: 8}, 20, 1 << 30))
    _, keep = combine(est, {Kind.ANON: {0: 600.0, 1: 400.0}})
    assert sum(keep[Kind.ANON].values()) == 1020


def test_a_read_that_finds_no_resident_page_keeps_what_was_carried() -> None:
    empty = StratumResult(Kind.ANON, 1 << 20, 3000, 0, (), False, 0)
    est = PlacementEstimate(strata=(empty,), unsampled_bytes=1 << 30)
    _, keep = combine(est, {Kind.ANON: {0: 600.0, 1: 400.0}})
    assert keep == {Kind.ANON: {0: 600.0, 1: 400.0}}
