"""Topology is read at start and on hotplug events, not on every scan."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOTS, fixture_config

from numa_exporter.scan.sampler import Sampler
from numa_exporter.scan.scanner import Scanner


def test_topology_reread_only_after_an_event(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    cfg = fixture_config(root)
    sampler = Sampler(Scanner(cfg), interval=60)
    assert sampler.scan_once().system.topology.cpus[1] == {1}
    # CPU 1 goes offline on node 1: sysfs changes, no event yet
    (root / "sys/devices/system/node/node1/cpulist").write_text("\n")
    assert sampler.scan_once().system.topology.cpus[1] == {1}
    sampler.topology_changed()  # what the udev monitor calls on a cpu/node uevent
    assert sampler.scan_once().system.topology.cpus[1] == frozenset()
