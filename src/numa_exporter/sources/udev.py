"""udev records of PCI devices and their device-node children: from libudev (pyudev) or
from a JSON dump of the same records (``--accelerator.records``). Bytes only: the records
are turned into accelerators in ``readers/accelerators.py``.

libudev always reads the running system's ``/sys`` (fixed since udev 183) and its database
from ``/run/udev``; a ``--path.sysfs`` other than that is not honoured here (a warning is
logged).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("numa_exporter.sources.udev")

NODE_SUBSYSTEMS = ("drm", "accel", "infiniband_verbs")


@dataclass(frozen=True, slots=True)
class UdevRecord:
    """What the builder needs of one udev device (a PCI function or a device-node child).

    ``attributes`` holds sysfs attributes as text (``class``, ``vendor``, ``device``,
    ``numa_node``, ``local_cpulist`` for PCI devices); ``pci_parent`` is the address of the
    nearest PCI ancestor of a child device.
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


def fixture_records(path: Path) -> tuple[UdevRecord, ...]:
    """Return the records of a JSON dump (``{"devices": [...]}``); raise on a bad file."""
    obj = json.loads(path.read_text())
    return tuple(UdevRecord.from_json(d) for d in obj["devices"])


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
        for name in ("class", "vendor", "device", "numa_node", "local_cpulist"):
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


class UdevRecords:
    """The records libudev (pyudev) has now.

    ``sysfs`` cannot be passed to libudev; when it differs from the sysfs libudev reads, a
    warning is logged and libudev's is used.
    """

    def __init__(self, sysfs: Path = Path("/sys"), context: Any = None) -> None:
        import pyudev

        self.context = context if context is not None else pyudev.Context()
        udev_sys = Path(str(self.context.sys_path))
        if os.path.realpath(sysfs) != os.path.realpath(udev_sys):
            log.warning("udev reads its own sysfs; --path.sysfs not used for accelerators",
                        sysfs=str(sysfs), udev_sysfs=str(udev_sys))

    def records(self) -> tuple[UdevRecord, ...]:
        """Return the udev records of every PCI device and device-node child."""
        out: list[UdevRecord] = []
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
