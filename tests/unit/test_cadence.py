"""The cadence planner: sampled above the cost threshold, full reads spread under a budget."""

from __future__ import annotations

from dataclasses import replace

from numa_exporter.model.cadence import (
    MIN_QUERIES,
    CadencePolicy,
    ReadCosts,
    estimate_full_seconds,
    estimate_hold,
    estimate_sampled_seconds,
    plan,
    query_budget,
)

GiB = 1 << 30
POLICY = CadencePolicy(full_interval=0.0, process_budget=0.5, interval=10.0)


def _plan(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = dict(now=1000.0, resident_bytes=GiB // 16,
                                   seconds_per_byte=None, next_due=0.0, last_full=0.0,
                                   sampling=True)
    args.update(kw)
    policy = args.pop("policy", POLICY)
    return plan(policy, **args)  # type: ignore[arg-type]


def test_small_processes_are_read_in_full_every_scan() -> None:
    p = _plan()
    assert (p.method, p.read_now, p.next_due) == ("full", True, 1000.0)


def test_big_processes_are_sampled_when_sampling_works() -> None:
    p = _plan(resident_bytes=4 * GiB)
    assert (p.method, p.read_now) == ("sampled", True)
    # a measured cheap walk (THP: few page-table entries) keeps the exact read
    p = _plan(resident_bytes=4 * GiB, seconds_per_byte=0.3e-3 / GiB)
    assert p.method == "full"


def test_operator_asked_for_exact_reads_on_a_slow_cadence() -> None:
    pol = CadencePolicy(full_interval=3600.0, process_budget=0.5,
                        interval=10.0)
    assert _plan(policy=pol, resident_bytes=4 * GiB, last_full=0.0).method == "full"
    assert _plan(policy=pol, resident_bytes=4 * GiB, last_full=990.0).method == "sampled"


def test_without_sampling_a_costly_process_is_read_less_often() -> None:
    # 240 GiB at the default cost is ~1.9 s: four times the 0.5 s budget, rounded up
    big = 240 * GiB
    assert 3 * POLICY.process_budget < estimate_full_seconds(big, None) <= 4 * POLICY.process_budget
    p = _plan(resident_bytes=big, sampling=False)
    assert p.read_now and p.method == "full"
    skipped = round((p.next_due - 1000.0) / POLICY.interval)
    assert skipped == 3  # read once every four scans: 2 s / 4 = the 0.5 s budget per scan
    # the next scans (a little early or late) skip it until it is due
    assert not _plan(resident_bytes=big, sampling=False, now=1010.3,
                     next_due=p.next_due).read_now
    assert _plan(resident_bytes=big, sampling=False, now=1029.8, next_due=p.next_due).read_now


# --- the reader chosen by the mmap-lock hold and the measured cost (issue 14) ------------

MiB = 1 << 20
ROOMY = CadencePolicy(full_interval=0.0, process_budget=0.5,
                      interval=10.0, hold_budget=0.005)


def test_many_small_mappings_are_read_in_full_however_big_the_total() -> None:
    # 60,000 one-page mappings and 4 GiB in all: the full read costs 170 ms of CPU, but
    # each read() of numa_maps holds the lock for a few dozen small mappings only: the hold
    # never requires sampling; the sampled reader is only tried because its estimated cost
    # (60,000 maps lines at 0.35 us + a full sample, ~29 ms, compiled) is below the full
    # read's, and kept only if it measures cheaper
    costs = ReadCosts(full_cpu=0.170, full_resident=4 * GiB, hold=0.0002, mappings=60_000)
    p = _plan(policy=ROOMY, resident_bytes=4 * GiB, costs=costs)
    assert (p.method, p.reason) == ("sampled", "probe")
    assert p.hold_seconds == 0.0002
    # where the full read costs less than reading maps would, it is not even tried
    cheap = replace(costs, full_cpu=0.020)
    assert (_plan(policy=ROOMY, resident_bytes=4 * GiB, costs=cheap).reason) == "cheaper"
    # the total walk is well above the budget: the old rule (total estimate) sampled here
    assert p.estimated_seconds > 30 * ROOMY.hold_budget


def test_one_big_mapping_is_sampled_for_its_lock_hold() -> None:
    costs = ReadCosts(full_cpu=0.030, full_resident=4 * GiB, hold=0.029,
                      sampled_cpu=0.060, sampled_resident=4 * GiB, sampled_queries=10_000)
    p = _plan(policy=ROOMY, resident_bytes=4 * GiB, costs=costs)
    # costlier in CPU, but the hold budget requires it
    assert (p.method, p.reason) == ("sampled", "hold")
    assert p.max_queries is not None and p.max_queries >= 256


def test_below_the_hold_budget_the_cheaper_reader_is_kept() -> None:
    base = ReadCosts(full_cpu=0.058, full_resident=4 * GiB, hold=0.002,
                     sampled_resident=4 * GiB, sampled_queries=10_000)
    cheap = _plan(policy=ROOMY, resident_bytes=4 * GiB,
                  costs=replace(base, sampled_cpu=0.017))
    assert (cheap.method, cheap.reason) == ("sampled", "cost")
    dear = _plan(policy=ROOMY, resident_bytes=4 * GiB, costs=replace(base, sampled_cpu=0.090))
    assert (dear.method, dear.reason) == ("full", "cheaper")


def test_the_sampled_reader_is_tried_once_when_a_full_read_costs_over_5ms() -> None:
    costs = ReadCosts(full_cpu=0.058, full_resident=4 * GiB, hold=0.002, mappings=64)
    p = _plan(policy=ROOMY, resident_bytes=4 * GiB, costs=costs)
    assert (p.method, p.reason) == ("sampled", "probe")
    # not where its maps parse alone would cost more than the full read
    many = replace(costs, mappings=200_000)
    assert estimate_sampled_seconds(many) > 0.058
    assert _plan(policy=ROOMY, resident_bytes=4 * GiB, costs=many).reason == "cheaper"
    small = ReadCosts(full_cpu=0.004, full_resident=GiB // 2, hold=0.0005)
    assert _plan(policy=ROOMY, resident_bytes=GiB // 2, costs=small).method == "full"


def test_measurements_go_stale_when_the_process_grows() -> None:
    # measured at 1 GiB; the process is 8 GiB now: the sampled cost is re-measured ...
    costs = ReadCosts(full_cpu=0.004, full_resident=GiB, hold=0.0004,
                      sampled_cpu=0.001, sampled_resident=GiB, sampled_queries=10_000)
    assert _plan(policy=ROOMY, resident_bytes=GiB, costs=costs).reason == "cost"
    p = _plan(policy=ROOMY, resident_bytes=8 * GiB, costs=costs)
    assert p.method == "full" and p.reason == "cheaper"
    # ... and the hold is scaled with the growth: a mapping that grew may now be over it
    grown = replace(costs, hold=0.004)
    assert _plan(policy=ROOMY, resident_bytes=2 * GiB, costs=grown).reason == "hold"
    assert estimate_hold(grown, 2 * GiB, None) == 0.008


def test_unknown_processes_count_all_resident_bytes_as_one_mapping_until_maps_says() -> None:
    first = _plan(policy=ROOMY, resident_bytes=GiB)  # 8 ms at the default rate
    assert (first.method, first.reason) == ("sampled", "hold")
    # maps showed no mapping above 64 MiB: a full read holds the lock ~0.5 ms at most
    after = _plan(policy=ROOMY, resident_bytes=GiB,
                  costs=ReadCosts(largest_mapping=64 * MiB, maps_resident=GiB))
    assert (after.method, after.reason) == ("full", "cheaper")
    assert after.hold_seconds == estimate_full_seconds(64 * MiB, None)


def test_hold_budget_zero_leaves_the_choice_to_cost_and_sampling_off_never_samples() -> None:
    costs = ReadCosts(full_cpu=0.030, full_resident=4 * GiB, hold=0.029, mappings=8)
    off = replace(ROOMY, hold_budget=0.0)
    assert _plan(policy=off, resident_bytes=4 * GiB, costs=costs).reason == "probe"
    assert _plan(policy=ROOMY, resident_bytes=400 * GiB, sampling=False).method == "full"


def test_query_budget_follows_the_full_read_cost_not_the_virtual_size() -> None:
    # 1 GiB resident inside a 64 TiB MAP_NORESERVE mapping: a full read costs ~8 ms; the
    # sampled read may not spend 600,000 queries on it, nor more than half of the full
    # read's cost (4 ms at 0.75 us a query: 5,333)
    p = _plan(policy=ROOMY, resident_bytes=GiB)
    assert p.max_queries is not None and p.max_queries <= 5_400
    # measured: 12,000 queries took 60 ms of CPU (5 us each); a full read measured 20 ms,
    # so half of it, 10 ms, buys 2,000 queries
    costs = ReadCosts(full_cpu=0.020, full_resident=GiB, hold=0.020, sampled_cpu=0.060,
                      sampled_resident=GiB, sampled_queries=12_000)
    assert query_budget(0.020, costs) == 2_000
    assert query_budget(0.0, costs) == MIN_QUERIES
    # the maps parse of many mappings comes off the budget first
    # (10 ms - 1,000 lines at 0.35 us) at 0.75 us a query
    assert query_budget(0.020, replace(costs, sampled_cpu=None, mappings=1_000)) == 12_866


def test_a_quiet_process_that_would_be_sampled_is_read_in_full_within_the_policy_hold() -> None:
    """Issue 34: nothing changed since the last read (``quiet``): a process sampled for its
    hold (4 GiB of 4 KiB pages, ~32 ms estimated, over the 5 ms hold budget) is read in
    full once the hold is within the policy hold budget (100 ms), keeping the sampled
    budget for the panel; over that budget, or with the policy budget off, it stays
    sampled; policies due come first; a process read in full anyway is unchanged."""
    quiet = CadencePolicy(interval=10.0, hold_budget=0.005, policy_hold_budget=0.1)
    sampled = _plan(policy=quiet, resident_bytes=4 * GiB)
    assert (sampled.method, sampled.reason) == ("sampled", "hold")
    p = _plan(policy=quiet, resident_bytes=4 * GiB, quiet=True)
    assert (p.method, p.reason, p.read_now) == ("full", "quiet", True)
    assert p.max_queries == sampled.max_queries and p.max_queries is not None
    p = _plan(policy=quiet, resident_bytes=4 * GiB, quiet=True, policies_due=True)
    assert (p.method, p.reason, p.max_queries) == ("full", "policy", None)
    for over in (replace(quiet, policy_hold_budget=0.01), replace(quiet, policy_hold_budget=0.0)):
        p = _plan(policy=over, resident_bytes=4 * GiB, quiet=True)
        assert (p.method, p.reason) == ("sampled", "hold")
    small = _plan(policy=quiet, quiet=True)
    assert (small.method, small.reason) == ("full", "cheaper")
