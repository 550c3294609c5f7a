"""Pure model functions: node classes, tiers, local/remote/far, spans, fault locality."""

from __future__ import annotations

from pathlib import Path

import pytest

from numa_exporter.model.tiers.faults import (
    ProcessFaults,
    fault_remote_share,
    process_faults,
    task_fault_split,
)
from numa_exporter.model.tiers.places import (
    MemoryTiers,
    NodeClasses,
    amounts_by_tier,
    cpu_home,
    cpu_span,
    memory_span,
    place_of,
    split_by_place,
)
from numa_exporter.parsers.osrelease import KernelRelease
from numa_exporter.parsers.pid_sched import NumaFaultsLine, SchedFaults, find_numa_faults

FIX = Path(__file__).resolve().parents[1] / "fixtures"
# A CXL-like host: nodes 0 and 1 with CPUs (DRAM, tier 4), node 2 CPU-less DRAM-speed
# memory in tier 4 as well, node 3 a dax/kmem expander in tier 22.
CPU_NODES = frozenset({0, 1})
TIER_OF = {0: 4, 1: 4, 2: 4, 3: 22}


@pytest.mark.parametrize(("node", "home", "place"), [
    (0, {0}, "local"),
    (1, {0}, "remote"),
    (2, {0}, "far"),  # CPU-less, even though it is in the home's tier
    (3, {0}, "far"),
    (3, {3}, "local"),  # an accelerator homed on its own memory node
    (0, {3}, "remote"),
    (2, {3}, "far"),
    (1, set(), "local"),  # no home: nothing is known to be remote
    (7, {0}, "far"),  # a node no list mentions has no CPU as far as we know
])
def test_place_of(node: int, home: set[int], place: str) -> None:
    assert place_of(node, frozenset(home), CPU_NODES, TIER_OF) == place


def test_lower_tier_with_cpus_is_far() -> None:
    # a CPU node in a slower tier than the home's (e.g. a socket whose memory was moved
    # to a lower tier by a driver) is far, not remote
    assert place_of(1, frozenset({0}), CPU_NODES, {0: 4, 1: 22}) == "far"
    assert place_of(0, frozenset({1}), CPU_NODES, {0: 4, 1: 22}) == "remote"  # faster
    assert place_of(1, frozenset({0}), CPU_NODES, {}) == "remote"  # no tiering


def test_split_by_place() -> None:
    amounts = {0: 100, 1: 20, 2: 3, 3: 4000}
    assert split_by_place(amounts, frozenset({0}), CPU_NODES, TIER_OF) == {
        "local": 100, "remote": 20, "far": 4003}
    assert split_by_place(amounts, frozenset({0, 1}), CPU_NODES, TIER_OF) == {
        "local": 120, "remote": 0, "far": 4003}
    assert split_by_place({}, frozenset({0}), CPU_NODES, TIER_OF) == {
        "local": 0, "remote": 0, "far": 0}


def test_amounts_by_tier() -> None:
    assert amounts_by_tier({0: 100, 1: 20, 2: 3, 3: 4000, 9: 5}, TIER_OF) == (
        {4: 123, 22: 4000}, 5)
    assert amounts_by_tier({0: 1}, {}) == ({}, 1)


def test_memory_tiers_map_nodes() -> None:
    tiers = MemoryTiers({4: frozenset({0, 1, 2}), 22: frozenset({3})})
    assert tiers.tier_of() == TIER_OF
    # the kernel never lists a node twice; if a tree does, the faster tier wins
    assert MemoryTiers({4: frozenset({1}), 22: frozenset({1})}).tier_of() == {1: 4}


def test_node_classes() -> None:
    c = NodeClasses(possible=frozenset(range(9)), online=frozenset(range(9)),
                    cpu=frozenset({0}), normal_memory=frozenset({0}),
                    memory=frozenset({0, 1}), generic_initiator=frozenset(range(2, 9)))
    assert c.cpu_less_memory_nodes() == frozenset({1})
    assert NodeClasses(memory=frozenset({0})).cpu_less_memory_nodes() is None


def test_cpu_home_drops_cpu_less_nodes() -> None:
    assert cpu_home({0, 3}, CPU_NODES) == frozenset({0})
    assert cpu_home({3}, CPU_NODES) == frozenset()


def test_spans() -> None:
    node_cpus = {0: frozenset({0, 1}), 1: frozenset({2, 3}), 2: frozenset(), 3: frozenset()}
    assert cpu_span(frozenset({1, 2}), node_cpus) == 2
    assert cpu_span(frozenset({0}), node_cpus) == 1
    assert cpu_span(frozenset(), node_cpus) == 0
    assert cpu_span(None, node_cpus) is None
    assert memory_span(frozenset({0, 1, 2, 3, 4}), frozenset({0, 1, 2, 3})) == 4
    assert memory_span(frozenset({0, 5}), frozenset({0, 1})) == 1  # 5 has no memory
    assert memory_span(frozenset({0, 5}), None) == 2
    assert memory_span(None, frozenset({0})) is None


def _block(*faults: tuple[int, int, int]) -> SchedFaults:
    lines = tuple(NumaFaultsLine(n, p, s, 0, 0) for n, p, s in faults)
    return SchedFaults("current", 0, 0, lines, 0)


def test_process_faults_sum_threads() -> None:
    pf = process_faults([_block((0, 10, 2), (1, 30, 0)), None, _block((0, 5, 0), (1, 1, 1))])
    assert pf == ProcessFaults({0: 17, 1: 32}, 2)
    assert pf is not None and pf.total == 49


def test_process_faults_absent_cases() -> None:
    assert process_faults([]) is None
    assert process_faults([None, SchedFaults()]) is None  # no fault lines printed
    assert process_faults([_block((0, 0, 0), (1, 0, 0))]) is None  # no fault taken yet
    assert process_faults([_block((0, 5, 0)), SchedFaults("legacy")]) is None


def test_process_faults_of_a_real_capture() -> None:
    data = (FIX / "realkernel/balancing_on/proc/169/task/169/sched").read_bytes()
    pf = process_faults([find_numa_faults(data)])
    assert pf == ProcessFaults({0: 4837, 1: 0}, 1)
    # its threads ran on node 0 and the memory had been migrated there: no remote fault
    assert fault_remote_share(pf, frozenset({0})) == 0.0
    assert fault_remote_share(pf, frozenset({1})) == 1.0


def test_fault_remote_share() -> None:
    pf = ProcessFaults({0: 25, 1: 50, 3: 25}, 3)
    assert fault_remote_share(pf, frozenset({0})) == 0.75
    assert fault_remote_share(pf, frozenset({0, 1})) == 0.25
    assert fault_remote_share(pf, frozenset()) is None
    assert fault_remote_share(None, frozenset({0})) is None
    assert fault_remote_share(ProcessFaults({0: 0}, 1), frozenset({0})) is None


def test_task_fault_split_refused_before_4_19() -> None:
    line = NumaFaultsLine(1, 0, 800, 0, 0)  # swapped-4.15.sched: all faults were private
    assert task_fault_split(line, KernelRelease(4, 15, 0, "4.15.0")) is None
    assert task_fault_split(line, KernelRelease(4, 18, 0, "4.18.0-553.el8")) is None
    assert task_fault_split(line, None) is None
    assert task_fault_split(line, KernelRelease(4, 19, 0, "4.19.0")) == (0, 800)
    assert task_fault_split(NumaFaultsLine(0, 4837, 0, 0, 0),
                            KernelRelease(6, 1, 0, "6.1.0-57-amd64")) == (4837, 0)
