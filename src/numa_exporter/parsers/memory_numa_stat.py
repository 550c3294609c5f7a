"""Parser for a cgroup's ``memory.numa_stat`` (cgroup v2 and cgroup v1 formats).

cgroup v2 prints one nested-keyed line per memory type, values in **bytes**::

    anon N0=1363968 N1=0
    file N0=20480 N1=8192

cgroup v1 prints ``name=total`` followed by per-node values, in **pages**::

    total=3602 N0=3602
    hierarchical_total=28868 N0=28868

The format is detected from the first line that parses. Both formats list only nodes with
memory (``N_MEMORY``); new fields may appear anywhere, so every field is kept by name.

Not every v2 line is an amount of memory: the kernel prints every per-node item of
memory.stat, which includes event counts (``workingset_refault_file``, ``pgdemote_kswapd``,
``pgpromote_success`` on recent kernels). ``amounts()`` leaves those out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from numa_exporter.parsers._kv import lines
from numa_exporter.parsers.cpulist import MAX_NODE_ID

MAX_DIGITS = 20  # an unsigned 64-bit value; anything longer is malformed
# v2 per-node lines that count events rather than measure memory.
EVENT_PREFIXES = ("workingset_", "pgpromote_", "pgdemote_", "pgsteal", "pgscan", "numa_")


@dataclass(frozen=True, slots=True)
class MemoryNumaStat:
    """Per-field, per-node values of ``memory.numa_stat``.

    ``nodes[field][node]`` is in bytes when ``in_pages`` is False (cgroup v2) and in pages
    when it is True (cgroup v1: multiply by the page size, see ``in_bytes``). ``totals`` holds
    the v1 ``field=<total>`` values (empty for v2, which prints no totals). ``version`` is 2,
    1, or None when no line could be read. A malformed line is skipped whole and counted in
    ``error_count``; ``first_error_line`` is its 1-based line number.
    """

    nodes: dict[str, dict[int, int]] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    in_pages: bool = False
    version: int | None = None
    error_count: int = 0
    first_error_line: int | None = None

    def in_bytes(self, page_size: int) -> MemoryNumaStat:
        """Return a copy with values in bytes (v1 pages times ``page_size``; v2 unchanged)."""
        if not self.in_pages:
            return self
        return MemoryNumaStat(
            {k: {n: v * page_size for n, v in per.items()} for k, per in self.nodes.items()},
            {k: v * page_size for k, v in self.totals.items()},
            False,
            self.version,
            self.error_count,
            self.first_error_line,
        )

    def amounts(self) -> dict[str, dict[int, int]]:
        """Return the fields that are amounts of memory (bytes, or v1 pages) per node.

        Event counters printed per node by v2 (see ``EVENT_PREFIXES``) are left out.
        """
        return {k: v for k, v in self.nodes.items() if not k.startswith(EVENT_PREFIXES)}

    def node_ids(self) -> frozenset[int]:
        """Return every node id that appears in any field."""
        return frozenset(n for per in self.nodes.values() for n in per)


def _uint(text: str) -> int | None:
    if not text or len(text) > MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def _name(text: str) -> bool:
    return bool(text) and text.isascii() and text.replace("_", "a").isalnum()


def _node_values(tokens: list[str]) -> dict[int, int] | None:
    out: dict[int, int] = {}
    for tok in tokens:
        key, sep, val = tok.partition("=")
        if not sep or not key.startswith("N"):
            return None
        node = _uint(key[1:])
        v = _uint(val)
        if node is None or v is None or node > MAX_NODE_ID or node in out:
            return None
        out[node] = v
    return out


def parse_memory_numa_stat(data: bytes) -> MemoryNumaStat:
    """Return the per-node values of a ``memory.numa_stat`` file of either cgroup version.

    Lines of the other version's format than the first good line are counted as errors, as
    are duplicate fields, bad node keys and non-numeric values.
    """
    nodes: dict[str, dict[int, int]] = {}
    totals: dict[str, int] = {}
    version: int | None = None
    errors = 0
    first: int | None = None
    for lineno, text in lines(data):
        head, *rest = text.split()
        name, sep, total_s = head.partition("=")
        this_version = 1 if sep else 2
        per = _node_values(rest)
        total = _uint(total_s) if sep else None
        ok = (
            _name(name)
            and per is not None
            and (this_version == 2 or total is not None)
            and (version is None or version == this_version)
            and name not in nodes
        )
        if not ok or per is None:
            errors += 1
            first = first or lineno
            continue
        version = this_version
        nodes[name] = per
        if total is not None:
            totals[name] = total
    return MemoryNumaStat(nodes, totals, version == 1, version, errors, first)
