"""Parser for ``/proc/sys/kernel/numa_balancing`` and its promote rate limit."""

from __future__ import annotations

from numa_exporter.parsers._kv import to_int


def parse_sysctl_int(data: bytes) -> int | None:
    """Return the single integer a sysctl file holds, or None if it holds something else."""
    return to_int(data.decode("ascii", "replace").strip())


def parse_numa_balancing(data: bytes) -> int | None:
    """Return the numa_balancing mode (0 off, 1 normal, 2 tiering, 3 both), or None if bad."""
    v = parse_sysctl_int(data)
    return v if v is not None and 0 <= v <= 3 else None
