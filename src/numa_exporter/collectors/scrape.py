"""How each collector fared in the last rendering, as node_exporter reports its own
(``node_scrape_collector_success`` and ``node_scrape_collector_duration_seconds`` there).

These two families are not a collector's own: :class:`~.snapshot.SnapshotCollector` runs
every enabled collector in isolation and emits them after the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec

from .families import family

SUCCESS = MetricSpec(
    "numa_exporter_collector_success", "gauge",
    "1 when the collector built its families from the last snapshot, 0 when it failed (its "
    "families are then left out; the others are served). node_exporter calls this "
    "node_scrape_collector_success.",
    ("collector",))
DURATION = MetricSpec(
    "numa_exporter_collector_duration_seconds", "gauge",
    "Seconds the collector took to build its families from the last snapshot. "
    "node_exporter calls this node_scrape_collector_duration_seconds.",
    ("collector",))

SPECS = (SUCCESS, DURATION)


def emit(outcomes: Mapping[str, tuple[bool, float]]) -> Iterator[Metric]:
    """Yield the success and duration families of ``collector name -> (ok, seconds)``."""
    ok = family(SUCCESS)
    took = family(DURATION)
    for name, (success, seconds) in outcomes.items():
        ok.add_metric([name], 1 if success else 0)
        took.add_metric([name], seconds)
    yield ok
    yield took
