"""What the in-process web server tests share: a one-family collector, a gate that holds
the expensive step (bcrypt, compression) until the test opens it, and waiting on a
condition. The fixtures built on them (``auth_server``, ``gated_bcrypt``) are in
``conftest.py`` next to this file."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from numa_exporter.web.server import WebServer


class Snap(Collector):
    """A collector with one gauge, standing for the snapshot's families."""

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("snap_value", "from the snapshot")
        g.add_metric([], 1)
        yield g


class Gate:
    """Lets the held calls through one by one: ``let(n)`` lets n more through."""

    def __init__(self) -> None:
        self._sem = threading.Semaphore(0)

    def wait(self) -> None:
        self._sem.acquire(timeout=60)

    def let(self, n: int = 1000) -> None:
        self._sem.release(n)


def wait_for(cond: Callable[[], bool], what: str) -> None:
    """Return once ``cond()`` holds; fail the test after 30 s (a hang, not a timing check)."""
    deadline = time.monotonic() + 30
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def outstanding(srv: WebServer) -> int:
    """Return the credential checks waiting or running in the server."""
    return srv.checks.waiting + srv.checks.running
