"""The binding as intended and the threads outside it (model/thread_binding.py), and the
per-thread share of remote hinting faults (model/tiers/faults.py)."""

from __future__ import annotations

from numa_exporter.model.thread_binding import (
    ThreadCpus,
    audit,
    main_thread_intent,
    narrowest,
    thread_node,
)
from numa_exporter.model.tiers.faults import process_faults, thread_fault_remote_share
from numa_exporter.parsers.pid_sched import NumaFaultsLine, SchedFaults

# two nodes of two CPUs each, as the multithread_split capture
NODE_OF_CPU = {0: 0, 1: 0, 2: 1, 3: 1}
ALL = frozenset({0, 1, 2, 3})
NODE0 = frozenset({0, 1})


def threads(*rows: tuple[int, frozenset[int] | None, int | None]) -> dict[int, ThreadCpus]:
    return {tid: ThreadCpus(tid, mask, cpu) for tid, mask, cpu in rows}


def test_late_bind_counts_the_thread_that_kept_the_wide_mask() -> None:
    # the main thread bound itself to node 0 after thread 174 was created
    t = threads((172, NODE0, 0), (173, NODE0, 1), (174, ALL, 2), (175, NODE0, 0))
    a = audit(t, 172, NODE_OF_CPU)
    assert a.binding is not None and a.binding.source == "main_thread"
    assert a.binding.cpus == NODE0 and a.nodes == frozenset({0})
    assert a.escaped == ((174, ALL),) and a.outside == 1


def test_threads_pinned_one_per_node_are_intent_not_escape() -> None:
    # split_threads: the main thread on CPU 0, a worker pinned to node 1 on its own
    t = threads((150, frozenset({0}), 0), (151, frozenset({0}), 0), (152, frozenset({2}), 2))
    a = audit(t, 150, NODE_OF_CPU)
    assert a.binding is not None and a.binding.cpus == frozenset({0, 2})
    assert a.nodes == frozenset({0, 1}) and a.outside == 0


def test_unbound_process_has_no_binding() -> None:
    t = threads((10, ALL, 0), (11, ALL, 3))
    a = audit(t, 10, NODE_OF_CPU)
    assert a.binding is None and a.outside == 0 and a.nodes == frozenset()


def test_config_pin_narrower_than_the_main_mask_wins() -> None:
    t = threads((10, frozenset({0, 1, 2}), 0), (11, frozenset({0, 1, 2}), 2))
    a = audit(t, 10, NODE_OF_CPU, config_nodes=frozenset({0}))
    assert a.binding is not None and a.binding.source == "config"
    assert [tid for tid, _ in a.escaped] == [10, 11]


def test_kubelet_cpus_and_ties_go_to_the_earlier_source() -> None:
    t = threads((10, frozenset({2, 3}), 2), (11, frozenset({2, 3}), 3))
    a = audit(t, 10, NODE_OF_CPU, kubelet_cpus=frozenset({2, 3}),
              cpuset_cpus=frozenset({2, 3}))
    assert a.binding is not None and a.binding.source == "kubelet" and a.outside == 0


def test_narrowest_skips_candidates_that_restrict_nothing() -> None:
    assert narrowest({"config": ALL, "cpuset": frozenset({9})}, ALL) is None
    got = narrowest({"cpuset": frozenset({1, 2, 3}), "main_thread": frozenset({3})}, ALL)
    assert got is not None and got.source == "main_thread" and got.cpus == frozenset({3})


def test_main_thread_intent_leaves_out_wider_masks_only() -> None:
    masks = {1: frozenset({0}), 2: frozenset({0, 1, 2}), 3: frozenset({3}), 4: None}
    assert main_thread_intent(frozenset({0}), masks) == frozenset({0, 3})
    assert main_thread_intent(None, masks) is None


def test_thread_node_follows_a_mask_changed_while_asleep() -> None:
    # taskset moved a sleeping thread to node 1: stat still shows CPU 0 until it runs
    assert thread_node(ThreadCpus(5, frozenset({2, 3}), 0), NODE_OF_CPU) == 1
    assert thread_node(ThreadCpus(5, ALL, 0), NODE_OF_CPU) == 0
    assert thread_node(ThreadCpus(5, None, 3), NODE_OF_CPU) == 1
    # a mask over both nodes that no longer holds the last CPU: the last CPU's node
    assert thread_node(ThreadCpus(5, frozenset({1, 2}), 3), NODE_OF_CPU) == 1


def block(node: int, faults: dict[int, int]) -> SchedFaults:
    lines = tuple(NumaFaultsLine(n, f, 0, 0, 0) for n, f in sorted(faults.items()))
    return SchedFaults("current", node, 0, lines)


def test_cross_access_is_remote_per_thread_while_the_union_says_local() -> None:
    # threads on node 0 take 90 % of their faults on node 1 and the reverse
    blocks = [(block(0, {0: 10, 1: 90}), 0), (block(0, {0: 10, 1: 90}), 0),
              (block(1, {0: 90, 1: 10}), 1), (block(1, {0: 90, 1: 10}), 1)]
    assert thread_fault_remote_share(blocks) == 0.9
    union = process_faults(b for b, _ in blocks)
    assert union is not None and set(union.by_node) == {0, 1}  # both nodes are home: 0 remote


def test_thread_fault_share_falls_back_to_the_cpu_node_and_keeps_guards() -> None:
    no_current = SchedFaults("current", None, None, (NumaFaultsLine(0, 3, 0, 0, 0),
                                                      NumaFaultsLine(1, 1, 0, 0, 0)))
    assert thread_fault_remote_share([(no_current, 1)]) == 0.75
    assert thread_fault_remote_share([(no_current, None)]) is None
    assert thread_fault_remote_share([(SchedFaults("legacy"), 0),
                                      (block(0, {0: 1}), 0)]) is None
    assert thread_fault_remote_share([(SchedFaults("absent"), 0), (None, 0)]) is None
    assert thread_fault_remote_share([(block(0, {0: 0, 1: 0}), 0)]) is None
