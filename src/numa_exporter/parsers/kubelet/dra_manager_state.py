"""Parser for the kubelet's DRA manager checkpoint ``<kubelet root>/dra_manager_state``.

The devices Dynamic Resource Allocation gave each pod's resource claims, as the kubelet
recorded them (``pkg/kubelet/cm/dra/state/``). Two shapes:

* current (Kubernetes 1.32+; ``checkpoint.go``, ``state.go``)::

      {"Data": "<JSON text>", "Checksum": <uint32>}

  ``Checksum`` is CRC-32 (IEEE) of the bytes of ``Data`` (``crc32.ChecksumIEEE``), and
  ``Data`` is ``{"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
  "Entries": [{"ClaimUID", "ClaimName", "Namespace", "PodUIDs": {<uid>: {}},
  "DriverState": {<driver>: {"Devices": [{"PoolName", "DeviceName", "ShareID",
  "RequestNames", "CDIDeviceIDs"}]}}}]}``; ``ShareID`` is new in 1.35. A kubelet refuses
  the file when the CRC does not match (``CorruptCheckpointError``).
* legacy (kubelets before the 1.31/1.32 rework, DRA alpha)::

      {"version": "v1", "entries": [{"DriverName", "ClassName", "ClaimUID", "ClaimName",
       "Namespace", "PodUIDs", "ResourceHandles": [...], "CDIDevices": {<driver>: [id]}}],
       "checksum": N}

  ``checksum`` is the go-spew/FNV-32a checksum the other checkpoints use
  (``checksum.New``), of ``state.DRAManagerCheckpoint`` with the ``ResourceHandles`` of
  ``resource.k8s.io/v1alpha2`` (``DriverName``, ``Data``, ``StructuredData``), or, as
  that kubelet also accepts (``verifyChecksumWithoutResourceHandles``), of the older
  struct without ``ResourceHandles``. The file names no pool or device, only the CDI device
  IDs of each driver; a device is known here by its CDI name. A handle with
  ``StructuredData`` set cannot be printed as go-spew prints it: such a file is
  ``unverifiable`` (read, as for the other checkpoints' unknown fields). A current
  kubelet finds no ``Data`` in a legacy file and refuses it; the kubelet that wrote it
  reads it by the FNV rule, and so does this parser.

Checksums are verified as the kubelet does; a file whose checksum does not match is refused
whole (``mismatch``: no claim of it is used) and counted. Entries are bounded
(``MAX_DEVICES`` devices); one beyond is dropped and counted.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from numa_exporter.parsers.kubelet import envelope
from numa_exporter.parsers.kubelet import go_json as gj
from numa_exporter.parsers.kubelet.envelope import Checksum

MAX_BYTES = 4 << 20  # a claim takes a few hundred bytes: thousands of claims
MAX_DEVICES = 65_536
API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1"
KIND = "DRACheckpoint"
UINT32 = gj.Int("uint32", 0, (1 << 32) - 1)


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device allocated to a claim: the DRA driver, the pool and device it names (the
    CDI device name where a legacy file names no device), and its CDI device IDs."""

    claim_uid: str
    claim: str
    namespace: str
    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DraManagerState(envelope.CheckpointResult):
    """The DRA manager's claims, as devices by pod.

    ``pods[pod UID]`` lists the devices of every claim that names the pod (a claim shared by
    several pods is listed under each). ``version`` is ``v1`` (the current ``Data`` form)
    or ``legacy-v1`` (kubelets before the rework), empty when the file did not parse;
    ``checksum``
    ``verified``, ``mismatch`` (refused) or ``unverifiable``. ``claims`` counts the claims
    read; ``error_count`` the devices dropped plus one for a file-level error.
    """

    pods: dict[str, tuple[DraDevice, ...]] = field(default_factory=dict)
    claims: int = 0
    api_version: str = ""
    version: str = ""
    checksum: Checksum = ""
    error: str = ""
    error_count: int = 0


