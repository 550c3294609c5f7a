"""Accelerator discovery through udev: GPUs, AI accelerators and (optionally) RDMA NICs.

An accelerator is a PCI device of class ``0x03xxxx`` (display, VGA and 3D controllers) or
``0x12xxxx`` (processing accelerators); with ``include_rdma``, also ``0x0207xx``
(InfiniBand controllers) and ``0x0200xx`` Ethernet controllers that have an RDMA device
(an ``infiniband`` or ``infiniband_verbs`` child, as mlx5_core, irdma or bnxt_re give).
For each one we report the PCI address, ids, vendor name (udev's
``ID_VENDOR_FROM_DATABASE`` where the udev database is present), driver, ``numa_node``
(``-1`` when the firmware does not say: kept, never guessed) and the device nodes a process
opens to use it:

* ``drm``: ``/dev/dri/card<N>``, ``/dev/dri/renderD<N>``
* ``accel``: ``/dev/accel/accel<N>``
* ``infiniband_verbs``: ``/dev/infiniband/uverbs<N>``
* NVIDIA's ``/dev/nvidia<N>`` are not udev devices; they are mapped through
  ``<procfs>/driver/nvidia/gpus/<pci>/information`` (``Device Minor:``), with the character
  major from ``<procfs>/devices`` (195 where it is not listed).

Two implementations of ``AcceleratorSource`` share one builder:
``UdevAcceleratorSource`` asks libudev through pyudev, ``FixtureAcceleratorSource`` reads a
JSON dump of the same records (``UdevAcceleratorSource.dump()`` writes one).

Limitation: libudev always reads the running system's ``/sys`` (fixed since udev 183; the
old ``SYSFS_PATH`` override is gone) and its database from ``/run/udev``. A
``--path.sysfs`` other than the one libudev uses is therefore not honoured for discovery; a
warning is logged. In a container, share the host's ``/sys`` (it is not namespaced for PCI
devices) and mount ``/run/udev`` read-only for vendor names. ``procfs`` is honoured.
"""

from __future__ import annotations

import builtins
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import structlog

log = structlog.get_logger("numa_exporter.sources.accelerators")

Kind = Literal["display", "accelerator", "rdma"]
DeviceType = Literal["char", "block"]

NVIDIA_MAJOR_DEFAULT = 195
NODE_SUBSYSTEMS = ("drm", "accel", "infiniband_verbs")
RDMA_SUBSYSTEMS = ("infiniband", "infiniband_verbs")
TOPOLOGY_SUBSYSTEMS = ("pci", "cpu", "memory", "node")
TOPOLOGY_ACTIONS = frozenset({"add", "remove", "change", "online", "offline", "bind", "unbind"})
# Device-label preference: the node a user recognises as "the device".
_LABEL_ORDER = ("nvidia", "accel", "renderD", "card", "uverbs")


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device file of an accelerator: ``/dev`` path, udev subsystem, (major, minor)."""

    path: str
    subsystem: str  # drm, accel, infiniband_verbs, or nvidia (not a udev subsystem)
    rdev: tuple[int, int] | None


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator PCI device; ``node`` is its NUMA node, -1 when unknown."""

    pci_address: str
    pci_class: int
    kind: Kind
    vendor_id: int
    device_id: int
    vendor_name: str | None
    driver: str  # "" when no driver is bound
    node: int
    device_nodes: tuple[DeviceNode, ...] = ()

    @property
    def device(self) -> str:
        """Return the device label: ``nvidia0``, ``accel0``, ``renderD128``... else the address."""
        names = [os.path.basename(n.path) for n in self.device_nodes]
        for prefix in _LABEL_ORDER:
            hits = sorted((n for n in names if n.startswith(prefix)), key=lambda s: (len(s), s))
            if hits:
                return hits[0]
        return self.pci_address

    @property
    def vendor(self) -> str:
        """Return the vendor label: udev's database name, else the id as ``0x10de``."""
        return self.vendor_name or f"0x{self.vendor_id:04x}"


