#!/usr/bin/env python3
"""Print docs/series-budget.md's tables from the collector registry (the metric specs).

    .venv/bin/python tools/series_budget.py            # print the tables
    .venv/bin/python tools/series_budget.py --write    # replace them in docs/series-budget.md

Every family's series are bounded by the product of its labels' bounds (``MetricSpec.bounds``;
a label not listed takes one value; ``pid`` is counted per process), evaluated for a host of
N NUMA nodes. Per-process families (a ``pid`` label) are split by level: a process below
``--process.detail-above`` gets its ``summary`` families only. A family added to a collector
is counted here with no change to this file; tests/deploy/test_series_budget.py fails when
the document is stale and when the fixture's served series exceed these bounds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from numa_exporter.collectors.registry import SPECS_BY_COLLECTOR
from numa_exporter.collectors.spec import MetricSpec

BEGIN = "<!-- budget:begin -->"
END = "<!-- budget:end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "series-budget.md"
NODES = (1, 2, 4, 8)
TOPS = (50, 200, 1000)
# Labels whose values number one per container or cgroup: those families are per
# container or cgroup, budgeted apart (their count is the pods' and units', not N's).
PER_OWNER = {"cgroup": "cgroup", "uid": "container"}
HISTOGRAM_SERIES = 15  # the read-time histogram: 13 buckets (+Inf among them), _sum, _count
# Labels that take one value per node unless a spec says otherwise.
NODE_LABELS = ("node", "to_node", "initiator")


def scope(s: MetricSpec) -> str:
    """Return ``process``, ``cgroup``, ``container`` or ``host``: what one set of the
    family's series belongs to."""
    if "pid" in s.labels:
        return "process"
    for label, owner in PER_OWNER.items():
        if label in s.labels:
            return owner
    return "host"


def factors(s: MetricSpec, folded: bool = False) -> tuple[int, int]:
    """Return (constant, power of N): the family's series per owner are constant * N**power
    (``folded``: for a summary-level process, its ``fold`` label taking one value)."""
    const, power = 1, 0
    if s.type == "histogram":
        const = HISTOGRAM_SERIES
    declared = dict(s.bounds)
    if folded and s.fold is not None:
        declared[s.fold] = 1
    for label in s.labels:
        declared.setdefault(label, "nodes" if label in NODE_LABELS else 1)
    for _label, bound in declared.items():
        if bound == "nodes":
            power += 1
        else:
            const *= bound
    return const, power


def formula(s: MetricSpec, folded: bool = False) -> str:
    """Return the bound as text: ``4·N``, ``N²``, ``8``."""
    const, power = factors(s, folded)
    n = {0: "", 1: "N", 2: "N²", 3: "N³"}[power]
    if not n:
        return str(const)
    return n if const == 1 else f"{const}·{n}"


def at(s: MetricSpec, nodes: int, level: str = "full") -> int:
    """Return the family's series per owner on a host with ``nodes`` nodes, for a process
    at ``level`` (``summary``: none of a full-level family, a folded family folded)."""
    if level == "summary" and s.level == "full":
        return 0
    const, power = factors(s, folded=level == "summary")
    return int(const * nodes ** power)


def _specs(kind: str) -> list[tuple[str, MetricSpec]]:
    return [(c, s) for c, s in SPECS_BY_COLLECTOR if scope(s) == kind]


def per_process(nodes: int, level: str, collectors: Iterable[str] | None = None) -> int:
    """Return the most series one process has at ``level`` (``summary`` or ``full``)."""
    wanted = None if collectors is None else set(collectors)
    return sum(at(s, nodes, level) for c, s in _specs("process")
               if wanted is None or c in wanted)


def healthy_summary(nodes: int) -> int:
    """Return the series of a summary-level process with no binding problem, no
    accelerator, outside a pod and without DAMON, with memory on every one of ``nodes``
    nodes: its summary families that never drop zeros, less the accelerator, kubernetes
    and damon ones (the per-node bytes folded over kinds)."""
    return sum(at(s, nodes, "summary") for c, s in _specs("process")
               if s.drop_zero == "never" and c not in ("accelerator", "kubernetes", "damon"))


