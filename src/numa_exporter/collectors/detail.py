"""The series budget: how much of each per-process family a process gets.

A process the scan did not give full detail (``model/detail_level.py``: placed bytes below
``--process.detail-above``, with hysteresis) is served at the summary level: the samples of
its families declared ``level="full"`` (per-node, per-kind and per-reader breakdowns, read
costs) are left out, and so are its samples of value 0 in families declared
``drop_zero="summary"``. Samples of value 0 in families declared ``drop_zero="always"``
are left out for every process. A family that declares ``fold`` (bytes per node and kind)
serves a summary-level process its sums over that label (bytes per node). What is left is what the
shipped alerts and dashboard need per process (docs/series-budget.md). The rule is the
specs' (``MetricSpec.level``, ``.drop_zero``), so a family added later is trimmed by what
it declares, with no change here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from numa_exporter.model.detail_level import DetailRule, assign
from numa_exporter.model.snapshot import Snapshot

from .spec import FOLDED, MetricSpec


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


def fold(samples: list[Sample], label: str, summary: frozenset[str]) -> list[Sample]:
    """Return ``samples`` with those of the summary-level processes summed over ``label``
    (the sum carries ``label`` at ``FOLDED``, where its group's first sample stood); the
    other processes' samples as they were."""
    out: list[Sample] = []
    at: dict[tuple[tuple[str, str], ...], int] = {}
    for s in samples:
        if s.labels.get("pid", "") not in summary:
            out.append(s)
            continue
        labels = {**s.labels, label: FOLDED}
        key = tuple(sorted(labels.items()))
        i = at.get(key)
        if i is None:
            at[key] = len(out)
            out.append(s._replace(labels=labels))
        else:
            out[i] = out[i]._replace(value=out[i].value + s.value)
    return out


def trim(families: Iterable[Metric], specs: Mapping[str, MetricSpec],
         summary: frozenset[str]) -> list[Metric]:
    """Return the families with the samples the budget leaves out removed and those it
    folds summed (in place).

    Only families of a spec with a ``pid`` label that trims or folds something are touched;
    a family left without samples is still returned (its HELP and TYPE cost no series).
    """
    out = []
    for f in families:
        spec = specs.get(f.name)
        if spec is not None and "pid" in spec.labels:
            if spec.fold is not None and summary:
                f.samples = fold(f.samples, spec.fold, summary)
            if spec.level == "full" or spec.drop_zero != "never":
                f.samples = [s for s in f.samples
                             if _keeps(spec, summary, s.labels.get("pid", ""), s.value)]
        out.append(f)
    return out
