"""The background loop: scan on an interval and publish the last snapshot."""

from __future__ import annotations

import threading
import time

import structlog

from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.scan.scanner import Scanner

log = structlog.get_logger("numa_exporter.scan.sampler")


class Sampler:
    """Runs ``scanner.scan()`` every ``interval`` seconds in a daemon thread."""

    def __init__(self, scanner: Scanner, interval: float) -> None:
        self.scanner = scanner
        self.interval = interval
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        scanner.stop_event = self._stop  # a read in progress is abandoned on stop
        self._first = threading.Event()
        self._topology_dirty = threading.Event()
        self._next_config: Config | None = None
        self._config_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="numa-sampler", daemon=True)

    @property
    def snapshot(self) -> Snapshot | None:
        """Return the last completed snapshot (None before the first scan ends)."""
        return self._snapshot

    def start(self) -> None:
        """Start scanning now, then every interval."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end and wait for it."""
        self._stop.set()
        self._thread.join(timeout)

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
        self._first.set()
        return snap

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.scan_once()
            except Exception:  # a bug: keep serving the previous snapshot, say so loudly
                log.exception("scan failed")
            elapsed = time.monotonic() - started
            self._stop.wait(max(self.interval - elapsed, 0.0))
