"""The compiled numa_maps scanner and the Python one share their limits and shared-memory
prefixes: the extension exports what it was compiled with, and they must equal Python's."""

from __future__ import annotations

import pytest

from numa_exporter.parsers import numa_maps

fast = pytest.importorskip("numa_exporter.parsers._numa_maps_fast",
                           reason="the compiled scanner is not built")


def test_node_and_line_limits_are_the_same() -> None:
    assert fast.MAX_NUMNODES == numa_maps.MAX_NUMNODES
    assert fast.MAX_LINE == numa_maps.MAX_LINE


def test_shared_memory_prefixes_are_the_same_in_the_same_order() -> None:
    assert fast.SHMEM_PREFIXES == numa_maps.SHMEM_PREFIXES