_STR = gj.Str()
_UID = gj.Str("types.UID")
_EMPTY = gj.Custom("sets.Empty", lambda v: {}, lambda v: "{}", {})
_PODS = gj.Map(_STR, _EMPTY, go="sets.Set[string]")
_IDS = gj.Slice(_STR)

# the current shape: the JSON text in Data (no go-spew: only the CRC of the text counts)
_DEVICE = gj.Struct("state.Device", (
    gj.Field("PoolName", "PoolName", _STR),
    gj.Field("DeviceName", "DeviceName", _STR),
    gj.Field("ShareID", "ShareID", gj.Ptr(_UID)),
    gj.Field("RequestNames", "RequestNames", _IDS),
    gj.Field("CDIDeviceIDs", "CDIDeviceIDs", _IDS)))
_DRIVER = gj.Struct("state.DriverState", (
    gj.Field("Devices", "Devices", gj.Slice(_DEVICE)),))
_CLAIM = gj.Struct("state.ClaimInfoState", (
    gj.Field("ClaimUID", "ClaimUID", _UID),
    gj.Field("ClaimName", "ClaimName", _STR),
    gj.Field("Namespace", "Namespace", _STR),
    gj.Field("PodUIDs", "PodUIDs", _PODS),
    gj.Field("DriverState", "DriverState", gj.Map(_STR, _DRIVER))))
DATA = gj.Struct("state.CheckpointData", (
    gj.Field("Kind", "kind", _STR),
    gj.Field("APIVersion", "apiVersion", _STR),
    gj.Field("Entries", "Entries", gj.Slice(_CLAIM, go="state.ClaimInfoStateList"))))
ENVELOPE = gj.Struct("state.Checkpoint", (
    gj.Field("Data", "Data", _STR),
    gj.Field("Checksum", "Checksum", UINT32)))


def _structured(v: Any) -> Any:
    """Return a marker for a non-null ``StructuredData`` (its go-spew text is not known)."""
    return None if v is None else _SET


_SET = object()
_STRUCTURED = gj.Custom("*v1alpha2.StructuredResourceHandle", _structured,
                        lambda v: "<nil>" if v is None else "<set>")
_HANDLE = gj.Struct("v1alpha2.ResourceHandle", (
    gj.Field("DriverName", "driverName", _STR),
    gj.Field("Data", "data", _STR),
    gj.Field("StructuredData", "structuredData", _STRUCTURED)))
_LEGACY_BASE = (
    gj.Field("DriverName", "DriverName", _STR),
    gj.Field("ClassName", "ClassName", _STR),
    gj.Field("ClaimUID", "ClaimUID", _UID),
    gj.Field("ClaimName", "ClaimName", _STR),
    gj.Field("Namespace", "Namespace", _STR),
    gj.Field("PodUIDs", "PodUIDs", _PODS))
_CDI = gj.Field("CDIDevices", "CDIDevices", gj.Map(_STR, _IDS))
_LEGACY_CLAIM = gj.Struct("state.ClaimInfoState", (
    *_LEGACY_BASE, gj.Field("ResourceHandles", "ResourceHandles", gj.Slice(_HANDLE)), _CDI))
_LEGACY_CLAIM_NO_HANDLES = gj.Struct("state.ClaimInfoState", (*_LEGACY_BASE, _CDI))


def _legacy(claim: gj.Struct) -> gj.Struct:
    return gj.Struct("state.DRAManagerCheckpoint", (
        gj.Field("Version", "version", _STR),
        gj.Field("Entries", "entries", gj.Slice(claim, go="state.ClaimInfoStateList")),
        gj.Field("Checksum", "checksum", gj.CHECKSUM)))


LEGACY = _legacy(_LEGACY_CLAIM)
LEGACY_NO_HANDLES = _legacy(_LEGACY_CLAIM_NO_HANDLES)


def _failed(message: str) -> DraManagerState:
    return DraManagerState(error=message, error_count=1)


