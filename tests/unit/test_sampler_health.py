"""The scan loop survives a failing scan whose report fails too, and says when it is dead
or stuck (for /-/healthy and numa_exporter_scan_loop_up)."""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

from numa_exporter.config import Config
from numa_exporter.scan.sampler import Sampler, stale_after


class _Broken:
    """A structlog final logger whose every write fails, as a stderr pipe without reader."""

    def msg(self, message: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    log = debug = info = warning = error = critical = exception = msg


class _FailingScanner:
    """Stands in for Scanner: every scan raises (logging, the way a broken stderr does)."""

    def __init__(self) -> None:
        self.config = Config()
        self.stop_event: threading.Event | None = None
        self.calls = 0

    def scan(self) -> Any:
        self.calls += 1
        structlog.get_logger().info("scan")  # raises BrokenPipeError here
        raise AssertionError("unreachable")


def _wait(pred: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_loop_outlives_a_failing_scan_and_a_failing_report() -> None:
    structlog.configure(logger_factory=lambda *_: _Broken(),
                        processors=[structlog.processors.KeyValueRenderer()])
    scanner = _FailingScanner()
    sampler = Sampler(scanner, 0.01)  # type: ignore[arg-type]
    sampler.start()
    try:
        assert _wait(lambda: scanner.calls >= 5), "the scan loop died"
        assert sampler._thread.is_alive()
        assert sampler.failed_scans >= 4
    finally:
        sampler.stop()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _SlowScanner:
    """Scans block until released: a stuck scan."""

    def __init__(self) -> None:
        self.config = Config(scan_budget=2.0)
        self.stop_event: threading.Event | None = None
        self.release = threading.Event()
        self.entered = threading.Event()

    def scan(self) -> Any:
        self.entered.set()
        self.release.wait(30)
        return None


def test_stuck_scan_loop_is_unhealthy_after_the_limit() -> None:
    clock = _Clock()
    scanner = _SlowScanner()
    sampler = Sampler(scanner, 5.0, clock=clock)  # type: ignore[arg-type]
    assert not sampler.health().ok  # not started
    sampler.start()
    try:
        assert scanner.entered.wait(10)
        # 17 s = max(3 x 5 s, 5 + 2 + 10 s); one second short of it is still fine
        assert stale_after(5.0, 2.0) == 17.0
        clock.now += 16.0
        assert sampler.health().ok
        clock.now += 2.0
        h = sampler.health()
        assert not h.ok and "no scan completed for 18s" in h.reason
    finally:
        scanner.release.set()
        sampler.stop()


def test_dead_scan_loop_is_unhealthy() -> None:
    scanner = _SlowScanner()
    scanner.release.set()
    sampler = Sampler(scanner, 60.0)  # type: ignore[arg-type]
    sampler._run = lambda: None  # type: ignore[method-assign]  # a thread that just ends
    sampler._thread = threading.Thread(target=sampler._run)
    sampler.start()
    sampler._thread.join(5)
    h = sampler.health()
    assert not h.ok and h.reason == "scan loop exited"


def test_stale_after_uses_three_intervals_or_interval_plus_budget() -> None:
    assert stale_after(15.0, 10.0) == 45.0
    assert stale_after(1.0, 0.5) == 11.5
