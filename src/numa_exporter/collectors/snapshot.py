"""The prometheus-client collector: every enabled collector's families, from the last Snapshot.

Each collector runs in isolation, as node_exporter's do: one that raises costs its own
families only, is logged once per kind of failure, and shows as
``numa_exporter_collector_success{collector="NAME"} 0``; the others are served.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import structlog
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from numa_exporter.config import Config
from numa_exporter.model.detail_level import rule_of
from numa_exporter.model.snapshot import ExporterStats, Snapshot

from . import detail, scrape
from .base import CollectorDef
from .registry import ALL

log = structlog.get_logger("numa_exporter.collectors")
MAX_LOGGED = 1000  # distinct failures remembered for log-once


class SnapshotCollector(Collector):
    """Serves the snapshot returned by ``get``; a scrape never reads /proc itself."""

    def __init__(self, get: Callable[[], Snapshot | None], config: Config,
                 collectors: tuple[CollectorDef, ...] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.get = get
        self.config = config
        self.collectors = collectors  # None: the registry's
        self.clock = clock
        self._logged: set[tuple[str, str]] = set()

    def describe(self) -> list[Metric]:
        """Return no descriptions: families vary with the kernel (registry must not probe)."""
        return []

    def _empty(self) -> Snapshot:
        """Return the snapshot served before the first scan ends."""
        c = self.config
        return Snapshot(stats=ExporterStats(scan_interval=c.scan_interval,
                                            scan_budget=c.scan_budget))

    def collect(self) -> Iterator[Metric]:
        """Yield the families of every collector that is always on or enabled by flag, then
        each one's success and duration."""
        snap = self.get() or self._empty()
        summary = detail.summary_pids(snap, rule_of(self.config))
        outcomes: dict[str, scrape.Outcome] = {}
        for c in self.collectors if self.collectors is not None else ALL:
            if c.switchable and not self.config.enabled(c.name):
                continue
            t0 = self.clock()
            try:
                families = detail.trim(c.emit(snap), detail.specs_by_family(c.specs), summary)
            except Exception as exc:  # a collector bug costs its own families only
                families = []
                self._failed(c.name, exc)
                ok = False
            else:
                ok = True
            series = sum(len(f.samples) for f in families)
            outcomes[c.name] = scrape.Outcome(ok, self.clock() - t0, series)
            yield from families
        yield from scrape.emit(outcomes)

    def _failed(self, name: str, exc: Exception) -> None:
        key = (name, f"{type(exc).__name__}: {exc}"[:200])
        if key in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED:
            self._logged.clear()
        self._logged.add(key)
        log.error("collector failed; its families are left out, the others are served",
                  collector=name, error=key[1], exc_info=exc)
