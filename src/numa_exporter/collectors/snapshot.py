"""The prometheus-client collector: every enabled collector's families, from the last Snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot

from .registry import ALL


class SnapshotCollector(Collector):
    """Serves the snapshot returned by ``get``; a scrape never reads /proc itself."""

    def __init__(self, get: Callable[[], Snapshot | None], config: Config) -> None:
        self.get = get
        self.config = config

    def describe(self) -> list[Metric]:
        """Return no descriptions: families vary with the kernel (registry must not probe)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield the families of every collector that is always on or enabled by flag."""
        snap = self.get() or Snapshot()
        for c in ALL:
            if not c.switchable or self.config.enabled(c.name):
                yield from c.emit(snap, self.config)