class _Collect:
    """Devices by pod, bounded by MAX_DEVICES (one dropped device, one error)."""

    def __init__(self) -> None:
        self.pods: dict[str, list[DraDevice]] = {}
        self.count = self.dropped = 0

    def add(self, pod_uids: dict[str, Any] | None, device: DraDevice) -> None:
        if self.count >= MAX_DEVICES:
            self.dropped += 1
            return
        self.count += 1
        for uid in sorted(pod_uids or {}):
            self.pods.setdefault(uid, []).append(device)


def _cdi_name(cdi_id: str) -> str:
    """Return the device name of a CDI device ID (``vendor/class=name``), else the ID."""
    return cdi_id.rpartition("=")[2] if "=" in cdi_id else cdi_id


def _result(c: _Collect, claims: int, api: str, version: str,
            checksum: Checksum) -> DraManagerState:
    pods = ({} if checksum == "mismatch"  # refused whole: nothing of it is used
            else {uid: tuple(ds) for uid, ds in sorted(c.pods.items())})
    error = f"more than {MAX_DEVICES} devices: {c.dropped} dropped" if c.dropped else ""
    return envelope.refuse_on_mismatch(DraManagerState(
        pods, claims, api, version, checksum, error, c.dropped))


def _parse_current(top: gj.Obj) -> DraManagerState:
    value, _ = gj.decode(ENVELOPE, top)
    text: str = value["Data"]
    if zlib.crc32(gj.go_bytes(text)) != value["Checksum"]:
        return envelope.refuse_on_mismatch(DraManagerState(version="v1", checksum="mismatch"))
    data, _ = gj.decode(DATA, gj.loads(text))
    c = _Collect()
    entries = data["Entries"] or []
    for claim in entries:
        for driver, state in sorted((claim["DriverState"] or {}).items()):
            for d in state["Devices"] or ():
                c.add(claim["PodUIDs"], DraDevice(
                    claim["ClaimUID"], claim["ClaimName"], claim["Namespace"], driver,
                    d["PoolName"], d["DeviceName"], tuple(d["CDIDeviceIDs"] or ())))
    return _result(c, len(entries), data["APIVersion"], "v1", "verified")


def _parse_legacy(top: gj.Obj) -> DraManagerState:
    value, d = gj.decode(LEGACY, top)
    stored = value["Checksum"]
    structured = any(h["StructuredData"] is not None for e in value["Entries"] or ()
                     for h in e["ResourceHandles"] or ())
    candidates = [envelope.struct_hash_text(LEGACY, value, "DRAManagerCheckpoint")]
    if not structured:
        old, _ = gj.decode(LEGACY_NO_HANDLES, top)
        candidates.append(envelope.struct_hash_text(LEGACY_NO_HANDLES, old,
                                                    "DRAManagerCheckpoint"))
    checksum = envelope.verdict(candidates, stored, bool(d.unknown_keys) or structured,
                                zero_absent=False)
    c = _Collect()
    entries = value["Entries"] or []
    for claim in entries:
        for driver, ids in sorted((claim["CDIDevices"] or {}).items()):
            for cdi_id in ids or ():
                c.add(claim["PodUIDs"], DraDevice(
                    claim["ClaimUID"], claim["ClaimName"], claim["Namespace"], driver, "",
                    _cdi_name(cdi_id), (cdi_id,)))
    return _result(c, len(entries), "", "legacy-v1", checksum)


def _parse_top(top: gj.Obj) -> DraManagerState:
    if gj.has(top, "Data"):
        return _parse_current(top)
    if gj.has(top, "version") or gj.has(top, "entries"):
        return _parse_legacy(top)
    return _failed("neither the current (Data/Checksum) nor the legacy (version/entries) "
                   "shape of dra_manager_state")


def parse_dra_manager_state(data: bytes) -> DraManagerState:
    """Return the DRA devices of each pod from the kubelet's DRA checkpoint.

    Never raises: a file that is too large, not JSON, not of the kubelet's types or (in the
    current shape) whose ``Data`` does not decode gives a result with ``error`` set and no
    version; one whose checksum does not match gives ``mismatch``, no pods and an error.
    """
    return envelope.parse_file(data, MAX_BYTES, _parse_top, _failed)
