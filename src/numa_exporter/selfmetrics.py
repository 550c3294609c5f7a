"""The exporter's own instruments, kept in prometheus-client's types.

The scanner observes into a ``SelfMetrics``; each snapshot carries what its instruments held
when the scan ended (``collect()``), and the exporter collector serves that.
"""

from __future__ import annotations

from prometheus_client import Histogram
from prometheus_client.core import Metric

from numa_exporter.metrics_spec import MetricSpec

# Upper bounds, in seconds, of the per-process read-time histogram.
READ_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

PROCESS_READ_DURATION = MetricSpec(
    "numa_exporter_process_read_duration_seconds", "histogram",
    "Seconds the exporter spent reading one process's files, over every process read since "
    "it started (numa_process_read_duration_seconds is the last read of each process).")

SPECS = (PROCESS_READ_DURATION,)


class SelfMetrics:
    """Instruments the scanner observes into; not registered anywhere themselves."""

    def __init__(self) -> None:
        s = PROCESS_READ_DURATION
        self.process_read = Histogram(s.family_name, s.help, buckets=READ_BUCKETS,
                                      registry=None)

    def observe_process_read(self, seconds: float) -> None:
        """Count one process read that took ``seconds``."""
        self.process_read.observe(max(seconds, 0.0))

    def collect(self) -> tuple[Metric, ...]:
        """Return the instruments' families as they are now."""
        return tuple(self.process_read.collect())
