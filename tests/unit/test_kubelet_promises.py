"""The kubelet's home for a container and the three ways a process breaks its promise."""

from __future__ import annotations

from numa_exporter.model.kubernetes import (
    OFF_SHARE,
    REASONS,
    Assignment,
    kubelet_home,
    kubelet_mismatches,
)

MEM0 = Assignment(memory_nodes=frozenset({0}), memory_by_type={"memory": frozenset({0})})
CPU1 = Assignment(cpus=frozenset({14, 15}), cpu_nodes=frozenset({1}))
NONE = dict.fromkeys(REASONS, False)


def test_home_prefers_memory_nodes_then_cpu_nodes() -> None:
    both = Assignment(memory_nodes=frozenset({0}), cpus=frozenset({14}),
                      cpu_nodes=frozenset({1}))
    assert kubelet_home(both) == frozenset({0})
    assert kubelet_home(CPU1) == frozenset({1})
    # devices alone make no home; nor does nothing
    assert kubelet_home(Assignment(devices={"nvidia.com/gpu": frozenset({1})})) is None
    assert kubelet_home(None) is None


def test_memory_nodes_share_threshold() -> None:
    assert OFF_SHARE == 0.05
    # exactly 5% off the assigned node is tolerated; just above it is not
    assert not kubelet_mismatches(MEM0, {0: 95, 1: 5}, frozenset())["kubelet_memory_nodes"]
    assert kubelet_mismatches(MEM0, {0: 94, 1: 6}, frozenset())["kubelet_memory_nodes"]
    assert kubelet_mismatches(MEM0, {}, frozenset()) == NONE  # nothing resident


def test_cpu_nodes() -> None:
    assert kubelet_mismatches(CPU1, {1: 1}, frozenset({1})) == NONE
    assert kubelet_mismatches(CPU1, {1: 1}, frozenset({0, 1}))["kubelet_cpu_nodes"]
    # shared-pool containers (no exclusive CPUs) promise nothing about threads
    assert not kubelet_mismatches(MEM0, {0: 1}, frozenset({1}))["kubelet_cpu_nodes"]


def test_device_node_against_memory_else_cpus() -> None:
    gpu1 = {"nvidia.com/gpu": frozenset({1})}
    mem_gpu1 = Assignment(memory_nodes=frozenset({0}), devices=gpu1)
    assert kubelet_mismatches(mem_gpu1, {0: 1}, frozenset())["kubelet_device_node"]
    cpu_gpu1 = Assignment(cpus=frozenset({14}), cpu_nodes=frozenset({1}), devices=gpu1)
    assert not kubelet_mismatches(cpu_gpu1, {1: 1}, frozenset())["kubelet_device_node"]
    cpu0_gpu1 = Assignment(cpus=frozenset({1}), cpu_nodes=frozenset({0}), devices=gpu1)
    assert kubelet_mismatches(cpu0_gpu1, {0: 1}, frozenset())["kubelet_device_node"]
    # a device without topology (no node) and a device alone say nothing
    no_topo = Assignment(memory_nodes=frozenset({0}), devices={"r": frozenset()})
    assert kubelet_mismatches(no_topo, {0: 1}, frozenset()) == NONE
    assert kubelet_mismatches(Assignment(devices=gpu1), {0: 1}, frozenset({0})) == NONE


def test_no_assignment_no_mismatch() -> None:
    assert kubelet_mismatches(None, {0: 1, 1: 99}, frozenset({0, 1})) == NONE