@dataclass(frozen=True, slots=True)
class UdevRecord:
    """What the builder needs of one udev device (a PCI function or a device-node child).

    ``attributes`` holds sysfs attributes as text (``class``, ``vendor``, ``device``,
    ``numa_node`` for PCI devices); ``pci_parent`` is the address of the nearest PCI
    ancestor of a child device.
    """

    subsystem: str
    sys_name: str
    sys_path: str = ""
    driver: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    device_node: str | None = None
    rdev: tuple[int, int] | None = None
    pci_parent: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the record as a JSON-ready dict (the fixture format)."""
        return {
            "subsystem": self.subsystem, "sys_name": self.sys_name, "sys_path": self.sys_path,
            "driver": self.driver, "attributes": self.attributes,
            "properties": self.properties, "device_node": self.device_node,
            "rdev": list(self.rdev) if self.rdev else None, "pci_parent": self.pci_parent,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> UdevRecord:
        """Return the record described by a fixture dict; raise ValueError if malformed."""
        try:
            rdev = obj.get("rdev")
            return cls(
                subsystem=str(obj["subsystem"]),
                sys_name=str(obj["sys_name"]),
                sys_path=str(obj.get("sys_path", "")),
                driver=None if obj.get("driver") is None else str(obj["driver"]),
                attributes={str(k): str(v) for k, v in dict(obj.get("attributes", {})).items()},
                properties={str(k): str(v) for k, v in dict(obj.get("properties", {})).items()},
                device_node=None if obj.get("device_node") is None else str(obj["device_node"]),
                rdev=(int(rdev[0]), int(rdev[1])) if rdev else None,
                pci_parent=None if obj.get("pci_parent") is None else str(obj["pci_parent"]),
            )
        except (KeyError, TypeError, IndexError) as err:
            raise ValueError(f"bad udev fixture record {obj!r}: {err}") from err


class AcceleratorSource(Protocol):
    """Where accelerators come from; lookups use the devices of the latest ``list()``."""

    def list(self) -> tuple[Accelerator, ...]:
        """Return the machine's accelerators, sorted by PCI address."""
        ...

    def device_for_rdev(self, kind: DeviceType, major: int, minor: int) -> Accelerator | None:
        """Return the accelerator owning device number (major, minor) of ``kind``, or None."""
        ...

    def device_for_devname(self, path: str) -> Accelerator | None:
        """Return the accelerator owning the device file ``path`` (``/dev/...``), or None."""
        ...


# --- shared builder ------------------------------------------------------------------------


