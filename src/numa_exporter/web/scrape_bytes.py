"""``numa_exporter_scrape_bytes``: how large the exposition of the last snapshot is.

Read at each scrape from the snapshot cache (``render.SnapshotCache.sizes``), so the budget
an operator plans (series, and the bytes every scrape moves) is on the dashboard. Not left
out by ``--web.disable-exporter-metrics``: it is about the exporter's output, not its
process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

NAME = "numa_exporter_scrape_bytes"
HELP = (
    "Bytes of the snapshot part of the exposition (every family but the per-scrape "
    "process_*, python_* and web server counters), as last rendered, by format (text, "
    "openmetrics) and encoding (identity, gzip: the cached deflate blocks); only the "
    "formats scrapers have asked for.")


class ScrapeBytes(Collector):
    """Yields the gauge from ``sizes()``: (format, encoding) -> bytes."""

    def __init__(self, sizes: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        self.sizes = sizes

    def collect(self) -> Iterator[Metric]:
        """Yield the scrape-bytes family (no sample before the first rendering)."""
        fam = GaugeMetricFamily(NAME, HELP, labels=["format", "encoding"])
        for (fmt, enc), n in sorted(self.sizes().items()):
            fam.add_metric([fmt, enc], n)
        yield fam
