"""Parser for ``/proc/vmstat`` (and node ``vmstat``/``numastat``, which share the format)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from numa_exporter.parsers._kv import is_name, lines, to_uint

NUMA_PREFIXES = ("numa_", "pgmigrate_", "thp_migration_", "pgpromote_", "pgdemote_")

# A file of nothing but ``name value\n`` lines (what the kernel writes) is read in two C
# calls; any other file line by line. Both give the same values (a test checks it).
_WELL_FORMED = re.compile(rb"(?:[A-Za-z0-9_]+ [0-9]{1,24}\n)*")
_PAIR = re.compile(rb"([A-Za-z0-9_]+) ([0-9]{1,24})\n")


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
    """Return the counters of a vmstat-format file.

    A line counts when it is an ASCII name (letters, digits, ``_``: it becomes part of a
    metric name) and a non-negative ASCII decimal value; any other line is an error.
    """
    if _WELL_FORMED.fullmatch(data) is not None:  # the kernel's own "%s %lu\n" lines
        return Vmstat({k.decode("ascii"): int(v) for k, v in _PAIR.findall(data)})
    return _parse_lines(data)


def _parse_lines(data: bytes) -> Vmstat:
    """Return the counters of a vmstat-format file read line by line (see parse_vmstat)."""
    values: dict[str, int] = {}
    errors = 0
    first: int | None = None
    for lineno, text in lines(data):
        parts = text.split()
        v = to_uint(parts[1]) if len(parts) == 2 else None
        if v is None or not is_name(parts[0]):
            errors += 1
            first = first or lineno
            continue
        values[parts[0]] = v
    return Vmstat(values, errors, first)
