"""Parser for a cgroup's ``memory.stat`` (``key value`` lines; v2 and v1 share the format).

In cgroup v2 memory amounts are bytes and event fields are counts; cgroup v1 prints the same
shape (``cache``, ``rss``, ``total_*``). The NUMA balancing and tiering event counters
(``numa_pages_migrated``, ``numa_pte_updates``, ``numa_hint_faults``, ``pgpromote_success``,
``pgdemote_kswapd``/``_direct``/``_khugepaged``/``_proactive``, ...) exist only in v2 and only
on kernels built with NUMA balancing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from numa_exporter.parsers._kv import lines

MAX_DIGITS = 20  # an unsigned 64-bit value
NUMA_BALANCING_PREFIXES = ("numa_", "pgpromote_", "pgdemote_")


@dataclass(frozen=True, slots=True)
class MemoryStat:
    """Every ``key value`` field of the file, and how many lines could not be read."""

    values: dict[str, int] = field(default_factory=dict)
    error_count: int = 0
    first_error_line: int | None = None

    def numa_balancing_counters(self) -> dict[str, int]:
        """Return the NUMA balancing/tiering counters (``numa_*``, ``pgpromote_*``, ...)."""
        return numa_balancing_counters(self.values)


def numa_balancing_counters(values: dict[str, int]) -> dict[str, int]:
    """Return the fields of ``values`` whose names start with numa_, pgpromote_ or pgdemote_."""
    return {k: v for k, v in values.items() if k.startswith(NUMA_BALANCING_PREFIXES)}


def parse_memory_stat(data: bytes) -> MemoryStat:
    """Return the fields of a ``memory.stat`` file; malformed or repeated lines are counted."""
    values: dict[str, int] = {}
    errors = 0
    first: int | None = None
    for lineno, text in lines(data):
        parts = text.split()
        key = parts[0]
        ok = (
            len(parts) == 2
            and key.isascii()
            and key.replace("_", "a").isalnum()
            and key not in values
            and parts[1].isascii()
            and parts[1].isdigit()
            and len(parts[1]) <= MAX_DIGITS
        )
        if not ok:
            errors += 1
            first = first or lineno
            continue
        values[key] = int(parts[1])
    return MemoryStat(values, errors, first)
