"""``/proc/driver/nvidia/gpus/<bdf>/numa_status``: the parser (written from the format of
nv_procfs_read_numa_status in NVIDIA's open-gpu-kernel-modules) and the reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import ROOTS

from numa_exporter.parsers.nvidia_numa_status import parse_nvidia_numa_status
from numa_exporter.readers.accelerators import nvidia_memory_nodes

GH_ROOT = ROOTS / "grace_hopper"


def test_an_opened_gpu_with_its_memory_online() -> None:
    r = parse_nvidia_numa_status(b"Node:      1\nStatus:    online\nAddress:   400000000000\n"
                                 b"Size:      1800000000\n")
    assert (r.node, r.status, r.online_node, r.errors) == (1, "online", 1, 0)
    assert r.address == 0x400000000000 and r.size == 96 << 30


@pytest.mark.parametrize(("data", "node", "online", "errors"), [
    # not opened yet: no Address/Size lines
    (b"Node:      4\nStatus:    offline\n", 4, None, 0),
    (b"Node:      -1\nStatus:    disabled\n", None, None, 0),
    (b"Node:      2\nStatus:    online_in_progress\n", 2, None, 0),
    (b"Node:      x\nStatus:    online\n", None, None, 1),
    (b"Node:      99999999\nStatus:    online\n", None, None, 1),
    (b"Node:      5000\nStatus:    online\n", None, None, 1),
    (b"Node:      1\nStatus:    sideways\nAddress:   zz\n", 1, None, 2),
    (b"garbage\n\x00\xff", None, None, 2),
    (b"", None, None, 0),
])
def test_other_states_and_bad_input(data: bytes, node: int | None, online: int | None,
                                    errors: int) -> None:
    r = parse_nvidia_numa_status(data)
    assert (r.node, r.online_node, r.errors) == (node, online, errors)


def test_reader_on_the_grace_hopper_root(tmp_path: Path) -> None:
    assert nvidia_memory_nodes(GH_ROOT / "proc") == ({"0009:01:00.0": frozenset({1})}, 0)
    assert nvidia_memory_nodes(tmp_path) == ({}, 0)  # no driver
