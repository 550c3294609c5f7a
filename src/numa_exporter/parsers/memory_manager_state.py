"""Parser for the kubelet's Memory Manager checkpoint ``<kubelet root>/memory_manager_state``.

Formats, as ``pkg/kubelet/cm/memorymanager/state/checkpoint.go`` and ``state.go`` define
them (JSON):

* v1: ``{"policyName", "machineState": {<node>: {"numberOfAssignments", "memoryMap":
  {<type>: {"total", "systemReserved", "allocatable", "reserved", "free"}}, "cells"}},
  "entries": {<pod UID>: {<container>: [{"numaAffinity": [<node>...], "type", "size"}]}},
  "checksum"}``; ``type`` is a resource name: ``memory``, ``hugepages-2Mi``, ...
* v2 (pod-level resource managers): v1 plus ``"podEntries": {<uid>: {"memoryBlocks":
  [<block>...]}}``;
* v3 (dual checksum): the v1 fields kept for older kubelets, plus ``"data"``, the JSON text
  of ``{policyName, machineState, entries, podEntries}``, and ``"dataChecksum"`` over it.
  ``data`` is authoritative.

Checksums are verified as the kubelet computes them (``_kubelet_checksum``): v3's over the
data string, v1/v2's over the struct (type name ``MemoryManagerCheckpoint``, as every
kubelet writes it; ``MemoryManagerCheckpointV2`` is tried too). A zero v1 checksum is
accepted unverified, as the kubelet accepts it.

``numaAffinity`` lists the nodes a block may use: with the Static policy, the container's
``cpuset.mems``. Node ids are bounded (0..1023); a block naming another is dropped and
counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from numa_exporter.parsers import _checkpoint_envelope as envelope
from numa_exporter.parsers import _kubelet_checksum as gj
from numa_exporter.parsers._checkpoint_envelope import Checksum
from numa_exporter.parsers.cpulist import MAX_NODE_ID

MAX_BYTES = 1 << 20
MAX_BLOCKS = 65_536
MAX_TYPES = 8  # memory types a node lists (memory and a few hugepage sizes)


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """One assignment: ``size`` bytes of memory type ``type`` on the nodes ``nodes``."""

    nodes: frozenset[int]
    type: str
    size: int


@dataclass(frozen=True, slots=True)
class MemoryManagerState(envelope.CheckpointResult):
    """The Memory Manager's assignments.

    ``containers[(pod UID, container name)]`` and ``pods[pod UID]`` (pod-level, v2+) are the
    blocks assigned; ``machine_nodes`` the nodes of ``machineState``; ``reserved[(node,
    type)]`` the bytes of a memory type the Memory Manager reserved for containers on a node
    (``machineState``'s ``memoryMap.<type>.reserved``: the kubelet's own per-node account,
    which also splits blocks that span several nodes). ``version`` is
    ``v1``..``v3``, empty when the file did not parse; ``checksum`` as for the CPU Manager
    (``verified``, ``absent``, ``mismatch``, ``unverifiable``). ``error`` says what was
    wrong; ``error_count`` counts blocks dropped plus one for a file-level error.
    """

    policy: str = ""
    machine_nodes: frozenset[int] = frozenset()
    containers: dict[tuple[str, str], tuple[MemoryBlock, ...]] = field(default_factory=dict)
    pods: dict[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)
    reserved: dict[tuple[int, str], int] = field(default_factory=dict)
    version: str = ""
    checksum: Checksum = ""
    error: str = ""
    error_count: int = 0


_STR = gj.Str()
_TYPE = gj.Str("v1.ResourceName")
_TABLE = gj.Struct("state.MemoryTable", (
    gj.Field("TotalMemSize", "total", gj.UINT64),
    gj.Field("SystemReserved", "systemReserved", gj.UINT64),
    gj.Field("Allocatable", "allocatable", gj.UINT64),
    gj.Field("Reserved", "reserved", gj.UINT64),
    gj.Field("Free", "free", gj.UINT64)))
_NODE = gj.Struct("state.NUMANodeState", (
    gj.Field("NumberOfAssignments", "numberOfAssignments", gj.INT),
    gj.Field("MemoryMap", "memoryMap", gj.Map(_TYPE, gj.Ptr(_TABLE))),
    gj.Field("Cells", "cells", gj.Slice(gj.INT))))
_MACHINE = gj.Map(gj.INT, gj.Ptr(_NODE), go="state.NUMANodeMap")
_BLOCK = gj.Struct("state.Block", (
    gj.Field("NUMAAffinity", "numaAffinity", gj.Slice(gj.INT)),
    gj.Field("Type", "type", _TYPE),
    gj.Field("Size", "size", gj.UINT64)))
_ENTRIES = gj.Map(_STR, gj.Map(_STR, gj.Slice(_BLOCK)), go="state.ContainerMemoryAssignments")
_POD_ENTRY = gj.Struct("state.PodEntry", (
    gj.Field("MemoryBlocks", "memoryBlocks", gj.Slice(_BLOCK)),))
_POD_ENTRIES = gj.Map(_STR, _POD_ENTRY, go="state.PodMemoryAssignments")
_BASE = (gj.Field("PolicyName", "policyName", _STR),
         gj.Field("MachineState", "machineState", _MACHINE),
         gj.Field("Entries", "entries", _ENTRIES))
_CHECKSUM = gj.Field("Checksum", "checksum", gj.CHECKSUM)
V1 = gj.Struct("state.MemoryManagerCheckpoint", (*_BASE, _CHECKSUM))
V2 = gj.Struct("state.MemoryManagerCheckpoint",
               (*_BASE, gj.Field("PodEntries", "podEntries", _POD_ENTRIES), _CHECKSUM))
DATA = gj.Struct("state.MemoryManagerCheckpointData",
                 (*_BASE, gj.Field("PodEntries", "podEntries", _POD_ENTRIES)))
NAMES = ("MemoryManagerCheckpoint", "MemoryManagerCheckpointV2")


def _blocks(raw: list[dict[str, Any]] | None, budget: list[int]) -> tuple[
        tuple[MemoryBlock, ...], int]:
    out: list[MemoryBlock] = []
    errors = 0
    for b in raw or ():
        nodes = b["NUMAAffinity"] or []
        if budget[0] <= 0 or any(not 0 <= n <= MAX_NODE_ID for n in nodes):
            errors += 1
            continue
        budget[0] -= 1
        out.append(MemoryBlock(frozenset(nodes), b["Type"], b["Size"]))
    return tuple(out), errors


def _result(d: dict[str, Any], version: str, checksum: Checksum) -> MemoryManagerState:
    budget = [MAX_BLOCKS]
    errors = 0
    containers: dict[tuple[str, str], tuple[MemoryBlock, ...]] = {}
    for uid, names in (d["Entries"] or {}).items():
        for name, raw in (names or {}).items():
            blocks, bad = _blocks(raw, budget)
            errors += bad
            containers[(uid, name)] = blocks
    pods: dict[str, tuple[MemoryBlock, ...]] = {}
    for uid, entry in (d.get("PodEntries") or {}).items():
        blocks, bad = _blocks(entry["MemoryBlocks"], budget)
        errors += bad
        pods[uid] = blocks
    machine = d["MachineState"] or {}
    nodes = frozenset(n for n in machine if 0 <= n <= MAX_NODE_ID)
    errors += len(machine) - len(nodes)
    return envelope.refuse_on_mismatch(MemoryManagerState(
        d["PolicyName"], nodes, containers, pods, _reserved(machine, nodes), version,
        checksum, f"{errors} blocks or nodes out of range" if errors else "", errors))


def _reserved(machine: dict[int, Any], nodes: frozenset[int]) -> dict[tuple[int, str], int]:
    """Return (node, memory type) -> reserved bytes of ``machineState`` (nodes in range;
    at most MAX_TYPES types a node, the first in name order)."""
    out: dict[tuple[int, str], int] = {}
    for node in sorted(nodes):
        state = machine[node] or {}
        tables = state.get("MemoryMap") or {}
        for kind in sorted(tables)[:MAX_TYPES]:
            table = tables[kind]
            if table is not None and kind:
                out[(node, kind)] = int(table["Reserved"])
    return out


def _failed(message: str) -> MemoryManagerState:
    return MemoryManagerState(error=message, error_count=1)


def _parse_v3(top: gj.Obj) -> MemoryManagerState:
    got = envelope.data_field(top)
    if got is None:
        return _failed("v3 checkpoint: data is not a string")
    data, checksum = got
    value, _ = gj.decode_into(DATA, gj.loads(data), {
        **DATA.zero(), "MachineState": {}, "Entries": {}, "PodEntries": {}})
    return _result(value, "v3", checksum)


def _parse_v1_v2(top: gj.Obj) -> MemoryManagerState:
    without_pods = gj.Obj((k, v) for k, v in top if k.casefold() != "podentries")
    v1, d1 = gj.decode_into(V1, without_pods, {**V1.zero(), "MachineState": {}, "Entries": {}})
    if gj.has(top, "podEntries"):
        v2, _ = gj.decode_into(V2, top, {**V2.zero(), "MachineState": {}, "Entries": {},
                                         "PodEntries": {}})
        version, value = "v2", v2
    else:
        v2, version, value = {**v1, "PodEntries": {}}, "v1", v1
    candidates = [envelope.struct_hash_text(V2, v2, n) for n in NAMES]
    if version == "v1":
        candidates = [envelope.struct_hash_text(V1, v1, "MemoryManagerCheckpoint"), *candidates]
    checksum = envelope.verdict(candidates, v1["Checksum"], bool(d1.unknown_keys),
                                zero_absent=version == "v1")
    return _result(value, version, checksum)


def parse_memory_manager_state(data: bytes) -> MemoryManagerState:
    """Return the Memory Manager's policy and assignments from its checkpoint.

    Never raises: a file that is too large, not JSON or not of the kubelet's types gives a
    result with ``error`` set and no version.
    """
    return envelope.parse_file(data, MAX_BYTES, _parse_top, _failed)


def _parse_top(top: gj.Obj) -> MemoryManagerState:
    if envelope.has_data_field(top):
        return _parse_v3(top)
    return _parse_v1_v2(top)
