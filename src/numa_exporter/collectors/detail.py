"""The series budget: how much of each per-process family a process gets.

A process the scan did not give full detail (``model/detail_level.py``: placed bytes below
``--process.detail-above``, with hysteresis) is served at the summary level: the samples of
its families declared ``level="full"`` (per-node, per-kind and per-reader breakdowns, read
costs) are left out, and so are its samples of value 0 in families declared
``drop_zero="summary"``. Samples of value 0 in families declared ``drop_zero="always"``
are left out for every process. What is left is what the
shipped alerts and dashboard need per process (docs/series-budget.md). The rule is the
specs' (``MetricSpec.level``, ``.drop_zero``), so a family added later is trimmed by what
it declares, with no change here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric

from numa_exporter.model.detail_level import DetailRule, assign
from numa_exporter.model.snapshot import Snapshot

from .spec import MetricSpec


def summary_pids(snap: Snapshot, rule: DetailRule) -> frozenset[str]:
    """Return the pids (as label values) of the processes served at the summary level:
    those the scan did not give full detail (``Snapshot.full_detail``, decided with
    hysteresis), or for a snapshot that does not say, those ``rule`` leaves out this once."""
    full = snap.full_detail
    if full is None:
        placed = {p.pid: p.locality.local_bytes + p.locality.remote_bytes
                  for p in snap.processes}
        full = assign(rule, placed, lambda _pid: None)
    return frozenset(str(p.pid) for p in snap.processes if p.pid not in full)


def specs_by_family(specs: Iterable[MetricSpec]) -> dict[str, MetricSpec]:
    """Return the non-pattern specs keyed by the name their family is built with."""
    return {(s.family_name if s.type == "counter" else s.name): s
            for s in specs if not s.pattern}


def _keeps(spec: MetricSpec, summary: frozenset[str], pid: str, value: float) -> bool:
    """Return whether the budget keeps a sample of ``spec`` of process ``pid``."""
    small = pid in summary
    if small and spec.level == "full":
        return False
    dropped_zero = spec.drop_zero == "always" or (small and spec.drop_zero == "summary")
    return not (value == 0 and dropped_zero)


def trim(families: Iterable[Metric], specs: Mapping[str, MetricSpec],
         summary: frozenset[str]) -> list[Metric]:
    """Return the families with the samples the budget leaves out removed (in place).

    Only families of a spec with a ``pid`` label that trims something are touched; a family
    left without samples is still returned (its HELP and TYPE cost no series).
    """
    out = []
    for f in families:
        spec = specs.get(f.name)
        if (spec is not None and "pid" in spec.labels
                and (spec.level == "full" or spec.drop_zero != "never")):
            f.samples = [s for s in f.samples
                         if _keeps(spec, summary, s.labels.get("pid", ""), s.value)]
        out.append(f)
    return out
