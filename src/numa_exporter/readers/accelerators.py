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
``UdevAcceleratorSource`` takes the records of libudev (``sources/udev.py``),
``FixtureAcceleratorSource`` those of a JSON dump (``UdevAcceleratorSource.dump()`` writes
one); NVIDIA's files are read through ``ProcFS`` and parsed by ``parsers/pci.py``.

Limitation: libudev always reads the running system's ``/sys`` (fixed since udev 183; the
old ``SYSFS_PATH`` override is gone) and its database from ``/run/udev``. A
``--path.sysfs`` other than the one libudev uses is therefore not honoured for discovery; a
warning is logged. In a container, share the host's ``/sys`` (it is not namespaced for PCI
devices) and mount ``/run/udev`` read-only for vendor names. ``procfs`` is honoured.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.nvidia_numa_status import parse_nvidia_numa_status
from numa_exporter.parsers.pci import (
    Kind,
    classify_pci,
    parse_char_major,
    parse_hex,
    parse_int,
    parse_nvidia_information,
)
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.udev import (
    NODE_SUBSYSTEMS,
    UdevRecord,
    UdevRecords,
    fixture_records,
)

DeviceType = Literal["char", "block"]

NVIDIA_MAJOR_DEFAULT = 195
RDMA_SUBSYSTEMS = ("infiniband", "infiniband_verbs")
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
    """One accelerator PCI device; ``node`` is its NUMA node, -1 when unknown;
    ``local_cpus`` the CPUs nearest to it (sysfs ``local_cpulist``; None: unknown)."""

    pci_address: str
    pci_class: int
    kind: Kind
    vendor_id: int
    device_id: int
    vendor_name: str | None
    driver: str  # "" when no driver is bound
    node: int
    device_nodes: tuple[DeviceNode, ...] = ()
    local_cpus: frozenset[int] | None = None

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


class AcceleratorSource(Protocol):
    """Where accelerators come from; lookups use the devices of the latest ``discover()``."""

    def discover(self) -> tuple[Accelerator, ...]:
        """Return the machine's accelerators, sorted by PCI address."""
        ...

    def device_for_rdev(self, kind: DeviceType, major: int, minor: int) -> Accelerator | None:
        """Return the accelerator owning device number (major, minor) of ``kind``, or None."""
        ...

    def device_for_devname(self, path: str) -> Accelerator | None:
        """Return the accelerator owning the device file ``path`` (``/dev/...``), or None."""
        ...



def nvidia_nodes(procfs: Path) -> dict[str, DeviceNode]:
    """Return ``/dev/nvidia<N>`` per PCI address from ``<procfs>/driver/nvidia/gpus``.

    Empty where the NVIDIA driver is not loaded or the files cannot be read.
    """
    proc = ProcFS(procfs)
    try:
        entries = proc.nvidia_gpus()
    except SourceError:
        return {}
    try:
        devices: bytes | None = proc.devices()
    except SourceError:
        devices = None
    major = parse_char_major(devices, ("nvidia", "nvidia-frontend")) if devices else None
    major = major if major is not None else NVIDIA_MAJOR_DEFAULT
    out: dict[str, DeviceNode] = {}
    for name in entries:
        try:
            data = proc.nvidia_information(name)
        except SourceError:
            continue
        minor, bus = parse_nvidia_information(data)
        if minor is None:
            continue
        out[(bus or name).lower()] = DeviceNode(f"/dev/nvidia{minor}", "nvidia", (major, minor))
    return out


def nvidia_memory_nodes(procfs: Path) -> tuple[dict[str, frozenset[int]], int]:
    """Return the NUMA node of each NVIDIA GPU's own memory, by PCI address, where the
    driver shows it online (``driver/nvidia/gpus/<bdf>/numa_status``: GH200, GB200), and
    the number of malformed lines met. Empty where the driver or the files are absent.
    """
    proc = ProcFS(procfs)
    try:
        entries = proc.nvidia_gpus()
    except SourceError:
        return {}, 0
    out: dict[str, frozenset[int]] = {}
    errors = 0
    for name in entries:
        try:
            status = parse_nvidia_numa_status(proc.nvidia_numa_status(name))
        except SourceError:
            continue  # no such file: not a NUMA-capable GPU
        errors += status.errors
        if status.online_node is not None:
            out[name.lower()] = frozenset({status.online_node})
    return out, errors


