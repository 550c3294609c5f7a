"""Model: home precedence, locality, binding analysis and drift tracking."""

from __future__ import annotations

import pytest

from numa_exporter.model.binding import Binding, analyse
from numa_exporter.model.drift import DriftTrack, WarmupRule
from numa_exporter.model.home import Home, choose_home, locality, thread_nodes

MiB = 1 << 20


def test_home_precedence() -> None:
    c = {"affinity": frozenset({0, 1}), "threads": frozenset({0}),
         "accelerator": frozenset({1}), "config": None}
    assert choose_home(c) == Home(frozenset({1}), "accelerator")
    c["config"] = frozenset({0})
    assert choose_home(c).source == "config"
    assert choose_home({"affinity": frozenset({1})}) == Home(frozenset({1}), "affinity")
    assert choose_home({}) == Home(frozenset(), "none")


def test_kubelet_home_is_below_config_and_above_accelerator() -> None:
    c = {"affinity": frozenset({0, 1}), "threads": frozenset({0}),
         "accelerator": frozenset({1}), "kubelet": frozenset({0}), "config": None}
    assert choose_home(c) == Home(frozenset({0}), "kubelet")
    c["config"] = frozenset({1})
    assert choose_home(c) == Home(frozenset({1}), "config")
    c["config"] = c["kubelet"] = None
    assert choose_home(c).source == "accelerator"


def test_thread_nodes_by_weight() -> None:
    assert thread_nodes([(0, 95.0), (1, 5.0)]) == {0}
    assert thread_nodes([(0, 50.0), (1, 50.0)]) == {0, 1}
    assert thread_nodes([]) == frozenset()


def test_locality_and_zero_total() -> None:
    loc = locality({0: 10 * MiB, 1: 30 * MiB}, Home(frozenset({0}), "threads"))
    assert (loc.local_bytes, loc.remote_bytes, loc.remote_ratio) == (10 * MiB, 30 * MiB, 0.75)
    assert locality({}, Home(frozenset({0}), "threads")).remote_ratio == 0.0


def _analyse(**kw: object) -> dict[str, bool]:
    args: dict[str, object] = dict(online=frozenset({0, 1}), memory_nodes=None,
                                   cpu_nodes_online=frozenset({0, 1}),
                                   policy_nodes={("default", frozenset()): 100},
                                   mems_allowed=frozenset({0, 1}), affinity_nodes=frozenset({0, 1}),
                                   thread_nodes=frozenset({0}), accelerator_nodes=frozenset(),
                                   balancing_mode=0)
    args.update(kw)
    return {k for k, v in analyse(**args).mismatches.items() if v}  # type: ignore[arg-type, return-value]


def test_binding_failure_modes() -> None:
    assert _analyse() == set()
    assert _analyse(policy_nodes={("bind", frozenset({1})): 100}) == {
        "memory_not_on_thread_nodes"}
    assert _analyse(affinity_nodes=frozenset({0})) == {"threads_bound_memory_free"}
    assert _analyse(mems_allowed=frozenset({1}), accelerator_nodes=frozenset({0})) == {
        "memory_not_on_thread_nodes", "accelerator_node_not_allowed"}
    assert _analyse(accelerator_nodes=frozenset({-1})) == set()  # unknown node: no verdict
    assert _analyse(policy_nodes={("bind", frozenset({0})): 100}, balancing_mode=1) == {
        "balancing_with_strict_binding"}
    assert _analyse(policy_nodes={("bind", frozenset({0})): 100}, balancing_mode=2) == set()
    # CPUs pinned, memory free: balancing moves the memory to the threads, which helps
    assert _analyse(affinity_nodes=frozenset({0}), balancing_mode=1) == {
        "threads_bound_memory_free"}
    # interleave over every node is no restriction
    assert _analyse(policy_nodes={("interleave", frozenset({0, 1})): 100},
                    affinity_nodes=frozenset({0})) == {"threads_bound_memory_free"}


def test_cpus_pinned_memory_free_under_balancing_is_not_strict() -> None:
    # a real capture: one thread pinned to CPU 0, memory policy default, balancing on;
    # balancing is what moves that memory to the thread's node, so it is no mismatch
    assert _analyse(affinity_nodes=frozenset({0}), balancing_mode=1) == {
        "threads_bound_memory_free"}
    assert _analyse(mems_allowed=frozenset({0}), balancing_mode=1) == {
        "balancing_with_strict_binding"}


# A Grace Hopper host: nodes 0-8 online, memory on 0 (LPDDR5X) and 1 (HBM) only, CPUs on 0.
GH_ONLINE = frozenset(range(9))
GH_MEMORY = frozenset({0, 1})


def _gh_binding(**kw: object) -> Binding:
    args: dict[str, object] = dict(online=GH_ONLINE, memory_nodes=GH_MEMORY,
                                   cpu_nodes_online=frozenset({0}),
                                   policy_nodes={("default", frozenset()): 100},
                                   mems_allowed=frozenset({0, 1}),
                                   affinity_nodes=frozenset({0}),
                                   thread_nodes=frozenset({0}), accelerator_nodes=frozenset(),
                                   balancing_mode=1)
    args.update(kw)
    return analyse(**args)  # type: ignore[arg-type]


def test_mems_allowed_of_every_memory_node_is_not_a_binding() -> None:
    # an unbound task's Mems_allowed is the nodes with memory (N_MEMORY), here 0-1 of 0-8
    b = _gh_binding()
    assert b.memory_nodes is None and not b.memory_bound
    assert not any(b.mismatches.values())
    # nor is a strict policy naming every node with memory
    b = _gh_binding(policy_nodes={("bind", frozenset({0, 1})): 100})
    assert not b.memory_bound and not b.mismatches["balancing_with_strict_binding"]


