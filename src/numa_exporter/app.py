"""Wiring: scanner + sampler + collector on a registry."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client.registry import CollectorRegistry

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.sampler import Sampler
from numa_exporter.scanner import SampledReader, Scanner
from numa_exporter.sources.accelerators import (
    AcceleratorSource,
    FixtureAcceleratorSource,
    TopologyEvent,
    UdevAcceleratorSource,
    watch_topology,
)

log = structlog.get_logger()


@dataclass(slots=True)
class App:
    """A running exporter's parts."""

    config: Config
    sampler: Sampler
    watch: Any = field(default=None)
    notes: tuple[tuple[str, str, dict[str, object]], ...] = ()  # (level, msg, fields) at start

    def start(self) -> None:
        """Start the sampler (the first scan begins at once) and the hotplug watch."""
        for level, msg, fields in self.notes:
            getattr(log, level)(msg, **fields)
        self.sampler.start()
        if self.config.accelerator_records is None:
            self.watch = watch_topology(self._on_event)

    def _on_event(self, event: TopologyEvent) -> None:
        log.info("topology event", action=event.action, subsystem=event.subsystem,
                 device=event.sys_name)
        self.sampler.topology_changed()

    def reload(self) -> bool:
        """Reread ``--config.file`` and hand its pins to the scanner; return success.

        A file that does not load, or that pins a node this host lacks, is rejected with
        one log line and the running config stays.
        """
        from numa_exporter.pins import PinError, check_nodes, load_pins

        path = self.config.config_file
        if path is None:
            log.info("reload: no --config.file, nothing to reload")
            return True
        try:
            homes, accels = load_pins(path)
            check_nodes(homes, self.sampler.scanner.topology.nodes)
        except PinError as exc:
            log.error("config reload failed; keeping the running config", file=str(path),
                      error=str(exc))
            return False
        self.config = dataclasses.replace(self.config, home_pins=homes,
                                          accelerator_pins=accels)
        self.sampler.replace_config(self.config)
        log.info("config reloaded", file=str(path), home_pins=len(homes),
                 accelerator_pins=len(accels))
        return True

    def stop(self) -> None:
        """Stop the sampler and the watch."""
        if self.watch is not None:
            self.watch.stop()
        self.sampler.stop()


def accelerator_source(config: Config) -> AcceleratorSource | None:
    """Return the accelerator source the config asks for (None when udev is unusable)."""
    if not config.enabled("accelerator"):
        return None
    if config.accelerator_records is not None:
        return FixtureAcceleratorSource(config.accelerator_records, config.roots.procfs,
                                        include_rdma=config.accelerator_rdma)
    try:
        return UdevAcceleratorSource(config.roots.procfs, config.roots.sysfs,
                                     include_rdma=config.accelerator_rdma)
    except Exception as err:  # no libudev in a slim container: run without accelerators
        log.warning("udev unavailable; accelerators not discovered", error=str(err))
        return None


Note = tuple[str, str, dict[str, object]]


def sampled_reader(config: Config) -> tuple[SampledReader | None, Note | None]:
    """Return the sampled placement reader (None where the operator turned it off or
    move_pages cannot name the processes of the procfs root) and what to log about it."""
    if config.sample_above <= 0:
        return None, None
    from numa_exporter.placement_sampled import read_sampled, sampling_available

    ok, reason = sampling_available(config.roots.procfs)
    if not ok:
        return None, ("warning", "sampled placement unavailable; big processes are read in "
                      "full on a slower cadence (--scan.process-budget)", {"reason": reason})
    return read_sampled, ("info", "sampled placement available",
                          {"via": reason, "above_estimated_seconds": config.sample_above})


def build_app(config: Config, registry: CollectorRegistry) -> App:
    """Return the exporter's parts with the collector registered on ``registry``."""
    sampled, note = sampled_reader(config)
    scanner = Scanner(config, accelerators=accelerator_source(config), sampled=sampled)
    sampler = Sampler(scanner, config.scan_interval)
    registry.register(SnapshotCollector(lambda: sampler.snapshot, config))
    return App(config, sampler, notes=(note,) if note else ())
