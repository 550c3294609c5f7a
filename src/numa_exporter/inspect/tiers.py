"""The tiers view of one process for ``inspect`` (issue 17), pure: its report and its text.

Bytes local / remote / far per accessor (``cpu``, and ``accelerator`` for a process using an
accelerator whose memory is a node), bytes by memory tier, the CPU and memory spans, and
the hinting faults with their fault-weighted remote share, an estimate. The definitions are
docs/tiers.md's; the numbers are the scan's own (``ProcessSample.tiers``), so ``inspect``
says what the exporter exports.
"""

from __future__ import annotations

from typing import Any

from numa_exporter.model.snapshot import SystemSample
from numa_exporter.model.tiers.places import PLACES, split_by_place
from numa_exporter.model.tiers.process import ProcessTiers
from numa_exporter.parsers.cpulist import format_cpulist

FAULTS_ABSENT = ("none shown: balancing off or compiled out, no hinting fault taken yet, "
                 "or a sched form that is refused")
ESTIMATE = "an estimate from NUMA hinting faults"


def tiers_report(view: ProcessTiers | None, system: SystemSample) -> dict[str, Any] | None:
    """Return the tiers part of the ``--json`` report, None without a tiers view (the
    ``tiers`` collector off, or the host's node classes unread).

    ``accessors`` maps each accessor to its home nodes and bytes and ratios by place;
    ``bytes_by_tier`` maps tier ids (as text) to bytes, ``untiered_bytes`` the bytes on
    nodes in no tier; ``cpu_span`` / ``memory_span`` count nodes (None: unknown);
    ``faults`` is None when absent, else the decayed counts by node (nodes with at least
    one fault), their total, the
    threads summed, the counts by place for the ``cpu`` accessor and ``remote_share`` (the
    share off its home, an estimate; None without a home).
    """
    if view is None:
        return None
    accessors: dict[str, Any] = {}
    for a in view.accessors:
        entry: dict[str, Any] = {"home": format_cpulist(set(a.home))}
        entry.update({f"{p}_bytes": a.bytes.get(p, 0) for p in PLACES})
        entry.update({f"{p}_ratio": a.ratio(p) for p in PLACES})
        accessors[a.accessor] = entry
    return {
        "accessors": accessors,
        "bytes_by_tier": {str(t): b for t, b in sorted(view.bytes_by_tier.items())},
        "untiered_bytes": view.untiered_bytes,
        "cpu_span": view.cpu_span,
        "memory_span": view.memory_span,
        "faults": _faults(view, system),
    }


def _faults(view: ProcessTiers, system: SystemSample) -> dict[str, Any] | None:
    """Return the faults part of the report (None: absent)."""
    f = view.faults
    if f is None:
        return None
    cpu = view.accessor("cpu")
    by_place: dict[str, int] | None = None
    if cpu is not None and system.tiers is not None:
        host = system.tiers.host(system.topology, {})
        split = split_by_place(f.by_node, cpu.home, host.cpu_nodes, host.tier_of)
        by_place = {p: split[p] for p in PLACES}
    return {
        "by_node": {str(n): c for n, c in sorted(f.by_node.items()) if c},
        "total": f.total,
        "threads": f.threads,
        "by_place_cpu": by_place,
        "remote_share": view.fault_remote_share,
        "estimate": True,
    }


def _mib(b: int) -> str:
    return f"{b / (1 << 20):10.2f}"


def _span(n: int | None, what: str) -> str:
    if n is None:
        return f"{what} on ? nodes"
    return f"{what} on {n} node{'s' if n != 1 else ''}"


def render_tiers(rep: dict[str, Any] | None) -> list[str]:
    """Return the text lines of the tiers view (none without one)."""
    if rep is None:
        return []
    out = ["Locality by accessor (MiB)",
           "accessor         " + "".join(f"{p:>10}" for p in PLACES) + "  home nodes"]
    for name, a in rep["accessors"].items():
        out.append(f"{name:<17}" + "".join(_mib(a[f'{p}_bytes']) for p in PLACES)
                   + f"  {a['home'] or '-'}")
        out.append(" " * 17 + "".join(f"{a[f'{p}_ratio']:>10.3f}" for p in PLACES)
                   + "  (ratios)")
    tiers = ", ".join(f"tier {t} {b / (1 << 20):.2f} MiB"
                      for t, b in rep["bytes_by_tier"].items())
    if rep["untiered_bytes"]:
        tiers += (", " if tiers else "") + f"in no tier {rep['untiered_bytes'] / (1 << 20):.2f} MiB"
    out.append(f"Memory by tier    {tiers or '-'}")
    out.append(f"NUMA in play      {_span(rep['cpu_span'], 'CPUs')}, "
               f"{_span(rep['memory_span'], 'memory')}")
    f = rep["faults"]
    if f is None:
        out.append(f"Hinting faults    {FAULTS_ABSENT}")
        return out
    nodes = ", ".join(f"node {n} {c}" for n, c in f["by_node"].items())
    threads = f["threads"]
    out.append(f"Hinting faults    {nodes} (decayed counts, {threads} "
               f"thread{'s' if threads != 1 else ''})")
    if f["by_place_cpu"] is not None:
        out.append("  for the CPUs    " + ", ".join(f"{p} {f['by_place_cpu'][p]}"
                                                   for p in PLACES))
    share = f["remote_share"]
    out.append("  remote share    " + ("- (no home node)" if share is None
                                       else f"{share:.3f} ({ESTIMATE})"))
    return out
