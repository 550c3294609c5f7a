"""Parser for the device manager's checkpoint, ``device-plugins/kubelet_internal_checkpoint``.

The file lies under the kubelet's root directory (``/var/lib/kubelet`` by default).

Formats, as ``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go`` and
``checkpointv1.go`` define them (JSON with Go's field names as keys)::

    {"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName",
                                    "DeviceIDs": {"<node>": ["<device ID>", ...]},
                                    "AllocResp": "<base64>"}, ...],
              "RegisteredDevices": {"<resource>": ["<device ID>", ...]}},
     "Checksum": N, "BootID": "..."}

``DeviceIDs`` is keyed by the NUMA node of the devices (``-1``: the plugin reported no
topology). Kubelets up to 1.19 wrote ``DeviceIDs`` as a plain list, without nodes (the
``v1`` form); the kubelet reads it as "all on node 0", this parser as "node unknown" (-1):
the file says nothing about NUMA. ``BootID`` (recent kubelets) is outside the checksum.

The checksum is ``checksum.New(cp.Data)``: FNV-32a of go-spew's ``%#v`` of the
``checkpoint.checkpointData`` value; for v1, with the type names the 1.19 kubelet used
(``checkpointData``, ``PodDevicesEntry``), as ``checkpointv1.go`` recomputes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.kubelet import envelope
from numa_exporter.parsers.kubelet import go_json as gj

MAX_BYTES = 4 << 20  # AllocResp (the plugin's Allocate answer) is the bulk: ~1 KiB a device
MAX_ENTRIES = 65_536
UNKNOWN_NODE = -1

Checksum = Literal["verified", "mismatch", "unverifiable", ""]


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """Devices of one resource assigned to one container, by NUMA node (-1: unknown)."""

    pod_uid: str
    container: str
    resource: str
    devices: dict[int, tuple[str, ...]]

    @property
    def nodes(self) -> frozenset[int]:
        """Return the NUMA nodes of the devices (the unknown node -1 left out)."""
        return frozenset(n for n, ids in self.devices.items() if ids and n != UNKNOWN_NODE)


@dataclass(frozen=True, slots=True)
class DeviceCheckpoint(envelope.CheckpointResult):
    """The device manager's assignments and the devices each plugin registered.

    ``version`` is ``v1`` (device lists without nodes) or ``v2``, empty when the file did
    not parse; ``checksum`` ``verified``, ``mismatch`` (the kubelet would refuse the file)
    or ``unverifiable`` (fields this parser does not know). ``error_count`` counts entries
    dropped (node ids out of range) plus one for a file-level error.
    """

    entries: tuple[DeviceAssignment, ...] = ()
    registered: dict[str, tuple[str, ...]] = field(default_factory=dict)
    version: str = ""
    checksum: Checksum = ""
    error: str = ""
    error_count: int = 0


_STR = gj.Str()
_IDS = gj.Slice(_STR)
_REGISTERED = gj.Map(_STR, _IDS)
_ENTRY_V2 = gj.Struct("checkpoint.PodDevicesEntry", (
    gj.Field("PodUID", "PodUID", _STR),
    gj.Field("ContainerName", "ContainerName", _STR),
    gj.Field("ResourceName", "ResourceName", _STR),
    gj.Field("DeviceIDs", "DeviceIDs", gj.Map(gj.INT64, _IDS, go="checkpoint.DevicesPerNUMA")),
    gj.Field("AllocResp", "AllocResp", gj.Bytes())))
_ENTRY_V1 = gj.Struct("checkpoint.PodDevicesEntry", (
    gj.Field("PodUID", "PodUID", _STR),
    gj.Field("ContainerName", "ContainerName", _STR),
    gj.Field("ResourceName", "ResourceName", _STR),
    gj.Field("DeviceIDs", "DeviceIDs", _IDS),
    gj.Field("AllocResp", "AllocResp", gj.Bytes())))
DATA_V2 = gj.Struct("checkpoint.checkpointData", (
    gj.Field("PodDeviceEntries", "PodDeviceEntries", gj.Slice(_ENTRY_V2)),
    gj.Field("RegisteredDevices", "RegisteredDevices", _REGISTERED)))
DATA_V1 = gj.Struct("checkpoint.checkpointData", (
    gj.Field("PodDeviceEntries", "PodDeviceEntries", gj.Slice(_ENTRY_V1)),
    gj.Field("RegisteredDevices", "RegisteredDevices", _REGISTERED)))
TOP_KEYS = ("Data", "Checksum", "BootID")


def _failed(message: str) -> DeviceCheckpoint:
    return DeviceCheckpoint(error=message, error_count=1)


def _version(data: Any) -> str:
    """Return ``v1`` when any ``DeviceIDs`` is a list, ``v2`` when any is an object, else ''."""
    entries = gj.get(data, "PodDeviceEntries") if isinstance(data, gj.Obj) else None
    for e in entries if isinstance(entries, list) and not isinstance(entries, gj.Obj) else ():
        ids = gj.get(e, "DeviceIDs") if isinstance(e, gj.Obj) else None
        if isinstance(ids, gj.Obj):
            return "v2"
        if isinstance(ids, list):
            return "v1"
    return ""


def _entries(value: dict[str, Any], version: str) -> tuple[tuple[DeviceAssignment, ...], int]:
    out: list[DeviceAssignment] = []
    errors = 0
    for e in value["PodDeviceEntries"] or ():
        if len(out) >= MAX_ENTRIES:
            errors += 1
            continue
        if version == "v1":
            devices = {UNKNOWN_NODE: tuple(e["DeviceIDs"] or ())}
        else:
            raw = e["DeviceIDs"] or {}
            devices = {n: tuple(ids or ()) for n, ids in raw.items()
                       if UNKNOWN_NODE <= n <= MAX_NODE_ID}
            if len(devices) != len(raw):
                errors += 1
        out.append(DeviceAssignment(e["PodUID"], e["ContainerName"], e["ResourceName"],
                                    devices))
    return tuple(out), errors


def parse_kubelet_internal_checkpoint(data: bytes) -> DeviceCheckpoint:
    """Return the device assignments (by pod, container, resource, NUMA node) of the file.

    Never raises: a file that is too large, not JSON, or not of the kubelet's types gives
    a result with ``error`` set and no version.
    """
    return envelope.parse_file(data, MAX_BYTES, _parse_top, _failed)


def _parse_top(top: gj.Obj) -> DeviceCheckpoint:
    """Return the assignments of the checkpoint's top-level object (v2 tried first)."""
    raw = gj.get(top, "Data")
    stored = envelope.stored_checksum(gj.get(top, "Checksum"))
    unknown = {k for k, _ in top if k.casefold() not in {t.casefold() for t in TOP_KEYS}}
    version = _version(raw)
    tried = [v for v in ("v2", "v1") if version in ("", v)]
    chosen: tuple[str, dict[str, Any]] | None = None
    checksum: Checksum = "mismatch"
    for v in tried:
        t = DATA_V2 if v == "v2" else DATA_V1
        value, d = gj.decode(t, raw)
        if chosen is None:
            chosen = (v, value)
        unknown |= d.unknown_keys
        if gj.checksum_of(gj.spew(t, value)) == stored:
            chosen, checksum = (v, value), "verified"
            break
    assert chosen is not None
    if checksum != "verified" and unknown:
        checksum = "unverifiable"
    entries, errors = _entries(chosen[1], chosen[0])
    registered = {k: tuple(v or ()) for k, v in (chosen[1]["RegisteredDevices"] or {}
                                                  ).items()}
    error = f"{errors} entries with node ids out of range" if errors else ""
    return envelope.refuse_on_mismatch(
        DeviceCheckpoint(entries, registered, chosen[0], checksum, error, errors))
