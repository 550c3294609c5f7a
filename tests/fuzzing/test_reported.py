"""Invariant failures the fuzz targets found in parsers owned elsewhere, pinned as inputs.

Each is expected to fail until its owner fixes the parser; ``strict`` makes the fix visible
(the test then passes unexpectedly: drop the mark and the target's ``known`` note).
"""

from __future__ import annotations

import pytest
from fuzz.targets import fuzz_numa_maps, fuzz_pid_sched


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="numa_maps accepts node ids up to 4096; MAX_NUMNODES is 1024")
def test_numa_maps_node_id_beyond_max_numnodes() -> None:
    fuzz_numa_maps(b"7f00 default anon=1 dirty=1 N1412=1 kernelpagesize_kB=4\n")


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="numa_maps accepts policy nodes up to 8191; MAX_NUMNODES is 1024")
def test_numa_maps_policy_node_beyond_max_numnodes() -> None:
    fuzz_numa_maps(b"7f1000000000 bind:1144 N1=1 kernelpagesize_kB=4\n")


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="pid_sched accepts a negative numa_pages_migrated (a counter)")
def test_pid_sched_negative_pages_migrated() -> None:
    fuzz_pid_sched(b"numa_pages_migrated                          :                   -5\n")


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="pid_sched accepts a negative total_numa_faults")
def test_pid_sched_negative_total_faults() -> None:
    fuzz_pid_sched(b"total_numa_faults                            :                   -1\n")


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="pid_sched accepts a negative current_node")
def test_pid_sched_negative_current_node() -> None:
    fuzz_pid_sched(b"current_node=-3, numa_group_id=0\n")
