"""Parser for the NUMA fields of ``/proc/<pid>/sched`` (present with CONFIG_NUMA_BALANCING)."""

from __future__ import annotations

from dataclasses import dataclass, field

from numa_exporter.parsers._kv import to_int


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
    """Return the NUMA fields of a sched file."""
    scalars: dict[str, int | None] = {}
    faults: dict[int, int] = {}
    current: int | None = None
    errors = 0
    for raw in data.split(b"\n"):
        text = raw.decode("utf-8", "replace").strip()
        if text.startswith(("numa_pages_migrated", "numa_preferred_nid", "total_numa_faults")):
            key, _, val = text.partition(":")
            v = to_int(val.strip())
            errors += v is None
            scalars[key.strip()] = v
        elif text.startswith("current_node="):
            v = to_int(text.split(",")[0].partition("=")[2])
            errors += v is None
            current = v
        elif text.startswith("numa_faults node="):
            kv = dict(p.partition("=")[::2] for p in text[len("numa_faults "):].split())
            node = to_int(kv.get("node", ""))
            tp = to_int(kv.get("task_private", ""))
            ts = to_int(kv.get("task_shared", ""))
            if node is None or tp is None or ts is None:
                errors += 1
                continue
            faults[node] = tp + ts
    return PidSched(
        numa_pages_migrated=scalars.get("numa_pages_migrated"),
        numa_preferred_nid=scalars.get("numa_preferred_nid"),
        total_numa_faults=scalars.get("total_numa_faults"),
        current_node=current,
        numa_faults=faults,
        error_count=errors,
    )
