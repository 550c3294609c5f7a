"""Wiring: scanner + sampler + collector on a registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.registry import CollectorRegistry

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.sampler import Sampler
from numa_exporter.scanner import Scanner


@dataclass(slots=True)
class App:
    """A running exporter's parts."""

    config: Config
    sampler: Sampler

    def start(self) -> None:
        """Start the sampler (the first scan begins at once)."""
        self.sampler.start()

    def stop(self) -> None:
        """Stop the sampler."""
        self.sampler.stop()


def build_app(config: Config, registry: CollectorRegistry) -> App:
    """Return the exporter's parts with the collector registered on ``registry``."""
    scanner = Scanner(config)
    sampler = Sampler(scanner, config.scan_interval)
    registry.register(SnapshotCollector(lambda: sampler.snapshot, config))
    return App(config, sampler)