def test_binding_to_some_memory_nodes_stays_a_binding() -> None:
    # numactl --membind=1: the policy confines memory to the HBM node
    b = _gh_binding(policy_nodes={("bind", frozenset({1})): 100})
    assert b.memory_nodes == frozenset({1})
    assert b.mismatches["balancing_with_strict_binding"]
    assert b.mismatches["memory_not_on_thread_nodes"]
    # a cpuset of node 0 alone
    b = _gh_binding(mems_allowed=frozenset({0}))
    assert b.memory_nodes == frozenset({0}) and b.mismatches["balancing_with_strict_binding"]


def test_memory_nodes_unknown_falls_back_to_the_online_nodes() -> None:
    # without has_memory nothing says nodes 2-8 hold none: 0-1 of 0-8 reads as bound
    b = _gh_binding(memory_nodes=None)
    assert b.memory_nodes == frozenset({0, 1})
    # a has_memory list naming no online node is no better than none
    assert _gh_binding(memory_nodes=frozenset({12})).memory_nodes == frozenset({0, 1})
    assert _gh_binding(memory_nodes=frozenset()).memory_nodes == frozenset({0, 1})


def test_memory_off_its_own_bind_policy() -> None:
    # after `migratepages PID 1 0` on a process started with --membind=1
    bound = {("bind", frozenset({1})): 256 * MiB}
    assert "memory_off_policy_nodes" in _analyse(policy_nodes=bound,
                                                 off_policy_bytes=256 * MiB)
    assert "memory_off_policy_nodes" not in _analyse(policy_nodes=bound, off_policy_bytes=0)
    # a stray page or two is no verdict
    assert "memory_off_policy_nodes" not in _analyse(policy_nodes=bound,
                                                     off_policy_bytes=MiB)


RULE = WarmupRule(age=10.0, scans=2, tolerance=0.05)


def test_drift_movement_and_baseline() -> None:
    t = DriftTrack.new(RULE)
    d = t.observe(RULE, age=5.0, rss=100, node_bytes={0: 100}, remote_ratio=0.0,
                  host_migrated=0)
    assert d.baseline_remote_ratio is None  # too young
    for age in (15.0, 25.0):
        d = t.observe(RULE, age=age, rss=100, node_bytes={0: 100}, remote_ratio=0.0,
                      host_migrated=0)
    assert d.baseline_remote_ratio == 0.0
    # the host migrated a page (4 KiB) in each interval: movement may count
    d = t.observe(RULE, age=35.0, rss=100, node_bytes={0: 40, 1: 60}, remote_ratio=0.6,
                  host_migrated=1)
    assert d.baseline_remote_ratio == 0.0
    assert d.departed_bytes == {0: 60} and d.arrived_bytes == {1: 60}
    d = t.observe(RULE, age=45.0, rss=100, node_bytes={0: 100}, remote_ratio=0.0,
                  host_migrated=2)
    assert d.departed_bytes == {0: 60, 1: 60} and d.arrived_bytes == {1: 60, 0: 60}
    # the counter unknown: nothing counts (movement needs evidence of a migration)
    d = t.observe(RULE, age=55.0, rss=100, node_bytes={1: 100}, remote_ratio=1.0)
    assert d.departed_bytes == {0: 60, 1: 60}


def test_one_bad_scan_during_warmup_does_not_become_the_baseline() -> None:
    # a guest workload once had its baseline recorded from one wrong scan (0.979 while its
    # real ratio was 0) and reported a change of -0.979 for the rest of its life
    t = DriftTrack.new(RULE)
    ratios = (0.0, 0.0, 0.979)
    for i, r in enumerate(ratios):
        d = t.observe(RULE, age=20.0 + i, rss=100, node_bytes={0: 100}, remote_ratio=r)
    assert d.baseline_remote_ratio == 0.0


def test_unknown_age_is_never_warm() -> None:
    t = DriftTrack.new(RULE)
    for _ in range(5):
        d = t.observe(RULE, age=None, rss=100, node_bytes={0: 100}, remote_ratio=0.1)
    assert d.baseline_remote_ratio is None


def test_rss_still_growing_is_not_warm() -> None:
    rule = WarmupRule(age=0.0, scans=3, tolerance=0.05)
    t = DriftTrack.new(rule)
    for rss in (100, 200, 300):
        d = t.observe(rule, age=10.0, rss=rss, node_bytes={0: rss}, remote_ratio=0.0)
    assert d.baseline_remote_ratio is None
    for _ in range(3):
        d = t.observe(rule, age=10.0, rss=300, node_bytes={0: 300}, remote_ratio=0.25)
    assert d.baseline_remote_ratio == pytest.approx(0.25)


def test_status_screen_agrees_with_the_full_parser() -> None:
    from tests.conftest import ROOTS

    from numa_exporter.parsers.pid_status import parse_pid_status, parse_pid_status_resident

    seen = 0
    for path in sorted(ROOTS.glob("*/proc/*/status")):
        raw = path.read_bytes()
        full = parse_pid_status(raw)
        rss, huge = parse_pid_status_resident(raw)
        if full.error_count == 0:
            assert (rss, huge) == (full.vm_rss, full.hugetlb or 0), path
            seen += 1
    assert seen >= 10
    assert parse_pid_status_resident(b"Name:\tx\nVmRSS:\t 12 kB\n") == (12 * 1024, 0)
    assert parse_pid_status_resident(b"Name:\tkthreadd\n") == (None, 0)
    assert parse_pid_status_resident(b"XVmRSS:\t12 kB\n") == (None, 0)
    assert parse_pid_status_resident(b"VmRSS:\t\xc2\xb2 kB\n") == (None, 0)
    assert parse_pid_status_resident(b"VmRSS:\t" + b"9" * 5000 + b" kB\n") == (None, 0)
