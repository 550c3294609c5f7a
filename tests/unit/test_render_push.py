"""A published snapshot wakes the renderer at once (issue 14: no once-a-second poll)."""

from __future__ import annotations

import http.client
import threading
from typing import Any

import pytest
from tests.unit.web_harness import Snap, wait_for

from numa_exporter.config import Config
from numa_exporter.scan.sampler import Sampler
from numa_exporter.web import WebSettings, serve
from numa_exporter.web import server as web_server
from numa_exporter.web.negotiate import Body


def _scrape(port: int) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", "/metrics")
        assert c.getresponse().status == 200
    finally:
        c.close()


def test_published_snapshot_is_rendered_without_a_scrape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_server, "REFRESH_POLL_S", 3600.0)  # only the push can wake it
    key: list[object] = [object()]
    srv = serve(WebSettings(host="127.0.0.1", port=0), Snap(), lambda: key[0], None)
    try:
        _scrape(srv.address[1])  # the text format is asked for once
        before = srv.cache.renders
        srv.snapshot_published()  # nothing new: no rendering
        key[0] = object()  # a scan completes
        srv.snapshot_published()
        wait_for(lambda: srv.cache.ready(Body.TEXT, False), "the new snapshot rendered")
        assert srv.cache.renders == before + 1
    finally:
        srv.shutdown()


class _Scanner:
    def __init__(self) -> None:
        self.config = Config()
        self.stop_event: threading.Event | None = None
        self.scans = 0

    def scan(self) -> Any:
        self.scans += 1
        return self.scans


def test_sampler_tells_its_listeners_and_survives_a_failing_one() -> None:
    sampler = Sampler(_Scanner(), 1.0)  # type: ignore[arg-type]
    heard: list[object] = []

    def broken() -> None:
        raise RuntimeError("listener bug")

    sampler.listeners += [broken, lambda: heard.append(sampler.snapshot)]
    assert sampler.scan_once() == 1
    assert sampler.scan_once() == 2
    assert heard == [1, 2]  # after each publish, with the new snapshot in place
