"""Parser for the NUMA fields of ``/proc/<pid>/sched`` (present with CONFIG_NUMA_BALANCING)."""

from __future__ import annotations

from dataclasses import dataclass, field

from numa_exporter.parsers._kv import to_int

_MIGRATED = b"numa_pages_migrated"
_AT_LINE_START = b"\n" + _MIGRATED
_MAX_DIGITS = 20
MAX_NUMNODES = 1024  # the kernel's upper bound on node ids (1 << CONFIG_NODES_SHIFT, at most 10)


@dataclass(frozen=True, slots=True)
class PidSched:
    """NUMA balancing state of one task; None/empty where the kernel does not print it."""

    numa_pages_migrated: int | None = None
    numa_preferred_nid: int | None = None
    total_numa_faults: int | None = None
    current_node: int | None = None
    numa_faults: dict[int, int] = field(default_factory=dict)  # node -> task_private+shared
    error_count: int = 0


def parse_pid_sched(data: bytes) -> PidSched:
    """Return the NUMA fields of a sched file (numa_pages_migrated by find_pages_migrated)."""
    scalars: dict[str, int | None] = {}
    faults: dict[int, int] = {}
    current: int | None = None
    errors = 0
    for raw in data.split(b"\n"):
        text = raw.decode("utf-8", "replace").strip()
        if text.startswith(("numa_preferred_nid", "total_numa_faults")):
            key, _, val = text.partition(":")
            v = to_int(val.strip())
            # numa_preferred_nid is -1 without a preferred node; a fault count never is
            nid = key.strip() == "numa_preferred_nid"
            if v is not None and (v < (-1 if nid else 0) or (nid and v >= MAX_NUMNODES)):
                v = None
            errors += v is None
            scalars[key.strip()] = v
        elif text.startswith("current_node="):
            v = to_int(text.split(",")[0].partition("=")[2])
            if v is not None and not 0 <= v < MAX_NUMNODES:  # a node id
                v = None
            errors += v is None
            current = v
        elif text.startswith("numa_faults node="):
            kv = dict(p.partition("=")[::2] for p in text[len("numa_faults "):].split())
            node = to_int(kv.get("node", ""))
            tp = to_int(kv.get("task_private", ""))
            ts = to_int(kv.get("task_shared", ""))
            if (node is None or tp is None or ts is None or min(node, tp, ts) < 0
                    or node >= MAX_NUMNODES):
                errors += 1
                continue
            faults[node] = tp + ts
    migrated, bad = find_pages_migrated(data)
    return PidSched(
        numa_pages_migrated=migrated,
        numa_preferred_nid=scalars.get("numa_preferred_nid"),
        total_numa_faults=scalars.get("total_numa_faults"),
        current_node=current,
        numa_faults=faults,
        error_count=errors + bad,
    )


def find_pages_migrated(data: bytes) -> tuple[int | None, bool]:
    """Return (numa_pages_migrated, True if that line is malformed) without parsing the rest.

    The value is None where the kernel does not print the line (no CONFIG_NUMA_BALANCING).
    The name must start a line, as the kernel prints it. Linear in the size of ``data``.
    :func:`parse_pid_sched` takes the value from here.
    """
    if data.startswith(_MIGRATED):
        i = 0
    else:
        i = data.find(_AT_LINE_START)
        if i < 0:
            return None, False
        i += 1
    while True:
        at = i + len(_MIGRATED)
        end = data.find(b"\n", at)
        rest = data[at:] if end < 0 else data[at:end]
        if not rest[:1].strip() or rest[:1] == b":":  # not a longer name
            value = rest.partition(b":")[2].strip()
            ok = 0 < len(value) <= _MAX_DIGITS and value.isdigit()
            return (int(value) if ok else None), not ok
        j = data.find(_AT_LINE_START, at)
        if j < 0:
            return None, False
        i = j + 1