def per_host(nodes: int) -> int:
    """Return the most series of the host families (every collector on)."""
    return sum(at(s, nodes) for _, s in _specs("host"))


def _cell(text: str) -> str:
    return text.replace("|", "/")


def process_table() -> str:
    """Return the per-process families: level, what is dropped at 0, bound, and at N."""
    head = ("| family | collector | level | zeros left out | series per process | "
            + " | ".join(f"N={n}" for n in NODES) + " |")
    rows = [head, "|" + "---|" * (5 + len(NODES))]
    for c, s in _specs("process"):
        level = s.level if s.fold is None else f"summary: {formula(s, True)}, by {s.fold} full"
        cells = [f"`{s.name}`", c, level, s.drop_zero, formula(s),
                 *(str(at(s, n)) for n in NODES)]
        rows.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    collectors = sorted({c for c, _ in _specs("process")})
    for level in ("summary", "full"):
        for c in collectors:
            rows.append(f"| *{c}, {level}* | | | | | " + " | ".join(
                str(per_process(n, level, [c])) for n in NODES) + " |")
        rows.append(f"| **one process, {level}** | | | | | " + " | ".join(
            f"**{per_process(n, level)}**" for n in NODES) + " |")
    return "\n".join(rows)


def host_table() -> str:
    """Return the host families (series per host) and the per-cgroup/container ones."""
    rows = ["| family | collector | per | series | " + " | ".join(f"N={n}" for n in NODES)
            + " |", "|" + "---|" * (4 + len(NODES))]
    for kind in ("host", "cgroup", "container"):
        for c, s in _specs(kind):
            rows.append("| " + " | ".join(_cell(x) for x in (
                f"`{s.name}`", c, kind, formula(s), *(str(at(s, n)) for n in NODES))) + " |")
    rows.append("| **host families** | | host | | " + " | ".join(
        f"**{per_host(n)}**" for n in NODES) + " |")
    return "\n".join(rows)


# processes at full detail: the default --process.detail-top, its hysteresis bound (ranked
# up to 1.5 times it), and those plus 8 above --process.detail-above
LARGE = (10, 15, 23)


def top_table() -> str:
    """Return series per host against --process.top: host families, ``top`` healthy
    summary processes of which ``large`` at full detail (upper bound), and all in full."""
    rows = ["A healthy summary process (memory on every node, no binding problem, no "
            "accelerator, pod or DAMON) has " + ", ".join(
                f"**{healthy_summary(n)}** series at N={n}" for n in NODES) + ".", "",
            "| `--process.top` | processes at full detail | " + " | ".join(
                f"N={n}" for n in NODES) + " |", "|" + "---|" * (2 + len(NODES))]
    for top in TOPS:
        for large in LARGE:
            rows.append(f"| {top} | {large} | " + " | ".join(
                str(per_host(n) + (top - large) * healthy_summary(n)
                    + large * per_process(n, "full"))
                for n in NODES) + " |")
        rows.append(f"| {top} | all (`--process.detail-above=0`) | " + " | ".join(
            str(per_host(n) + top * per_process(n, "full")) for n in NODES) + " |")
    return "\n".join(rows)


def table() -> str:
    """Return the three tables as they stand between the document's markers."""
    return (f"### Per process\n\n{process_table()}\n\n### Per host, cgroup and container\n\n"
            f"{host_table()}\n\n### Per host against `--process.top` (upper bounds)\n\n"
            f"{top_table()}")


def replace(text: str) -> str:
    """Return the document with the tables between the markers regenerated."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


if __name__ == "__main__":
    if "--write" in sys.argv:
        DOC.write_text(replace(DOC.read_text()))
    else:
        print(table())
