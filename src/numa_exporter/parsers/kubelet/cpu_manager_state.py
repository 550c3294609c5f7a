"""Parser for the kubelet's CPU Manager checkpoint ``<kubelet root>/cpu_manager_state``.

Formats, as ``pkg/kubelet/cm/cpumanager/state/checkpoint.go`` defines them (all JSON):

* v1 (kubelet <= 1.17): ``{"policyName", "defaultCpuSet", "entries": {<container ID>:
  <cpuset>}, "checksum"}``;
* v2: ``entries`` keyed by pod UID, then container name: ``{<uid>: {<name>: <cpuset>}}``;
* v3 (pod-level resource managers): v2 plus ``"podEntries": {<uid>: {"cpuSet": <cpuset>}}``;
* v4 (dual checksum): the v3 fields kept for older kubelets, plus ``"data"``, the JSON text
  of ``{policyName, defaultCpuSet, entries, podEntries}``, and ``"dataChecksum"`` over it.
  ``data`` is authoritative; the outer fields are ignored, as the kubelet ignores them.

The checksum is verified as the kubelet computes it (``go_json``): v4's
``dataChecksum`` is FNV-32a of go-spew's ``(string)<data>``; v1-v3 hash the whole struct
with ``Checksum`` zeroed. Kubelets have hashed v2/v3 files under the type names
``CPUManagerCheckpoint``, ``CPUManagerCheckpointV2`` and ``CPUManagerCheckpointV3``, and with
or without the ``PodEntries`` field, so each of those is tried. A zero checksum in v1/v2 is
accepted unverified ("accept empty checksum for compatibility with old file backend").

Only exclusive CPUs appear in ``entries``: a container there owns those CPUs (static
policy, Guaranteed pod, integer CPU request); every other container runs on
``defaultCpuSet``, the shared pool. CPU ids are bounded like every CPU list here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from numa_exporter.parsers.cpulist import format_cpulist, parse_cpulist
from numa_exporter.parsers.kubelet import envelope
from numa_exporter.parsers.kubelet import go_json as gj
from numa_exporter.parsers.kubelet.envelope import Checksum

MAX_BYTES = 1 << 20  # a few hundred bytes per container; 1 MiB is thousands of pods
MAX_ENTRIES = 65_536  # containers (or pods) kept; more is not a kubelet's file


@dataclass(frozen=True, slots=True)
class CpuManagerState(envelope.CheckpointResult):
    """The CPU Manager's assignments.

    ``containers[(pod UID, container name)]`` and ``pods[pod UID]`` (pod-level, v3+) are
    exclusive CPU sets; ``by_container_id`` holds the v1 form's entries (keyed by container
    ID, no pod). ``version`` is ``v1``..``v4``, empty when the file did not parse.
    ``checksum``: ``verified``, ``absent`` (zero, accepted by the kubelet), ``mismatch``
    (the kubelet would refuse the file), ``unverifiable`` (fields this parser does not
    know). ``error`` says what was wrong, one line; ``error_count`` counts entries dropped
    (unparsable CPU lists) plus one for a file-level error.
    """

    policy: str = ""
    default_cpus: frozenset[int] | None = None
    containers: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict)
    pods: dict[str, frozenset[int]] = field(default_factory=dict)
    by_container_id: dict[str, frozenset[int]] = field(default_factory=dict)
    version: str = ""
    checksum: Checksum = ""
    error: str = ""
    error_count: int = 0


def _cpuset_value(v: Any) -> Any:
    """PodEntry.UnmarshalJSON: ``{"cpuSet": "<list>"}`` -> the set of CPU ids."""
    if v is None:
        return frozenset()
    if not isinstance(v, gj.Obj):
        raise gj.GoJSONError("a pod entry that is not an object")
    text = gj.get(v, "cpuSet")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise gj.GoJSONError("a pod entry cpuSet that is not a string")
    cpus = parse_cpulist(text)
    if cpus is None:
        raise gj.GoJSONError(f"pod entry cpuSet {text[:40]!r} is not a CPU list")
    return cpus


def _show_pod_entry(cpus: Any) -> str:
    ids = " ".join(f"{c}:{{}}" for c in sorted(cpus))
    return "{CPUSet:(cpuset.CPUSet){elems:(map[int]struct {})map[" + ids + "]}}"


_STR = gj.Str()
_ENTRIES_V1 = gj.Map(_STR, _STR)
_ENTRIES = gj.Map(_STR, gj.Map(_STR, _STR))
_POD_ENTRIES = gj.Map(_STR, gj.Custom("state.PodEntry", _cpuset_value, _show_pod_entry,
                                      frozenset()), go="state.PodCPUAssignments")
_BASE = (gj.Field("PolicyName", "policyName", _STR),
         gj.Field("DefaultCPUSet", "defaultCpuSet", _STR))
_CHECKSUM = gj.Field("Checksum", "checksum", gj.CHECKSUM)
V1 = gj.Struct("state.CPUManagerCheckpoint",
               (*_BASE, gj.Field("Entries", "entries", _ENTRIES_V1), _CHECKSUM))
V2 = gj.Struct("state.CPUManagerCheckpoint",
               (*_BASE, gj.Field("Entries", "entries", _ENTRIES), _CHECKSUM))
V3 = gj.Struct("state.CPUManagerCheckpoint",
               (*_BASE, gj.Field("Entries", "entries", _ENTRIES),
                gj.Field("PodEntries", "podEntries", _POD_ENTRIES), _CHECKSUM))
DATA = gj.Struct("state.CPUManagerCheckpointData",
                 (*_BASE, gj.Field("Entries", "entries", _ENTRIES),
                  gj.Field("PodEntries", "podEntries", _POD_ENTRIES)))
OUTER_KEYS = ("policyName", "defaultCpuSet", "entries", "podEntries", "checksum", "data",
              "dataChecksum")
NAMES = ("CPUManagerCheckpoint", "CPUManagerCheckpointV2", "CPUManagerCheckpointV3")


def _cpus(text: Any) -> frozenset[int] | None:
    return parse_cpulist(text) if isinstance(text, str) else None


def _assignments(entries: dict[str, Any] | None, pods: dict[str, Any] | None,
                 ) -> tuple[dict[tuple[str, str], frozenset[int]], dict[str, frozenset[int]],
                            int]:
    containers: dict[tuple[str, str], frozenset[int]] = {}
    errors = 0
    for uid, names in (entries or {}).items():
        for name, text in (names or {}).items():
            cpus = _cpus(text)
            if cpus is None or len(containers) >= MAX_ENTRIES:
                errors += 1
                continue
            containers[(uid, name)] = cpus
    pod_sets = dict(list((pods or {}).items())[:MAX_ENTRIES])
    errors += max(0, len(pods or {}) - MAX_ENTRIES)
    return containers, pod_sets, errors


def _result(d: dict[str, Any], version: str, checksum: Checksum) -> CpuManagerState:
    containers, pods, errors = _assignments(d.get("Entries"), d.get("PodEntries"))
    default = _cpus(d["DefaultCPUSet"])
    if default is None:
        errors += 1
    return CpuManagerState(d["PolicyName"], default, containers, pods, {}, version, checksum,
                           "" if not errors else f"{errors} CPU lists unreadable", errors)


def _failed(message: str) -> CpuManagerState:
    return CpuManagerState(error=message, error_count=1)


def _parse_v4(top: gj.Obj) -> CpuManagerState:
    got = envelope.data_field(top)
    if got is None:
        return _failed("v4 checkpoint: data is not a string")
    data, checksum = got
    value, _ = gj.decode(DATA, gj.loads(data))
    return envelope.refuse_on_mismatch(
        _result(value, "v4", checksum),
        "dataChecksum does not match data; the kubelet would refuse this checkpoint")


def _is_v1(top: gj.Obj) -> bool:
    entries = gj.get(top, "entries")
    return isinstance(entries, gj.Obj) and any(isinstance(v, str) for _, v in entries)


def _v1_entries(value: dict[str, Any]) -> tuple[dict[str, frozenset[int]], int]:
    by_id: dict[str, frozenset[int]] = {}
    errors = 0
    for cid, text in (value["Entries"] or {}).items():
        cpus = _cpus(text)
        if cpus is None or len(by_id) >= MAX_ENTRIES:
            errors += 1
            continue
        by_id[cid] = cpus
    return by_id, errors


def _parse_v1(top: gj.Obj) -> CpuManagerState:
    value, d = gj.decode_into(V1, top, {**V1.zero(), "Entries": {}})
    checksum = envelope.verdict([envelope.struct_hash_text(V1, value, "CPUManagerCheckpoint")],
                                value["Checksum"], bool(d.unknown_keys), zero_absent=True)
    by_id, errors = _v1_entries(value)
    default = _cpus(value["DefaultCPUSet"])
    errors += default is None
    return envelope.refuse_on_mismatch(CpuManagerState(
        value["PolicyName"], default, {}, {}, by_id, "v1", checksum,
        f"{errors} CPU lists unreadable" if errors else "", errors))


def _parse_v2_v3(top: gj.Obj) -> CpuManagerState:
    """Return a v2 or v3 checkpoint's assignments (no ``data`` field, entries by pod)."""
    without_pods = gj.Obj((k, v) for k, v in top if k.casefold() != "podentries")
    v2, d2 = gj.decode_into(V2, without_pods, {**V2.zero(), "Entries": {}})
    if gj.has(top, "podEntries"):
        v3, _ = gj.decode_into(V3, top, {**V3.zero(), "Entries": {}, "PodEntries": {}})
        version = "v3"
    else:
        # a v3 kubelet writes no podEntries when it has none; it hashed an empty map
        v3, version = {**v2, "PodEntries": {}}, "v2"
    candidates = [envelope.struct_hash_text(V3, v3, n) for n in NAMES]
    if version == "v2":
        candidates += [envelope.struct_hash_text(V2, v2, n) for n in NAMES]
        if not v2["Entries"]:  # nothing tells v1 from v2 apart
            v1 = {**v2, "Entries": v2["Entries"]}
            candidates.append(envelope.struct_hash_text(V1, v1, "CPUManagerCheckpoint"))
    checksum = envelope.verdict(candidates, v2["Checksum"], bool(d2.unknown_keys),
                                zero_absent=True)
    return envelope.refuse_on_mismatch(_result(v3 if version == "v3" else v2, version, checksum))


def parse_cpu_manager_state(data: bytes) -> CpuManagerState:
    """Return the CPU Manager's policy and exclusive CPU assignments from its checkpoint.

    Never raises: a file that is too large, not JSON, not an object, or does not decode
    into the kubelet's types gives a result with ``error`` set and no version.
    """
    return envelope.parse_file(data, MAX_BYTES, _parse_top, _failed)


def _parse_top(top: gj.Obj) -> CpuManagerState:
    if envelope.has_data_field(top):
        return _parse_v4(top)
    if _is_v1(top):
        return _parse_v1(top)
    return _parse_v2_v3(top)


def describe(state: CpuManagerState) -> str:
    """Return one line naming the policy and the exclusive assignments (for logs)."""
    parts = [f"policy={state.policy or '?'}", f"version={state.version or '?'}"]
    parts += [f"{uid}/{name}={format_cpulist(c)}"
              for (uid, name), c in sorted(state.containers.items())[:8]]
    return " ".join(parts)
