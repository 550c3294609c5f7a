"""The daemon: scanner + sampler + collector on a registry, the HTTP server, signals."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.registry import CollectorRegistry

from numa_exporter import __version__
from numa_exporter.collectors.health import HealthCollector, Liveness
from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.config_file import PinError, check_nodes, load_pins
from numa_exporter.logs import LogSink
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.scan.damon import HotMemoryMonitor
from numa_exporter.scan.process import SampledReader
from numa_exporter.scan.sampler import Sampler
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.topology_watch import TopologyEvent, watch_topology
from numa_exporter.web import WebSettings, serve

log = structlog.get_logger()


@dataclass(slots=True)
class App:
    """A running exporter's parts."""

    config: Config
    sampler: Sampler
    watch: Any = field(default=None)
    hot: Any = field(default=None)  # the DAMON worker (--collector.damon), else None
    notes: tuple[tuple[str, str, dict[str, object]], ...] = ()  # (level, msg, fields) at start

    def start(self) -> None:
        """Start the sampler (the first scan begins at once) and the hotplug watch."""
        for level, msg, fields in self.notes:
            getattr(log, level)(msg, **fields)
        if self.hot is not None:
            self.hot.start()
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
        path = self.config.config_file
        if path is None:
            log.info("reload: no --config.file, nothing to reload")
            return True
        try:
            homes, accels = load_pins(path)
            check_nodes(homes, self.sampler.scanner.topology.nodes, accels)
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
        if not self.sampler.stop():
            log.error("the scan thread did not stop; exiting without it")
        if self.hot is not None:
            self.hot.stop()  # stops the exporter's own kdamonds


Note = tuple[str, str, dict[str, object]]


def sampled_reader(config: Config) -> tuple[SampledReader | None, Note | None]:
    """Return the sampled placement reader (None where the operator turned it off or
    move_pages cannot name the processes of the procfs root) and what to log about it."""
    if not config.sampling:
        return None, None
    from numa_exporter.readers.sampled.reader import SampledReader, sampling_available

    ok, reason = sampling_available(config.roots.procfs)
    if not ok:
        return None, ("warning", "sampled placement unavailable; big processes are read in "
                      "full on a slower cadence (--scan.process-budget)", {"reason": reason})
    return SampledReader(), ("info", "sampled placement available",
                          {"via": reason, "hold_budget_seconds": config.hold_budget})


