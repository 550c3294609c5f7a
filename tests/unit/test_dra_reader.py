"""Where a DRA device sits: CDI device nodes resolved by the accelerator map (NVIDIA's
``/dev/nvidia<N>``, which has no sysfs entry, through the driver's minors) or by
``/sys/dev/char`` up to the PCI device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import ROOTS

from numa_exporter.parsers.cdi_spec import CdiDeviceNode
from numa_exporter.parsers.kubelet.dra_manager_state import DraDevice as Claimed
from numa_exporter.parsers.kubelet.dra_manager_state import DraManagerState
from numa_exporter.readers.accelerators import FixtureAcceleratorSource
from numa_exporter.readers.dra import DeviceLocality, dra_devices
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.rootfs import RootFS
from numa_exporter.sources.sysfs import DeviceNumberSysFS

INFERENCE = ROOTS / "inference"  # nvidia0 (0000:1b:00.0) on node 0, nvidia1 on node 1
DRA = ROOTS / "kubernetes_dra"


def _no_cpus(cpus: frozenset[int]) -> frozenset[int]:
    raise AssertionError("not asked")


def _locality(tmp_path: Path, accelerators: bool = True) -> DeviceLocality:
    source = (FixtureAcceleratorSource(INFERENCE / "udev.json", INFERENCE / "proc")
              if accelerators else None)
    return DeviceLocality(RootFS(tmp_path), DeviceNumberSysFS(DRA / "sys"), source)


@pytest.mark.parametrize("node, want", [
    (CdiDeviceNode("/dev/nvidia1", "/dev/nvidia1"), {1}),  # as nvidia-ctk writes: no numbers
    (CdiDeviceNode("/dev/nvidia0", "/dev/nvidia0", "c", 195, None), {0}),  # minor 0 omitted
    (CdiDeviceNode("/dev/gpu", "/dev/nvidia1"), {1}),  # the host path counts
    (CdiDeviceNode("/dev/nvidiactl", "/dev/nvidiactl"), set()),  # no PCI device
])
def test_nvidia_nodes_through_the_accelerator_map(tmp_path: Path, node: CdiDeviceNode,
                                                  want: set[int]) -> None:
    errors = ErrorReporter()
    assert _locality(tmp_path).nodes(node, _no_cpus, errors) == want
    assert errors.count == 0


def test_sysfs_numa_node_and_local_cpulist(tmp_path: Path) -> None:
    loc = _locality(tmp_path, accelerators=False)
    errors = ErrorReporter()
    render0 = CdiDeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128", "c", 226, 128)
    assert loc.nodes(render0, _no_cpus, errors) == {0}
    render1 = CdiDeviceNode("/dev/dri/renderD129", "/dev/dri/renderD129", "c", 226, 129)
    # numa_node -1: the nodes of local_cpulist 14-27
    got = loc.nodes(render1, lambda cpus: frozenset({1}) if cpus == set(range(14, 28))
                    else frozenset(), errors)
    assert got == {1} and errors.count == 0


def test_a_device_node_without_sysfs_entry_has_no_node(tmp_path: Path) -> None:
    loc = _locality(tmp_path, accelerators=False)
    node = CdiDeviceNode("/dev/x", "/dev/x", "c", 10, 200)
    assert loc.nodes(node, _no_cpus, ErrorReporter()) == frozenset()


def test_a_malformed_local_cpulist_is_counted(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    pci = sysfs / "devices" / "pci0000:00" / "0000:00:04.0"
    (pci / "drm" / "renderD131").mkdir(parents=True)
    (pci / "numa_node").write_text("-1\n")
    (pci / "local_cpulist").write_text("0-3,zz\n")
    (sysfs / "dev" / "char").mkdir(parents=True)
    os.symlink("../../devices/pci0000:00/0000:00:04.0/drm/renderD131",
               sysfs / "dev" / "char" / "226:131")
    loc = DeviceLocality(RootFS(tmp_path), DeviceNumberSysFS(sysfs), None)
    errors = ErrorReporter()
    node = CdiDeviceNode("/dev/dri/renderD131", "/dev/dri/renderD131", "c", 226, 131)
    assert loc.nodes(node, lambda c: frozenset({0}), errors) == frozenset()
    assert errors.parse_errors == {"dra_device": 1}


def test_device_numbers_are_checked() -> None:
    sysfs = DeviceNumberSysFS(DRA / "sys")
    with pytest.raises(ValueError):
        sysfs.pci_device("char", 1 << 12, 0)
    with pytest.raises(ValueError):
        sysfs.pci_device("../char", 1, 0)


def test_unknown_and_malformed_cdi_ids_leave_the_node_empty(tmp_path: Path) -> None:
    state = DraManagerState(pods={"p": (
        Claimed("u", "c", "ns", "d", "pool", "a", ("gpu.example.com/gpu=none",)),
        Claimed("u", "c", "ns", "d", "pool", "b", ("not-a-cdi-id",)),
        Claimed("u", "c", "ns", "d", "pool", "c", ("nvidia.com/gpu=1",)))},
        version="v1", checksum="verified")
    specs = {"nvidia.com/gpu=1": (CdiDeviceNode("/dev/nvidia1", "/dev/nvidia1"),)}
    got = dra_devices(state, specs, _locality(tmp_path), _no_cpus, ErrorReporter())
    assert [(d.device, d.nodes, d.paths) for d in got["p"]] == [
        ("a", frozenset(), ()), ("b", frozenset(), ()),
        ("c", frozenset({1}), ("/dev/nvidia1",))]


def test_the_host_node_gives_the_number_where_the_spec_does_not(tmp_path: Path) -> None:
    dev = tmp_path / "dev" / "dri"
    dev.mkdir(parents=True)
    try:
        os.mknod(dev / "renderD128", 0o600 | 0o020000, os.makedev(226, 128))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    os.symlink("renderD128", dev / "by-link")  # followed inside the root
    fs = RootFS(tmp_path)
    assert fs.device_number("/dev/dri/by-link") == ("char", 226, 128)
    assert fs.device_number("/dev/dri") is None  # a directory
    loc = DeviceLocality(fs, DeviceNumberSysFS(DRA / "sys"), None)
    node = CdiDeviceNode("/dev/dri/renderD128", "/dev/dri/by-link")
    assert loc.nodes(node, _no_cpus, ErrorReporter()) == {0}
