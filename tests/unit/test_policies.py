"""Memory policies between full reads (issue 23 #1): when a policy read is due, how long its
view stands, how it is carried onto sampled bytes, and the bindings where policies are
unknown."""

from __future__ import annotations

from numa_exporter.model.binding import REASONS, analyse
from numa_exporter.model.cadence import CadencePolicy, ReadCosts, plan
from numa_exporter.model.policies import PolicyView, current, policies_due, scaled

GiB = 1 << 30
N0, N01 = frozenset({0}), frozenset({0, 1})
VIEW = PolicyView({"bind": 3 * GiB, "default": GiB}, {("bind", N0): 3 * GiB,
                  ("default", frozenset()): GiB}, GiB // 4, 4 * GiB, 4 * GiB, 100.0)


def test_a_policy_read_is_due_at_discovery_after_the_interval_and_after_growth() -> None:
    assert policies_due(None, 0.0, GiB, 300.0)
    assert not policies_due(VIEW, 399.0, 4 * GiB, 300.0)
    assert policies_due(VIEW, 400.0, 4 * GiB, 300.0)
    assert policies_due(VIEW, 101.0, 7 * GiB, 300.0)  # 1.75 times the size read
    assert not policies_due(None, 0.0, GiB, 0.0)  # policy reads off


def test_a_view_stands_two_intervals_at_a_size_near_its_own() -> None:
    assert current(VIEW, 699.0, 5 * GiB, 300.0) is VIEW
    assert current(VIEW, 700.0, 4 * GiB, 300.0) is None  # too old
    assert current(VIEW, 101.0, 2 * GiB, 300.0) is None  # halved since
    assert current(VIEW, 101.0, 4 * GiB, 0.0) is None  # policy reads off
    assert current(None, 101.0, 4 * GiB, 300.0) is None


def test_scaled_keeps_the_shares_on_the_bytes_placed_now() -> None:
    got = scaled(VIEW, 8 * GiB)
    assert got.policy_bytes == {"bind": 6 * GiB, "default": 2 * GiB}
    assert got.policy_nodes[("bind", N0)] == 6 * GiB
    assert got.off_policy_bytes == GiB // 2
    assert scaled(PolicyView({}, {}, 0, 0, 0, 0.0), GiB).policy_bytes == {}


def _analyse(policy_nodes: dict[tuple[str, frozenset[int]], int] | None,
             mems_allowed: frozenset[int] | None = N01, balancing: int = 1,
             accel: frozenset[int] = frozenset()) -> tuple[bool | None, dict[str, bool]]:
    b = analyse(online=N01, memory_nodes=N01, cpu_nodes_online=N01,
                policy_nodes=policy_nodes, mems_allowed=mems_allowed, affinity_nodes=N0,
                thread_nodes=N0, accelerator_nodes=accel, balancing_mode=balancing,
                off_policy_bytes=0)
    return b.memory_bound, b.mismatches


def test_unknown_policies_give_no_reason_that_rests_on_them() -> None:
    # CPU-bound to node 0, balancing on: with policies read and none binding, this is
    # threads_bound_memory_free; with policies unknown it is not said either way
    bound, mism = _analyse({("default", frozenset()): GiB})
    assert bound is False and mism["threads_bound_memory_free"] is True
    bound, mism = _analyse(None)
    assert bound is None
    assert set(mism) == {"accelerator_node_not_allowed"} and not any(mism.values())
    assert set(mism) < set(REASONS)


def test_a_cpuset_decides_what_it_can_without_policies() -> None:
    # Mems_allowed node 1 only: bound whatever the policies, away from the thread's node
    bound, mism = _analyse(None, mems_allowed=frozenset({1}), accel=N0)
    assert bound is True
    assert mism == {"threads_bound_memory_free": False, "memory_not_on_thread_nodes": True,
                    "accelerator_node_not_allowed": True,
                    "balancing_with_strict_binding": True}
    # with balancing off that reason is a known "no" even without policies
    assert _analyse(None, balancing=0)[1]["balancing_with_strict_binding"] is False


POLICY = CadencePolicy(hold_budget=0.005, policy_hold_budget=0.1)


def _plan(resident: int, due: bool) -> tuple[str, str]:
    p = plan(POLICY, now=10.0, resident_bytes=resident, seconds_per_byte=None,
             next_due=0.0, last_full=0.0, sampling=True, costs=ReadCosts(),
             policies_due=due)
    return p.method, p.reason


def test_a_due_policy_read_replaces_a_sampled_read_within_its_hold_budget() -> None:
    assert _plan(4 * GiB, False) == ("sampled", "hold")
    assert _plan(4 * GiB, True) == ("full", "policy")  # 32 ms estimated: within 100 ms
    assert _plan(16 * GiB, True) == ("sampled", "hold")  # 128 ms: over
    assert _plan(GiB // 2, True) == ("full", "cheaper")  # read in full anyway