def hot_memory_monitor(config: Config) -> tuple[HotMemoryMonitor | None, Note | None]:
    """Return the DAMON worker for --collector.damon (None when off, or without
    move_pages to place the hot regions) and what to log about it."""
    if not config.enabled("damon"):
        return None, None
    from numa_exporter.readers.node_memory import read_node_ranges
    from numa_exporter.sources.cgroupfs import CgroupFS
    from numa_exporter.sources.damon import DamonSettings, DamonSysfs, boot_id, damon_modules
    from numa_exporter.sources.move_pages import MovePages, MovePagesUnsupported

    try:
        query = MovePages().for_pid
    except MovePagesUnsupported as exc:
        if config.damon_mode == "vaddr":
            return None, ("warning", "damon: hot memory unavailable (no move_pages to place "
                          "hot regions); everything else keeps serving", {"reason": str(exc)})
        query = None  # paddr needs none; auto without it: vaddr says so, counted
    sample_us = max(1, round(config.damon_sample * 1e6))
    aggr_us = max(1, round(config.damon_aggregation * 1e6))
    settings = DamonSettings(
        sample_us=sample_us, aggr_us=aggr_us,
        max_regions=max(config.damon_max_regions, 10), slots=config.damon_processes,
        mode=config.damon_mode, cgroups=config.damon_cgroups,
        # a cgroup scheme walks only the regions that count as hot
        cgroup_min_accesses=max(1, math.ceil(config.damon_hot_threshold
                                             * max(1, aggr_us // sample_us))))
    driver = DamonSysfs(config.roots.sysfs, config.damon_run_dir, settings,
                        boot_id(config.roots.procfs))
    sysfs = config.roots.sysfs
    monitor = HotMemoryMonitor(driver, query, config.damon_hot_threshold,
                               is_root=os.geteuid() == 0,
                               node_ranges=lambda: read_node_ranges(sysfs),
                               modules=lambda: damon_modules(sysfs),
                               yield_to_modules=config.damon_yield_to_modules,
                               cgroup_exists=CgroupFS(sysfs).memcg_exists)
    return monitor, ("info", "damon: hot memory collector on",
                     {"mode": settings.mode, "processes": settings.slots,
                      "cgroups": settings.cgroups,
                      "run_dir": str(config.damon_run_dir),
                      "yield_to_modules": config.damon_yield_to_modules,
                      "modules": {m.name: "enabled" if m.enabled else "disabled"
                                  for m in damon_modules(sysfs)}})


def build_app(config: Config, registry: CollectorRegistry) -> App:
    """Return the exporter's parts with the collector registered on ``registry``."""
    sampled, note = sampled_reader(config)
    hot, hot_note = hot_memory_monitor(config)
    scanner = Scanner(config, accelerators=accelerator_source(config), sampled=sampled,
                      hot=hot)
    sampler = Sampler(scanner, config.scan_interval)
    registry.register(SnapshotCollector(lambda: sampler.snapshot, config))
    notes = tuple(n for n in (note, hot_note) if n is not None)
    return App(config, sampler, hot=hot, notes=notes)


def liveness(sampler: Sampler, sink: LogSink | None) -> Callable[[], Liveness]:
    """Return a function reading the scan loop's health and the log sink's lost lines."""
    def read() -> Liveness:
        return Liveness(scan_loop_up=sampler.health().ok, scan_failures=sampler.failed_scans,
                        log_write_errors=sink.write_errors if sink else 0,
                        log_backlog_drops=sink.backlog_drops if sink else 0)
    return read


def healthy(sampler: Sampler) -> Callable[[], str | None]:
    """Return the check ``/-/healthy`` asks: None while the scan loop is healthy, else why
    not (answered with 503)."""
    def check() -> str | None:
        h = sampler.health()
        return None if h.ok else f"unhealthy: {h.reason}"
    return check


# Signals the daemon acts on, and signals whose default action (terminate) would end it with
# no word: these are ignored with one log line per kind, as a Go exporter does with signals it
# does not handle.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNALS = (signal.SIGHUP,)
IGNORED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM,
                   signal.SIGPROF, signal.SIGXCPU, signal.SIGPWR)
WAITED_SIGNALS = frozenset((*STOP_SIGNALS, *RELOAD_SIGNALS, *IGNORED_SIGNALS))


def block_signals() -> None:
    """Block the daemon's signals in the calling thread (and so in every thread it starts).

    Call it before any thread exists: the signals then stay pending until the main thread
    takes them with ``sigwaitinfo`` in ``run_daemon``. No handler runs (a handler that takes
    a lock can nest into itself under a storm), and pending signals of one kind coalesce in
    the kernel, so a burst of SIGHUPs costs a few reloads.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED_SIGNALS)


class SignalLog:
    """Says once per kind that an ignored signal arrived; counts them all."""

    def __init__(self) -> None:
        self.counts: dict[signal.Signals, int] = {}

    def ignored(self, sig: signal.Signals) -> None:
        """Count ``sig``; log the first of its kind."""
        n = self.counts.get(sig, 0) + 1
        self.counts[sig] = n
        if n == 1:
            log.info("signal ignored", signal=sig.name,
                     note="further ones of this kind are ignored without a log line")


def run_daemon(config: Config, web: WebSettings | None = None,
               sink: LogSink | None = None) -> int:
    """Serve until SIGTERM/SIGINT, rereading --config.file on SIGHUP; return the exit status.

    ``sink`` is the log sink (its lost lines are exported). Signals are taken from the
    kernel's queue by this (the main) thread; see ``block_signals``.
    """
    block_signals()  # a no-op when the caller did it before starting any thread
    registry = CollectorRegistry(auto_describe=False)  # snapshot families: cached per scan
    live = CollectorRegistry(auto_describe=False)  # the exporter's own, rendered per scrape
    web = web or WebSettings()
    if not web.disable_exporter_metrics:
        ProcessCollector(registry=live)
        PlatformCollector(registry=live)
        GCCollector(registry=live)
    app = build_app(config, registry)
    live.register(HealthCollector(liveness(app.sampler, sink)))
    try:
        server = serve(web, registry, lambda: app.sampler.snapshot, live,
                       health=healthy(app.sampler))
    except OSError as exc:
        print(f"numa-exporter: error: cannot listen on {config.listen_address}: {exc.strerror}",
              file=sys.stderr)
        return 1
    app.sampler.listeners.append(server.snapshot_published)  # render ahead while scraped
    log.info("listening", address=config.listen_address, path=config.telemetry_path,
             tls=web.config.tls is not None, basic_auth=bool(web.config.users),
             version=__version__, procfs=str(config.roots.procfs),
             sysfs=str(config.roots.sysfs), interval=config.scan_interval,
             nodes=list(app.sampler.scanner.topology.nodes))
    app.start()
    ignored = SignalLog()
    while True:
        sig = signal.Signals(signal.sigwaitinfo(WAITED_SIGNALS).si_signo)
        if sig in RELOAD_SIGNALS:
            app.reload()  # SIGHUPs arriving meanwhile are one pending signal
        elif sig in IGNORED_SIGNALS:
            ignored.ignored(sig)
        else:
            log.info("stopping", signal=sig.name)
            app.stop()
            server.shutdown()
            return 0