def build_accelerators(records: Iterable[UdevRecord], procfs: Path | None,
                       include_rdma: bool = False) -> tuple[Accelerator, ...]:
    """Return the accelerators described by udev ``records``, sorted by PCI address.

    ``procfs`` (None: skip) is where NVIDIA's ``driver/nvidia/gpus`` is looked up.
    """
    recs = list(records)
    children: dict[str, list[UdevRecord]] = {}
    for r in recs:
        if r.subsystem != "pci" and r.pci_parent:
            children.setdefault(r.pci_parent.lower(), []).append(r)
    nv = nvidia_nodes(procfs) if procfs is not None else {}
    out: list[Accelerator] = []
    for r in recs:
        if r.subsystem != "pci":
            continue
        addr = r.sys_name.lower()
        cls = parse_hex(r.attributes.get("class"))
        if cls is None:
            cls = parse_hex(r.properties.get("PCI_CLASS"))
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
        numa = parse_int(r.attributes.get("numa_node"))
        out.append(Accelerator(
            pci_address=addr,
            pci_class=cls,
            kind=kind,
            vendor_id=parse_hex(r.attributes.get("vendor")) or 0,
            device_id=parse_hex(r.attributes.get("device")) or 0,
            vendor_name=r.properties.get("ID_VENDOR_FROM_DATABASE") or None,
            driver=r.driver or "",
            node=numa if numa is not None and numa >= -1 else -1,
            device_nodes=tuple(sorted(nodes, key=lambda n: n.path)),
            local_cpus=parse_cpulist(r.attributes.get("local_cpulist", "")) or None,
        ))
    return tuple(sorted(out, key=lambda a: a.pci_address))


class _Indexed:
    """Lookup tables over the accelerators of the latest ``discover()``."""

    def __init__(self) -> None:
        self._accelerators: tuple[Accelerator, ...] | None = None
        self._by_rdev: dict[tuple[int, int], Accelerator] = {}
        self._by_path: dict[str, Accelerator] = {}

    def _load(self) -> tuple[Accelerator, ...]:
        raise NotImplementedError

    def discover(self) -> tuple[Accelerator, ...]:
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
            self.discover()

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


class FixtureAcceleratorSource(_Indexed):
    """Accelerators from a JSON fixture: ``{"devices": [UdevRecord.to_json(), ...]}``.

    ``procfs`` is where NVIDIA minors are looked up (None: nowhere). The file is read on
    every ``discover()``; a missing or malformed file raises (fixtures are test input).
    """

    def __init__(self, fixture: Path, procfs: Path | None = None, *,
                 include_rdma: bool = False) -> None:
        super().__init__()
        self.fixture = fixture
        self.procfs = procfs
        self.include_rdma = include_rdma

    def records(self) -> tuple[UdevRecord, ...]:
        """Return the records of the fixture file."""
        return fixture_records(self.fixture)

    def _load(self) -> tuple[Accelerator, ...]:
        return build_accelerators(self.records(), self.procfs, self.include_rdma)


class UdevAcceleratorSource(_Indexed):
    """Accelerators from libudev (pyudev), with NVIDIA minors from ``procfs``."""

    def __init__(self, procfs: Path = Path("/proc"), sysfs: Path = Path("/sys"), *,
                 include_rdma: bool = False, context: Any = None) -> None:
        super().__init__()
        self.udev = UdevRecords(sysfs, context)
        self.context = self.udev.context
        self.procfs = procfs
        self.sysfs = sysfs
        self.include_rdma = include_rdma

    def records(self) -> tuple[UdevRecord, ...]:
        """Return the udev records of every PCI device and device-node child."""
        return self.udev.records()

    def dump(self) -> dict[str, Any]:
        """Return this machine's udev records in the fixture format (for json.dump)."""
        return {"devices": [r.to_json() for r in self.records()]}

    def _load(self) -> tuple[Accelerator, ...]:
        return build_accelerators(self.records(), self.procfs, self.include_rdma)
