"""The cadence planner: sampled above the cost threshold, full reads spread under a budget."""

from __future__ import annotations

from numa_exporter.model.cadence import CadencePolicy, estimate_full_seconds, plan

GiB = 1 << 30
POLICY = CadencePolicy(sample_above=0.005, full_interval=0.0, process_budget=0.5, interval=10.0)


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
    pol = CadencePolicy(sample_above=0.005, full_interval=3600.0, process_budget=0.5,
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
