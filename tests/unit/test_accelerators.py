"""Accelerator discovery: the shared builder on a udev fixture, and pyudev on this machine."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from numa_exporter.model.snapshot import AcceleratorUse
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.pci import classify_pci, parse_char_major, parse_nvidia_information
from numa_exporter.readers.accelerators import (
    Accelerator,
    AcceleratorSource,
    DeviceNode,
    FixtureAcceleratorSource,
    UdevAcceleratorSource,
    build_accelerators,
    nvidia_nodes,
)
from numa_exporter.scan.process import accelerator_cpu_nodes
from numa_exporter.sources.topology_watch import TopologyEvent, TopologyWatch, watch_topology
from numa_exporter.sources.udev import UdevRecord

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "udev"
DGX = FIX / "dgx-h200.json"
DGX_PROC = FIX / "dgx-h200" / "proc"
SYS_PCI = Path("/sys/bus/pci/devices")


@pytest.fixture
def dgx() -> FixtureAcceleratorSource:
    return FixtureAcceleratorSource(DGX, DGX_PROC)


def by_addr(accels: tuple[Accelerator, ...]) -> dict[str, Accelerator]:
    return {a.pci_address: a for a in accels}


# --- fixture-backed source and the shared builder -----------------------------------------


def test_fixture_is_an_accelerator_source(dgx: FixtureAcceleratorSource) -> None:
    src: AcceleratorSource = dgx
    assert src.discover()


def test_default_classes(dgx: FixtureAcceleratorSource) -> None:
    got = by_addr(dgx.discover())
    assert list(got) == sorted(got)
    assert set(got) == {
        "0000:03:00.0",  # ASPEED BMC VGA (0x0300)
        "0000:1b:00.0", "0000:bb:00.0",  # H200 3D controllers (0x0302)
        "0000:3c:00.0",  # Gaudi2 processing accelerator (0x1200)
        "0000:d8:00.0",  # MI300X display controller (0x0380)
        "0000:e1:00.0",  # unbound accelerator
    }
    assert {a.kind for a in got.values()} == {"display", "accelerator"}


def test_rdma_behind_the_flag() -> None:
    got = by_addr(FixtureAcceleratorSource(DGX, DGX_PROC, include_rdma=True).discover())
    assert {"0000:29:00.0", "0000:a9:00.0"} <= set(got)  # IB controller, RoCE Ethernet
    assert "0000:4b:00.0" not in got  # igb: Ethernet without RDMA
    ib = got["0000:29:00.0"]
    assert (ib.kind, ib.driver, ib.node, ib.device) == ("rdma", "mlx5_core", 0, "uverbs0")
    assert ib.device_nodes == (DeviceNode("/dev/infiniband/uverbs0", "infiniband_verbs",
                                          (231, 192)),)
    assert got["0000:a9:00.0"].device == "uverbs1"


def test_nvidia_gpu(dgx: FixtureAcceleratorSource) -> None:
    g0, g1 = by_addr(dgx.discover())["0000:1b:00.0"], by_addr(dgx.discover())["0000:bb:00.0"]
    assert (g0.vendor_id, g0.device_id, g0.pci_class) == (0x10DE, 0x2335, 0x030200)
    assert (g0.vendor, g0.driver, g0.node, g0.kind) == ("NVIDIA Corporation", "nvidia", 0,
                                                         "display")
    assert g0.device_nodes == (
        DeviceNode("/dev/dri/card1", "drm", (226, 1)),
        DeviceNode("/dev/dri/renderD128", "drm", (226, 128)),
        DeviceNode("/dev/nvidia0", "nvidia", (195, 0)),
    )
    assert g0.device == "nvidia0"
    assert (g1.device, g1.node) == ("nvidia1", 1)


def test_unknown_numa_node_is_kept(dgx: FixtureAcceleratorSource) -> None:
    got = by_addr(dgx.discover())
    bmc = got["0000:03:00.0"]
    assert bmc.node == -1  # numa_node says -1: never guessed
    assert bmc.device == "card0"
    assert bmc.device_nodes == (DeviceNode("/dev/dri/card0", "drm", (226, 0)),)  # no connector
    unbound = got["0000:e1:00.0"]
    assert (unbound.node, unbound.driver, unbound.device_nodes) == (-1, "", ())
    assert unbound.device == "0000:e1:00.0"
    assert unbound.vendor == "0x1e52"


def test_vendor_label_without_udev_database(dgx: FixtureAcceleratorSource) -> None:
    amd = by_addr(dgx.discover())["0000:d8:00.0"]
    assert (amd.vendor_name, amd.vendor, amd.device) == (None, "0x1002", "renderD130")


def test_accel_subsystem(dgx: FixtureAcceleratorSource) -> None:
    gaudi = by_addr(dgx.discover())["0000:3c:00.0"]
    assert (gaudi.kind, gaudi.device, gaudi.vendor) == ("accelerator", "accel0",
                                                        "Habana Labs Ltd.")


def test_lookups(dgx: FixtureAcceleratorSource) -> None:
    # lookups work before list() (they load it) and after
    a = dgx.device_for_rdev("char", 226, 128)
    assert a is not None and a.pci_address == "0000:1b:00.0"
    b = dgx.device_for_rdev("char", 195, 1)
    assert b is not None and b.pci_address == "0000:bb:00.0"
    assert dgx.device_for_rdev("block", 226, 128) is None
    assert dgx.device_for_rdev("char", 1, 3) is None
    assert dgx.device_for_rdev("char", 231, 192) is None  # RDMA off
    c = dgx.device_for_devname("/dev/dri/renderD130")
    assert c is not None and c.pci_address == "0000:d8:00.0"
    d = dgx.device_for_devname("/dev/nvidia0")
    assert d is not None and d.pci_address == "0000:1b:00.0"
    e = dgx.device_for_devname("/dev/accel//accel0")
    assert e is not None and e.device == "accel0"
    assert dgx.device_for_devname("/dev/nvidia-uvm") is None


def test_no_procfs_means_no_nvidia_nodes() -> None:
    g0 = by_addr(FixtureAcceleratorSource(DGX).discover())["0000:1b:00.0"]
    assert [n.path for n in g0.device_nodes] == ["/dev/dri/card1", "/dev/dri/renderD128"]
    assert g0.device == "renderD128"


def test_nvidia_nodes_and_major(tmp_path: Path) -> None:
    assert set(nvidia_nodes(DGX_PROC)) == {"0000:1b:00.0", "0000:bb:00.0"}
    assert nvidia_nodes(tmp_path) == {}
    gpus = tmp_path / "driver" / "nvidia" / "gpus" / "0000:41:00.0"
    gpus.mkdir(parents=True)
    (gpus / "information").write_text("Model: X\nDevice Minor: \t 3\n")
    # no /proc/devices: the fixed NVIDIA major
    assert nvidia_nodes(tmp_path) == {
        "0000:41:00.0": DeviceNode("/dev/nvidia3", "nvidia", (195, 3))}
    (tmp_path / "devices").write_text(
        "Character devices:\n 10 misc\n199 nvidia-frontend\n\nBlock devices:\n195 nvidia\n")
    assert nvidia_nodes(tmp_path)["0000:41:00.0"].rdev == (199, 3)


def test_parse_helpers() -> None:
    info = (DGX_PROC / "driver/nvidia/gpus/0000:bb:00.0/information").read_bytes()
    assert parse_nvidia_information(info) == (1, "0000:bb:00.0")
    assert parse_nvidia_information(b"garbage\n\xff") == (None, None)
    devices = (DGX_PROC / "devices").read_bytes()
    assert parse_char_major(devices, ("nvidia",)) == 195
    assert parse_char_major(devices, ("accel",)) == 261
    assert parse_char_major(devices, ("sd",)) is None  # a block device


@pytest.mark.parametrize(
    ("cls", "rdma", "flag", "kind"),
    [(0x030000, False, False, "display"), (0x030200, False, False, "display"),
     (0x038000, False, False, "display"), (0x120000, False, False, "accelerator"),
     (0x120100, False, False, "accelerator"), (0x020700, False, False, None),
     (0x020700, False, True, "rdma"), (0x020000, False, True, None),
     (0x020000, True, True, "rdma"), (0x020000, True, False, None),
     (0x028000, True, True, None), (0x010802, False, True, None), (0x060400, False, True, None)],
)
def test_classify_pci(cls: int, rdma: bool, flag: bool, kind: str | None) -> None:
    assert classify_pci(cls, rdma, flag) == kind


def test_record_json_round_trip() -> None:
    obj = json.loads(DGX.read_text())
    recs = [UdevRecord.from_json(d) for d in obj["devices"]]
    assert [r.to_json() for r in recs] == obj["devices"]
    with pytest.raises(ValueError):
        UdevRecord.from_json({"sys_name": "x"})


def test_pci_class_from_properties_when_attribute_missing() -> None:
    rec = UdevRecord("pci", "0000:01:00.0", properties={"PCI_CLASS": "30000"},
                     attributes={"vendor": "0x8086", "device": "0x56a0"})
    (a,) = build_accelerators([rec], None)
    assert (a.pci_class, a.kind, a.node) == (0x030000, "display", -1)


def test_list_refreshes(tmp_path: Path) -> None:
    f = tmp_path / "u.json"
    f.write_text(json.dumps({"devices": []}))
    src = FixtureAcceleratorSource(f)
    assert src.discover() == ()
    f.write_text(DGX.read_text())
    assert len(src.discover()) == 6
    assert src.device_for_rdev("char", 226, 0) is not None


# --- the real pyudev implementation, on this machine ----------------------------------------


def _sysfs_int(path: Path, base: int) -> int | None:
    try:
        return int(path.read_text().strip(), base)
    except (OSError, ValueError):
        return None


def _sysfs_pci() -> dict[str, dict[str, Any]]:
    """Read every PCI function straight from sysfs, independently of udev."""
    out: dict[str, dict[str, Any]] = {}
    for d in sorted(SYS_PCI.iterdir()) if SYS_PCI.is_dir() else []:
        drv = d / "driver"
        numa = _sysfs_int(d / "numa_node", 10)
        out[d.name] = {
            "class": _sysfs_int(d / "class", 16),
            "vendor": _sysfs_int(d / "vendor", 16),
            "device": _sysfs_int(d / "device", 16),
            "numa": -1 if numa is None else numa,
            "driver": os.path.basename(os.readlink(drv)) if drv.is_symlink() else "",
            "rdma": (d / "infiniband").is_dir() or (d / "infiniband_verbs").is_dir(),
            "drm": sorted(p.name for p in (d / "drm").glob("*") if (p / "dev").is_file()),
        }
    return out


def _expected(sysfs: dict[str, dict[str, Any]], rdma: bool) -> set[str]:
    out = set()
    for addr, d in sysfs.items():
        c = d["class"]
        if c is None:
            continue
        base, sub = c >> 16, (c >> 8) & 0xFF
        if base in (0x03, 0x12) or (rdma and base == 0x02 and (sub == 0x07 or
                                                              (sub == 0x00 and d["rdma"]))):
            out.add(addr)
    return out


def _real_source(include_rdma: bool = False) -> UdevAcceleratorSource:
    """Return the pyudev source of this machine; skip only where libudev itself is missing."""
    pytest.importorskip("pyudev")
    if not SYS_PCI.is_dir():
        pytest.skip("no /sys/bus/pci on this machine")
    try:
        return UdevAcceleratorSource(Path("/proc"), Path("/sys"), include_rdma=include_rdma)
    except ImportError as err:  # pyudev could not load libudev.so.1
        pytest.skip(f"libudev not installed: {err}")


@pytest.fixture(scope="module")
def udev() -> UdevAcceleratorSource:
    return _real_source()


def test_real_udev_sees_every_pci_device(udev: UdevAcceleratorSource) -> None:
    sysfs = _sysfs_pci()
    recs = {r.sys_name: r for r in udev.records() if r.subsystem == "pci"}
    if not sysfs:
        pytest.skip("no PCI devices on this machine")
    assert set(recs) == set(sysfs)
    for addr, d in sysfs.items():
        r = recs[addr]
        assert int(r.attributes["class"], 16) == d["class"], addr
        assert int(r.attributes["vendor"], 16) == d["vendor"], addr
        assert int(r.attributes["device"], 16) == d["device"], addr
        assert (r.driver or "") == d["driver"], addr


@pytest.mark.parametrize("rdma", [False, True])
def test_real_udev_lists_the_display_and_accelerator_devices(rdma: bool) -> None:
    src = _real_source(rdma)
    sysfs = _sysfs_pci()
    got = by_addr(src.discover())
    assert set(got) == _expected(sysfs, rdma)
    for addr, a in got.items():
        d = sysfs[addr]
        assert (a.pci_class, a.vendor_id, a.device_id) == (d["class"], d["vendor"], d["device"])
        assert (a.node, a.driver) == (d["numa"], d["driver"])
        drm = sorted(os.path.basename(n.path) for n in a.device_nodes if n.subsystem == "drm")
        assert drm == d["drm"]
        for n in a.device_nodes:
            if n.rdev is not None and os.path.exists(n.path):
                st = os.stat(n.path)
                assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == n.rdev


def test_real_udev_dump_replays_through_the_fixture_source(udev: UdevAcceleratorSource,
                                                           tmp_path: Path) -> None:
    f = tmp_path / "this-machine.json"
    f.write_text(json.dumps(udev.dump()))
    for rdma in (False, True):
        replay = FixtureAcceleratorSource(f, Path("/proc"), include_rdma=rdma).discover()
        live = _real_source(rdma).discover()
        assert replay == live


def test_real_udev_lookups_agree_with_list(udev: UdevAcceleratorSource) -> None:
    for a in udev.discover():
        for n in a.device_nodes:
            assert udev.device_for_devname(n.path) is not None
            if n.rdev is not None:
                assert udev.device_for_rdev("char", *n.rdev) is not None
    assert udev.device_for_rdev("char", 1, 3) is None  # /dev/null


def test_other_sysfs_root_is_warned_not_used(tmp_path: Path) -> None:
    pytest.importorskip("pyudev")
    with capture_logs() as logs:
        src = UdevAcceleratorSource(tmp_path, tmp_path)
    assert [e["log_level"] for e in logs] == ["warning"]
    assert logs[0]["sysfs"] == str(tmp_path)
    assert src.records()  # still libudev's own /sys
    assert src.procfs == tmp_path


# --- topology watch --------------------------------------------------------------------------


def test_watch_on_this_machine_starts_or_declines() -> None:
    pytest.importorskip("pyudev")
    for source in ("udev", "kernel"):
        w = watch_topology(lambda e: None, source=source, poll_seconds=0.05)
        if w is None:
            continue  # no netlink here: declined without raising
        assert w.running and w.thread.daemon
        w.stop()
        assert not w.running


def test_watch_without_netlink_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    pyudev = pytest.importorskip("pyudev")

    def no_netlink(*args: object, **kwargs: object) -> None:
        raise OSError(93, "Protocol not supported")

    monkeypatch.setattr(pyudev.Monitor, "from_netlink", no_netlink)
    with capture_logs() as logs:
        assert watch_topology(lambda e: None) is None
    assert logs and logs[0]["log_level"] == "warning"


class _Dev:
    def __init__(self, action: str, subsystem: str, name: str) -> None:
        self.action, self.subsystem, self.sys_name = action, subsystem, name
        self.device_path = f"/devices/{name}"


class _FakeMonitor:
    def __init__(self, events: list[_Dev | Exception]) -> None:
        self.events = events

    def poll(self, timeout: float) -> _Dev | None:
        if not self.events:
            time.sleep(timeout)
            return None
        e = self.events.pop(0)
        if isinstance(e, Exception):
            raise e
        return e


def test_watch_thread_delivers_events_and_survives_callback_errors() -> None:
    seen: list[TopologyEvent] = []
    done = threading.Event()

    def cb(e: TopologyEvent) -> None:
        seen.append(e)
        if e.sys_name == "node1":
            done.set()
        if e.sys_name == "cpu3":
            raise RuntimeError("callback bug")

    mon = _FakeMonitor([_Dev("offline", "cpu", "cpu3"), _Dev("move", "pci", "x"),
                        _Dev("add", "pci", "0000:1b:00.0"), _Dev("online", "node", "node1")])
    w = TopologyWatch(mon, cb, poll_seconds=0.01).start()
    assert done.wait(5)
    w.stop()
    assert [(e.action, e.subsystem, e.sys_name) for e in seen] == [
        ("offline", "cpu", "cpu3"), ("add", "pci", "0000:1b:00.0"), ("online", "node", "node1")]
    assert seen[1].device_path == "/devices/0000:1b:00.0"


def test_watch_thread_ends_when_the_monitor_fails() -> None:
    w = TopologyWatch(_FakeMonitor([OSError("Observed monitor hung up")]), lambda e: None,
                      poll_seconds=0.01).start()
    w.thread.join(5)
    assert not w.running


def test_nearest_cpus_place_a_device_whose_numa_node_is_unknown() -> None:
    # firmware left numa_node at -1; the PCI device's local_cpulist names node 1's CPUs
    rec = UdevRecord("pci", "0000:41:00.0", attributes={
        "class": "0x030200", "vendor": "0x10de", "device": "0x2342", "numa_node": "-1",
        "local_cpulist": "2-3"})
    (a,) = build_accelerators([rec], None)
    assert (a.node, a.local_cpus) == (-1, frozenset({2, 3}))
    topo = Topology(nodes=(0, 1), cpus={0: frozenset({0, 1}), 1: frozenset({2, 3})})
    use = AcceleratorUse("nvidia0", a.pci_address, a.node, a.local_cpus)
    assert accelerator_cpu_nodes([use], topo) == frozenset({1})
    # a local_cpulist of every CPU says nothing; a known numa_node wins
    every = AcceleratorUse("nvidia0", a.pci_address, -1, frozenset({0, 1, 2, 3}))
    assert accelerator_cpu_nodes([every], topo) == frozenset()
    known = AcceleratorUse("nvidia0", a.pci_address, 0, frozenset({2, 3}))
    assert accelerator_cpu_nodes([known], topo) == frozenset({0})
