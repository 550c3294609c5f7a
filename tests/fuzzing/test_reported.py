"""Invariant failures the fuzz targets found, pinned as inputs (each failed before its fix)."""

from __future__ import annotations

from fuzz.targets import fuzz_numa_maps, fuzz_pid_sched


def test_numa_maps_node_id_beyond_max_numnodes() -> None:
    fuzz_numa_maps(b"7f00 default anon=1 dirty=1 N1412=1 kernelpagesize_kB=4\n")


def test_numa_maps_policy_node_beyond_max_numnodes() -> None:
    fuzz_numa_maps(b"7f1000000000 bind:1144 N1=1 kernelpagesize_kB=4\n")


def test_pid_sched_negative_pages_migrated() -> None:
    fuzz_pid_sched(b"numa_pages_migrated                          :                   -5\n")


def test_pid_sched_negative_total_faults() -> None:
    fuzz_pid_sched(b"total_numa_faults                            :                   -1\n")


def test_pid_sched_negative_current_node() -> None:
    fuzz_pid_sched(b"current_node=-3, numa_group_id=0\n")


def test_pid_sched_node_ids_beyond_max_numnodes() -> None:
    fuzz_pid_sched(b"numa_preferred_nid                           :                 5000\n")
    fuzz_pid_sched(b"current_node=1024, numa_group_id=0\n")
    fuzz_pid_sched(b"numa_faults node=4096, task_private=1, task_shared=0, group_private=0, "
                   b"group_shared=0\n")
