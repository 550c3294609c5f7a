"""Parser for ``/proc/vmstat`` (and node ``vmstat``/``numastat``, which share the format)."""

from __future__ import annotations

from dataclasses import dataclass, field

from numa_exporter.parsers._kv import lines, to_int

NUMA_PREFIXES = ("numa_", "pgmigrate_", "thp_migration_", "pgpromote_", "pgdemote_")


@dataclass(frozen=True, slots=True)
class Vmstat:
    """Every ``name value`` pair of the file, and how many lines could not be read."""

    values: dict[str, int] = field(default_factory=dict)
    error_count: int = 0
    first_error_line: int | None = None

    def numa_counters(self) -> dict[str, int]:
        """Return the NUMA placement and migration counters (numa_*, pgmigrate_*, ...)."""
        return {k: v for k, v in self.values.items() if k.startswith(NUMA_PREFIXES)}


def parse_vmstat(data: bytes) -> Vmstat:
    """Return the counters of a vmstat-format file."""
    values: dict[str, int] = {}
    errors = 0
    first: int | None = None
    for lineno, text in lines(data):
        parts = text.split()
        v = to_int(parts[1]) if len(parts) == 2 else None
        if v is None or not parts[0].replace("_", "a").isalnum():
            errors += 1
            first = first or lineno
            continue
        values[parts[0]] = v
    return Vmstat(values, errors, first)
