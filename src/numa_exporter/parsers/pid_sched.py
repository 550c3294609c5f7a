"""Parser for the NUMA fields of ``/proc/<pid>/sched`` (present with CONFIG_NUMA_BALANCING).

What the kernel prints (``sched_show_numa()`` in kernel/sched/debug.c, the per-node lines from
``show_numa_stats()`` in kernel/sched/fair.c through ``print_numa_stats()``), since commit
397f2378f136 ("sched/numa: Fix numa balancing stats in /proc/pid/sched", v4.2)::

    mm->numa_scan_seq                            :                    2
    numa_pages_migrated                          :                32772
    numa_preferred_nid                           :                    0
    total_numa_faults                            :                 4837
    current_node=0, numa_group_id=0
    numa_faults node=0 task_private=4837 task_shared=0 group_private=0 group_shared=0
    numa_faults node=1 task_private=0 task_shared=0 group_private=0 group_shared=0

One ``numa_faults`` line per *online* node, CPU-less nodes included, in node order. The counts
are the task's (and its NUMA group's) NUMA hinting faults on pages that live on that node,
exponentially decayed: ``task_numa_placement()`` halves them once per scan sequence before
adding the new faults. They are all 0 until the task takes its first hinting fault (the
array is allocated then) and for a kernel thread. ``numa_group_id`` is the pid that leads
the task's NUMA group, 0 when it has none; group counts are the whole group's (threads and
processes that share pages), so they must not be summed over threads.

Forms this parser refuses (``numa_format`` says which one it saw):

* ``"legacy"`` — 3.13 to 4.1 printed ``numa_migrations, N`` and per node and fault type
  ``numa_faults, i, node, cpu_current, home_node, nr`` (3.15+: ``numa_faults_memory, ...``),
  and **reset** ``numa_pages_migrated`` on every read (``xchg(&p->numa_pages_migrated, 0)``).
  Nothing is taken from such a file: no faults, no migrations. The reset already happened
  when the file was read, so the reader should stop reading ``sched`` for NUMA data on that
  kernel. It is told by the text alone: the ``numa_migrations,`` line, which those kernels
  always print and later ones never do.
* Swapped labels (4.2 to 4.18): ``print_numa_stats(m, node, tsf, tpf, gsf, gpf)`` printed
  ``task_private=<shared> task_shared=<private>`` (and the same for group); commit
  67d9f6c256cd ("sched/debug: Reverse the order of printing faults", v4.19) fixed it. The
  text is identical in both cases and the lines around it did not change in that release, so
  **it cannot be told from the file**. Distribution kernels also carry the fix below 4.19
  (SUSE backported it to its 4.12 kernel), so a version check can only be conservative. The
  parser therefore keeps the values under the labels as printed (:class:`NumaFaultsLine`);
  per-node totals (private + shared) are the same either way, and the private/shared split
  is only trusted through ``model.tiers.faults.task_fault_split`` with the kernel release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from numa_exporter.parsers._kv import to_int

_MIGRATED = b"numa_pages_migrated"
_AT_LINE_START = b"\n" + _MIGRATED
_CURRENT = b"current_node="
# 3.13-4.1 always print "numa_migrations, N"; its 16 characters do not fit in a comm (15),
# so a process cannot make its own header line look like it
_LEGACY = b"numa_migrations,"
_RULE = b"-" * 67 + b"\n"  # the line under the "comm (pid, #threads: n)" header
_MAX_DIGITS = 20
MAX_NUMNODES = 1024  # the kernel's upper bound on node ids (1 << CONFIG_NODES_SHIFT, at most 10)
PID_MAX_LIMIT = 4 * 1024 * 1024  # numa_group_id is a pid (task_pid_nr of the group's leader)
# print_numa_stats(): "numa_faults node=%d task_private=%lu task_shared=%lu
# group_private=%lu group_shared=%lu"; ASCII digits only, at most 20 (2**64 has 20)
_FAULT_LINES = re.compile(
    rb"^numa_faults node=([0-9]{1,4}) task_private=([0-9]{1,20}) task_shared=([0-9]{1,20})"
    rb" group_private=([0-9]{1,20}) group_shared=([0-9]{1,20})$", re.MULTILINE)
_FAULT_NAME = b"\nnuma_faults"
_ZERO_TEXT = (b"0", b"0", b"0", b"0")
_ZEROS = (0, 0, 0, 0)

NumaFormat = Literal["absent", "current", "legacy"]


class NumaFaultsLine(NamedTuple):
    """One ``numa_faults node=N ...`` line: the values under the labels the kernel printed.

    On 4.2-4.18 kernels the private and shared values are swapped (see the module doc);
    ``task_total`` and ``group_total`` are right on every kernel. (A NamedTuple, immutable
    like the dataclasses here, because one is built per node per thread read.)
    """

    node: int
    task_private: int
    task_shared: int
    group_private: int
    group_shared: int

    @property
    def task_total(self) -> int:
        """Return task_private + task_shared (the task's decayed faults on this node)."""
        return self.task_private + self.task_shared

    @property
    def group_total(self) -> int:
        """Return group_private + group_shared (the NUMA group's decayed faults on it)."""
        return self.group_private + self.group_shared


@dataclass(frozen=True, slots=True)
class SchedFaults:
    """The NUMA fault block of a sched file.

    ``numa_format`` is ``"absent"`` (no NUMA lines: no CONFIG_NUMA_BALANCING, or
    CONFIG_SCHED_DEBUG off), ``"current"`` or ``"legacy"`` (refused: everything else empty).
    """

    numa_format: NumaFormat = "absent"
    current_node: int | None = None
    numa_group_id: int | None = None
    lines: tuple[NumaFaultsLine, ...] = ()
    error_count: int = 0

    def task_faults(self) -> dict[int, int]:
        """Return node -> task_private + task_shared for the lines read."""
        return {ln.node: ln.task_total for ln in self.lines}


@dataclass(frozen=True, slots=True)
class PidSched:
    """NUMA balancing state of one task; None/empty where the kernel does not print it."""

    numa_pages_migrated: int | None = None
    numa_preferred_nid: int | None = None
    total_numa_faults: int | None = None
    current_node: int | None = None
    numa_faults: dict[int, int] = field(default_factory=dict)  # node -> task_private+shared
    error_count: int = 0
    numa_group_id: int | None = None
    fault_lines: tuple[NumaFaultsLine, ...] = ()
    numa_format: NumaFormat = "absent"


def parse_pid_sched(data: bytes) -> PidSched:
    """Return the NUMA fields of a sched file.

    ``numa_pages_migrated`` comes from :func:`find_pages_migrated`, the fault block from
    :func:`find_numa_faults`; a file in the legacy form gives None/empty for all of them.
    """
    scalars: dict[str, int | None] = {}
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
    block = find_numa_faults(data)
    migrated, bad = find_pages_migrated(data)
    if block.numa_format == "legacy":
        migrated, bad = None, False
    return PidSched(
        numa_pages_migrated=migrated,
        numa_preferred_nid=scalars.get("numa_preferred_nid"),
        total_numa_faults=scalars.get("total_numa_faults"),
        current_node=block.current_node,
        numa_faults=block.task_faults(),
        error_count=errors + bad + block.error_count,
        numa_group_id=block.numa_group_id,
        fault_lines=block.lines,
        numa_format=block.numa_format,
    )


def _line_at(data: bytes, start: int) -> tuple[bytes, int]:
    """Return the line starting at ``start`` (without its newline) and the next line's start."""
    end = data.find(b"\n", start)
    if end < 0:
        return data[start:], len(data)
    return data[start:end], end + 1


def _body_start(data: bytes) -> int:
    """Return where the fields start: after the header's rule, else 0 (no header).

    The header line holds the comm, which a process sets to anything (newlines included);
    the rule under it is longer than any comm, so nothing before it is read as a field.
    """
    i = data.find(_RULE)
    return i + len(_RULE) if i >= 0 else 0


def _find_line_start(data: bytes, prefix: bytes, start: int) -> int:
    """Return the offset of the first line at or after ``start`` starting with ``prefix``."""
    if data.startswith(prefix, start) and (start == 0 or data[start - 1:start] == b"\n"):
        return start
    i = data.find(b"\n" + prefix, start)
    return i + 1 if i >= 0 else -1


def _uint(text: bytes, limit: int | None = None) -> int | None:
    """Return ASCII decimal digits as an int (at most ``limit``), else None."""
    if not 0 < len(text) <= _MAX_DIGITS or not text.isdigit():
        return None
    v = int(text)
    return v if limit is None or v <= limit else None


def _current_line(line: bytes) -> tuple[int | None, int | None]:
    """Return (current_node, numa_group_id) of ``current_node=N, numa_group_id=G``."""
    head, sep, tail = line.partition(b", numa_group_id=")
    node = _uint(head[len(_CURRENT):], MAX_NUMNODES - 1)
    group = _uint(tail.rstrip(), PID_MAX_LIMIT) if sep else None
    return node, group


def find_numa_faults(data: bytes) -> SchedFaults:
    """Return the NUMA fault block of a sched file without parsing the lines before it.

    The block starts at the line ``current_node=`` (the kernel prints it after every other
    field); the ``numa_faults`` lines after it are read, any other line is passed over. Each
    malformed ``numa_faults`` line, a node listed twice included, is counted and left out;
    a legacy-form file (see the module doc) returns ``numa_format="legacy"`` with nothing
    else. Linear in the size of ``data``.
    """
    body = _body_start(data)
    if _find_line_start(data, _LEGACY, body) >= 0:
        return SchedFaults("legacy")
    at = _find_line_start(data, _CURRENT, body)
    if at < 0:
        return SchedFaults()
    first, pos = _line_at(data, at)
    node, group = _current_line(first.rstrip(b"\r "))
    errors = int(node is None) + int(group is None)
    lines: list[NumaFaultsLine] = []
    seen: set[int] = set()
    found = _FAULT_LINES.findall(data, pos)
    for groups in found:
        n = int(groups[0])
        if n >= MAX_NUMNODES or n in seen:
            errors += 1
            continue
        seen.add(n)
        # most nodes of most threads show no fault: skip four int() calls for those
        counts = _ZEROS if groups[1:] == _ZERO_TEXT else tuple(map(int, groups[1:]))
        lines.append(NumaFaultsLine(n, *counts))
    # any other line that starts with the name is malformed (the kernel's are matched whole)
    named = data.count(_FAULT_NAME, pos - 1)  # data[pos - 1] ends the current_node line
    errors += max(named - len(found), 0)
    return SchedFaults("current", node, group, tuple(lines), errors)


def find_pages_migrated(data: bytes) -> tuple[int | None, bool]:
    """Return (numa_pages_migrated, True if that line is malformed) without parsing the rest.

    The value is None where the kernel does not print the line (no CONFIG_NUMA_BALANCING,
    or the legacy ``numa_migrations,`` form, which :func:`find_numa_faults` recognises).
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
