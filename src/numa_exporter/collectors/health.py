"""The daemon's liveness, read at every scrape (not from a snapshot): whether the scan loop
runs, scans that failed, and log lines that could not be written.

A scan loop that died or hangs publishes no new snapshot, so these families cannot come from
one; the daemon registers :class:`HealthCollector` with the families rendered per scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec

from .families import family

SCAN_LOOP_UP = MetricSpec(
    "numa_exporter_scan_loop_up", "gauge",
    "1 while the scan loop runs and a scan completed within max(3 scan intervals, interval "
    "+ budget + 10s); 0 when it died or is stuck (/-/healthy then answers 503).")
SCAN_FAILURES = MetricSpec(
    "numa_exporter_scan_failures_total", "counter",
    "Scans that ended in an error (a bug; the previous snapshot is served).")
LOG_WRITE_ERRORS = MetricSpec(
    "numa_exporter_log_write_errors_total", "counter",
    "Log lines lost, by reason: write (the log's descriptor failed: EPIPE, ENOSPC, closed) "
    "or backlog (10,000 lines waited for a descriptor that blocks). Logging never stops "
    "scanning.",
    ("reason",), bounds=(("reason", 2),))

SPECS = (SCAN_LOOP_UP, SCAN_FAILURES, LOG_WRITE_ERRORS)


@dataclass(frozen=True, slots=True)
class Liveness:
    """One reading of the daemon's liveness counters."""

    scan_loop_up: bool
    scan_failures: int
    log_write_errors: int
    log_backlog_drops: int


class HealthCollector:
    """Emits ``SPECS`` from ``read()`` at every collection."""

    def __init__(self, read: Callable[[], Liveness]) -> None:
        self._read = read

    def describe(self) -> list[Metric]:
        """Return no descriptions (the registry collects to learn the names)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield the liveness families of one reading."""
        now = self._read()
        f = family(SCAN_LOOP_UP)
        f.add_metric([], 1 if now.scan_loop_up else 0)
        yield f
        f = family(SCAN_FAILURES)
        f.add_metric([], now.scan_failures)
        yield f
        f = family(LOG_WRITE_ERRORS)
        f.add_metric(["write"], now.log_write_errors)
        f.add_metric(["backlog"], now.log_backlog_drops)
        yield f