def _hex(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def classify_pci(pci_class: int, has_rdma: bool, include_rdma: bool) -> Kind | None:
    """Return the accelerator kind of a PCI class code (``0xCCSSPP``), or None if not one."""
    base, sub = pci_class >> 16, (pci_class >> 8) & 0xFF
    if base == 0x03:
        return "display"
    if base == 0x12:
        return "accelerator"
    if include_rdma and base == 0x02 and (sub == 0x07 or (sub == 0x00 and has_rdma)):
        return "rdma"
    return None


def parse_nvidia_information(data: bytes) -> tuple[int | None, str | None]:
    """Return (``Device Minor``, ``Bus Location``) of an NVIDIA ``information`` file."""
    minor: int | None = None
    bus: str | None = None
    for raw in data.decode("utf-8", "replace").splitlines():
        key, sep, val = raw.partition(":")
        if not sep:
            continue
        key, val = key.strip(), val.strip()
        if key == "Device Minor":
            minor = _int(val)
        elif key == "Bus Location":
            bus = val.lower() or None
    return minor, bus


def parse_char_major(data: bytes, names: Iterable[str]) -> int | None:
    """Return the major of the first character driver in ``names`` in ``/proc/devices``."""
    wanted = tuple(names)
    majors: dict[str, int] = {}
    in_char = False
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line.endswith("devices:"):
            in_char = line.startswith("Character")
            continue
        parts = line.split()
        if in_char and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return next((majors[n] for n in wanted if n in majors), None)


def _read_bytes(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 16)
    except OSError:
        return None


def nvidia_nodes(procfs: Path) -> dict[str, DeviceNode]:
    """Return ``/dev/nvidia<N>`` per PCI address from ``<procfs>/driver/nvidia/gpus``.

    Empty where the NVIDIA driver is not loaded or the files cannot be read.
    """
    base = procfs / "driver" / "nvidia" / "gpus"
    try:
        entries = sorted(e.name for e in os.scandir(base))
    except OSError:
        return {}
    devices = _read_bytes(procfs / "devices")
    major = parse_char_major(devices, ("nvidia", "nvidia-frontend")) if devices else None
    major = major if major is not None else NVIDIA_MAJOR_DEFAULT
    out: dict[str, DeviceNode] = {}
    for name in entries:
        data = _read_bytes(base / name / "information")
        if data is None:
            continue
        minor, bus = parse_nvidia_information(data)
        if minor is None:
            continue
        out[(bus or name).lower()] = DeviceNode(f"/dev/nvidia{minor}", "nvidia", (major, minor))
    return out


def build_accelerators(records: Iterable[UdevRecord], procfs: Path | None,
                       include_rdma: bool = False) -> tuple[Accelerator, ...]:
    """Return the accelerators described by udev ``records``, sorted by PCI address.

    ``procfs`` (None: skip) is where NVIDIA's ``driver/nvidia/gpus`` is looked up.
    """
    recs = builtins.list(records)
    children: dict[str, builtins.list[UdevRecord]] = {}
    for r in recs:
        if r.subsystem != "pci" and r.pci_parent:
            children.setdefault(r.pci_parent.lower(), []).append(r)
    nv = nvidia_nodes(procfs) if procfs is not None else {}
    out: builtins.list[Accelerator] = []
    for r in recs:
        if r.subsystem != "pci":
            continue
        addr = r.sys_name.lower()
        cls = _hex(r.attributes.get("class"))
        if cls is None:
            cls = _hex(r.properties.get("PCI_CLASS"))
        if cls is None:
            continue
        kids = children.get(addr, [])
        has_rdma = any(c.subsystem in RDMA_SUBSYSTEMS for c in kids)
        kind = classify_pci(cls, has_rdma, include_rdma)
        if kind is None:
            continue
        nodes = [
            DeviceNode(c.device_node, c.subsystem, c.rdev)
            for c in kids
            if c.subsystem in NODE_SUBSYSTEMS and c.device_node
        ]
        if addr in nv:
            nodes.append(nv[addr])
        numa = _int(r.attributes.get("numa_node"))
        out.append(Accelerator(
            pci_address=addr,
            pci_class=cls,
            kind=kind,
            vendor_id=_hex(r.attributes.get("vendor")) or 0,
            device_id=_hex(r.attributes.get("device")) or 0,
            vendor_name=r.properties.get("ID_VENDOR_FROM_DATABASE") or None,
            driver=r.driver or "",
            node=numa if numa is not None and numa >= -1 else -1,
            device_nodes=tuple(sorted(nodes, key=lambda n: n.path)),
        ))
    return tuple(sorted(out, key=lambda a: a.pci_address))


class _Indexed:
    """Lookup tables over the accelerators of the latest ``list()``."""

    def __init__(self) -> None:
        self._accelerators: tuple[Accelerator, ...] | None = None
        self._by_rdev: dict[tuple[int, int], Accelerator] = {}
        self._by_path: dict[str, Accelerator] = {}

    def _load(self) -> tuple[Accelerator, ...]:
        raise NotImplementedError

    def list(self) -> tuple[Accelerator, ...]:
        """Return the accelerators, discovered afresh; lookups use this result afterwards."""
        accels = self._load()
        by_rdev: dict[tuple[int, int], Accelerator] = {}
        by_path: dict[str, Accelerator] = {}
        for a in accels:
            for n in a.device_nodes:
                by_path.setdefault(n.path, a)
                if n.rdev is not None:
                    by_rdev.setdefault(n.rdev, a)
        self._accelerators, self._by_rdev, self._by_path = accels, by_rdev, by_path
        return accels

    def _ensure(self) -> None:
        if self._accelerators is None:
            self.list()

    def device_for_rdev(self, kind: DeviceType, major: int, minor: int) -> Accelerator | None:
        """Return the accelerator owning character device (major, minor), or None.

        Every accelerator device node is a character device, so ``block`` gives None.
        """
        if kind != "char":
            return None
        self._ensure()
        return self._by_rdev.get((major, minor))

    def device_for_devname(self, path: str) -> Accelerator | None:
        """Return the accelerator with device file ``path`` (``/dev/dri/renderD128``), or None."""
        self._ensure()
        return self._by_path.get(os.path.normpath(path))


# --- implementations ---------------------------------------------------------------------


class FixtureAcceleratorSource(_Indexed):
    """Accelerators from a JSON fixture: ``{"devices": [UdevRecord.to_json(), ...]}``.

    ``procfs`` is where NVIDIA minors are looked up (None: nowhere). The file is read on
    every ``list()``; a missing or malformed file raises (fixtures are test input).
    """

    def __init__(self, fixture: Path, procfs: Path | None = None, *,
                 include_rdma: bool = False) -> None:
        super().__init__()
        self.fixture = fixture
        self.procfs = procfs
        self.include_rdma = include_rdma

    def records(self) -> tuple[UdevRecord, ...]:
        """Return the records of the fixture file."""
        obj = json.loads(self.fixture.read_text())
        return tuple(UdevRecord.from_json(d) for d in obj["devices"])

    def _load(self) -> tuple[Accelerator, ...]:
        return build_accelerators(self.records(), self.procfs, self.include_rdma)


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").strip()
    return str(value).strip()


def _record(dev: Any, pci_parent: str | None = None) -> UdevRecord:
    """Return the UdevRecord of a pyudev Device."""
    attrs: dict[str, str] = {}
    if dev.subsystem == "pci":
        for name in ("class", "vendor", "device", "numa_node"):
            v = _text(dev.attributes.get(name))
            if v is not None:
                attrs[name] = v
    number = int(dev.device_number or 0)
    return UdevRecord(
        subsystem=str(dev.subsystem),
        sys_name=str(dev.sys_name),
        sys_path=str(dev.sys_path),
        driver=_text(dev.driver),
        attributes=attrs,
        properties={str(k): str(v) for k, v in dev.properties.items()},
        device_node=_text(dev.device_node),
        rdev=(os.major(number), os.minor(number)) if number else None,
        pci_parent=pci_parent,
    )


class UdevAcceleratorSource(_Indexed):
    """Accelerators from libudev (pyudev), with NVIDIA minors from ``procfs``.

    ``sysfs`` cannot be passed to libudev (see the module notes); when it differs from the
    sysfs libudev reads, a warning is logged once and libudev's is used.
    """

    def __init__(self, procfs: Path = Path("/proc"), sysfs: Path = Path("/sys"), *,
                 include_rdma: bool = False, context: Any = None) -> None:
        super().__init__()
        import pyudev

        self.procfs = procfs
        self.sysfs = sysfs
        self.include_rdma = include_rdma
        self.context = context if context is not None else pyudev.Context()
        udev_sys = Path(str(self.context.sys_path))
        if os.path.realpath(sysfs) != os.path.realpath(udev_sys):
            log.warning("udev reads its own sysfs; --path.sysfs not used for accelerators",
                        sysfs=str(sysfs), udev_sysfs=str(udev_sys))

    def records(self) -> tuple[UdevRecord, ...]:
        """Return the udev records of every PCI device and device-node child."""
        out: builtins.list[UdevRecord] = []
        for dev in self.context.list_devices(subsystem="pci"):
            try:
                out.append(_record(dev))
            except LookupError:  # pyudev.DeviceNotFoundError: removed while we read it
                continue
        for sub in (*NODE_SUBSYSTEMS, "infiniband"):
            for dev in self.context.list_devices(subsystem=sub):
                try:
                    parent = dev.find_parent("pci")
                    if parent is None:
                        continue
                    out.append(_record(dev, str(parent.sys_name)))
                except LookupError:
                    continue
        return tuple(out)

    def dump(self) -> dict[str, Any]:
        """Return this machine's udev records in the fixture format (for json.dump)."""
        return {"devices": [r.to_json() for r in self.records()]}

    def _load(self) -> tuple[Accelerator, ...]:
        return build_accelerators(self.records(), self.procfs, self.include_rdma)


# --- topology monitor --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopologyEvent:
    """A uevent of a PCI device, CPU, memory block or NUMA node."""

    action: str
    subsystem: str
    sys_name: str
    device_path: str


class TopologyWatch:
    """A running udev monitor thread; ``stop()`` ends it within about a second."""

    def __init__(self, monitor: Any, callback: Callable[[TopologyEvent], None],
                 poll_seconds: float = 1.0) -> None:
        self._monitor = monitor
        self._callback = callback
        self._poll = poll_seconds
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="numa-topology-watch",
                                       daemon=True)

    def start(self) -> TopologyWatch:
        """Start the thread and return self."""
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end and wait up to ``timeout`` seconds for it."""
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    @property
    def running(self) -> bool:
        """Return whether the monitor thread is alive."""
        return self.thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                dev = self._monitor.poll(timeout=self._poll)
            except Exception:
                log.exception("udev monitor failed; topology changes are no longer watched")
                return
            if dev is None:
                continue
            try:
                event = TopologyEvent(str(dev.action or ""), str(dev.subsystem or ""),
                                      str(dev.sys_name or ""), str(dev.device_path or ""))
            except LookupError:
                continue
            if event.action not in TOPOLOGY_ACTIONS:
                continue
            try:
                self._callback(event)
            except Exception:
                log.exception("topology callback failed", action=event.action,
                              subsystem=event.subsystem, sys_name=event.sys_name)


def watch_topology(callback: Callable[[TopologyEvent], None], *, context: Any = None,
                   source: Literal["udev", "kernel"] = "udev",
                   subsystems: tuple[str, ...] = TOPOLOGY_SUBSYSTEMS,
                   poll_seconds: float = 1.0) -> TopologyWatch | None:
    """Return a started watch calling ``callback`` on topology uevents, or None.

    Events are add, remove, change, online, offline, bind and unbind of devices in
    ``subsystems`` (PCI hotplug and driver changes, CPU and memory hotplug, node changes).
    ``source="udev"`` receives events after udevd processed them (needs a running udevd);
    ``"kernel"`` receives the kernel's raw uevents. When netlink is unavailable (no
    permission, a sandbox, no libudev) the reason is logged and None returned: the exporter
    then only sees changes at its next full rescan. The callback runs in the watch thread;
    its exceptions are logged, not raised.
    """
    try:
        import pyudev

        ctx = context if context is not None else pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(ctx, source=source)
        for sub in subsystems:
            monitor.filter_by(sub)
        monitor.start()
    except Exception as err:  # OSError, ImportError, ValueError: no netlink here
        log.warning("cannot watch udev topology events", error=str(err), source=source)
        return None
    return TopologyWatch(monitor, callback, poll_seconds).start()
