"""The background loop: scan on an interval and publish the last snapshot.

The loop cannot end but by ``stop()``: a failed scan is counted and reported, and a report
that fails in turn (a log sink that raises) is dropped. Should the loop still end or hang,
``health()`` says so, for ``/-/healthy`` and ``numa_exporter_scan_loop_up``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.scan.scanner import Scanner

log = structlog.get_logger("numa_exporter.scan.sampler")

# Seconds a scan may run past interval + budget (system read, selection, cgroups, a slow
# host) before the loop counts as stuck.
STUCK_MARGIN_S = 10.0


def stale_after(interval: float, budget: float) -> float:
    """Return the seconds without a completed scan after which the loop is unhealthy:
    max(3 intervals, interval + budget + ``STUCK_MARGIN_S``)."""
    return max(3 * interval, interval + budget + STUCK_MARGIN_S)


@dataclass(frozen=True, slots=True)
class Health:
    """The scan loop's state: ``ok`` with an empty ``reason``, or why it is not."""

    ok: bool
    reason: str = ""


class Sampler:
    """Runs ``scanner.scan()`` every ``interval`` seconds in a daemon thread."""

    def __init__(self, scanner: Scanner, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.scanner = scanner
        self.interval = interval
        self.failed_scans = 0
        self._clock = clock
        self._last_done: float | None = None  # clock() of the last completed scan, or start
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        scanner.stop_event = self._stop  # a read in progress is abandoned on stop
        self._first = threading.Event()
        self._topology_dirty = threading.Event()
        self._next_config: Config | None = None
        self._config_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="numa-sampler", daemon=True)
        # called after each snapshot is published (the web server's renderer): must not
        # raise; one that does is logged and the scan loop goes on
        self.listeners: list[Callable[[], None]] = []

    @property
    def snapshot(self) -> Snapshot | None:
        """Return the last completed snapshot (None before the first scan ends)."""
        return self._snapshot

    def start(self) -> None:
        """Start scanning now, then every interval."""
        self._last_done = self._clock()
        self._thread.start()

    def health(self) -> Health:
        """Return whether the loop runs and a scan completed within ``stale_after()``."""
        if self._last_done is None:
            return Health(False, "scan loop not started")
        if self._stop.is_set():
            return Health(False, "scan loop stopping")
        if not self._thread.is_alive():
            return Health(False, "scan loop exited")
        limit = stale_after(self.interval, self.scanner.config.scan_budget)
        age = self._clock() - self._last_done
        if age > limit:
            return Health(False, f"no scan completed for {age:.0f}s (limit {limit:.0f}s)")
        return Health(True)

    def stop(self, timeout: float = 5.0) -> bool:
        """Ask the loop to end and wait for it, at most ``timeout`` seconds; return whether
        it ended."""
        self._stop.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def wait_first(self, timeout: float | None = None) -> bool:
        """Return True once the first scan has completed (False on timeout)."""
        return self._first.wait(timeout)

    def topology_changed(self) -> None:
        """Mark the topology stale; the next scan rereads it (called by the udev monitor)."""
        self._topology_dirty.set()

    def replace_config(self, config: Config) -> None:
        """Hand the scanner a new Config, taken up whole at the start of the next scan.

        Baselines, counters and other scan state are kept; a scan in progress finishes
        with the config it started with.
        """
        with self._config_lock:
            self._next_config = config

    def _take_config(self) -> None:
        with self._config_lock:
            config, self._next_config = self._next_config, None
        if config is not None:
            self.scanner.config = config  # the scanner hands it to its parts

    def scan_once(self) -> Snapshot:
        """Run one scan now and publish it."""
        self._take_config()
        if self._topology_dirty.is_set():
            self._topology_dirty.clear()
            self.scanner.refresh_topology()
            log.info("topology reread", nodes=list(self.scanner.topology.nodes))
        snap = self.scanner.scan()
        self._snapshot = snap
        self._last_done = self._clock()
        self._first.set()
        for listener in self.listeners:
            try:
                listener()
            except Exception:  # a listener's bug costs its own wake-up, never the scan
                with contextlib.suppress(Exception):
                    log.exception("snapshot listener failed")
        return snap

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            try:
                self.scan_once()
            except Exception:  # a bug: keep serving the previous snapshot, say so loudly
                self.failed_scans += 1
                with contextlib.suppress(Exception):  # the report itself must not end the loop
                    log.exception("scan failed")
            elapsed = self._clock() - started
            self._stop.wait(max(self.interval - elapsed, 0.0))
