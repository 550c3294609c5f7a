"""How each collector fared in the last rendering, as node_exporter reports its own
(``node_scrape_collector_success`` and ``node_scrape_collector_duration_seconds`` there).

These two families are not a collector's own: :class:`~.snapshot.SnapshotCollector` runs
every enabled collector in isolation and emits them after the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec

from .families import family

SUCCESS = MetricSpec(
    "numa_exporter_collector_success", "gauge",
    "1 when the collector built its families from the last snapshot, 0 when it failed (its "
    "families are then left out; the others are served). node_exporter calls this "
    "node_scrape_collector_success.",
    ("collector",), bounds=(("collector", 11),))
DURATION = MetricSpec(
    "numa_exporter_collector_duration_seconds", "gauge",
    "Seconds the collector took to build its families from the last snapshot. "
    "node_exporter calls this node_scrape_collector_duration_seconds.",
    ("collector",), bounds=(("collector", 11),))

SERIES = MetricSpec(
    "numa_exporter_series", "gauge",
    "Series (samples) the collector served in the last rendering, after --process.detail-above "
    "left out what it trims; the sum over collectors is the exporter's own series budget "
    "(without process_*, python_* and the web server's counters).",
    ("collector",), bounds=(("collector", 11),))

SPECS = (SUCCESS, DURATION, SERIES)


class Outcome(NamedTuple):
    """How one collector fared: built its families (ok), in seconds, serving series."""

    ok: bool
    seconds: float
    series: int = 0


def emit(outcomes: Mapping[str, Outcome]) -> Iterator[Metric]:
    """Yield the success, duration and series families of ``collector name -> Outcome``."""
    ok, took, count = (family(s) for s in SPECS)
    for name, o in outcomes.items():
        ok.add_metric([name], 1 if o.ok else 0)
        took.add_metric([name], o.seconds)
        count.add_metric([name], o.series)
    yield from (ok, took, count)
