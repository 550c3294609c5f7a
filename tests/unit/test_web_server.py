"""The server in-process on loopback: request limits, malformed and slow requests, keep-alive."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from numa_exporter.web.config import WebSettings
from numa_exporter.web.server import WebServer, serve


class Gated(Collector):
    """One gauge; collect waits for ``gate`` (so scrapes can be held in flight)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def collect(self) -> Iterator[Metric]:
        self.gate.wait(20)
        g = GaugeMetricFamily("snap_value", "from the snapshot")
        g.add_metric([], 1)
        yield g


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[WebServer, Gated]]:
    kw = getattr(request, "param", {})
    col = Gated()
    key = object()
    settings = WebSettings(host="127.0.0.1", port=0, **kw)
    srv = serve(settings, col, lambda: key, None)
    yield srv, col
    col.gate.set()
    srv.shutdown()


def _get(port: int, path: str = "/metrics", **headers: str) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def _raw(port: int, data: bytes, timeout: float = 30) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("server", [{"max_requests": 2}], indirect=True)
def test_scrapes_beyond_max_requests_get_503(server: tuple[WebServer, Gated]) -> None:
    srv, col = server
    port = srv.address[1]
    col.gate.clear()  # the first rendering of the snapshot waits: both scrapes wait for it
    results: list[int] = []
    held = [threading.Thread(target=lambda: results.append(_get(port)[0])) for _ in range(2)]
    for t in held:
        t.start()
    deadline = time.monotonic() + 20
    while srv.in_flight < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.in_flight == 2
    status, body = _get(port)
    assert status == 503, body
    assert _get(port, "/-/healthy")[0] == 200, "the cap is on scrapes only"
    col.gate.set()
    for t in held:
        t.join(20)
    assert results == [200, 200]
    assert _get(port)[0] == 200


@pytest.mark.parametrize("server", [{"max_requests": 0}], indirect=True)
def test_max_requests_zero_means_no_limit(server: tuple[WebServer, Gated]) -> None:
    srv, col = server
    port = srv.address[1]
    col.gate.clear()
    results: list[int] = []
    held = [threading.Thread(target=lambda: results.append(_get(port)[0])) for _ in range(50)]
    for t in held:
        t.start()
    deadline = time.monotonic() + 20
    while srv.in_flight < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.in_flight == 50
    col.gate.set()
    for t in held:
        t.join(20)
    assert results == [200] * 50


@pytest.mark.parametrize("server", [{"read_header_timeout": 0.5}], indirect=True)
def test_malformed_and_slow_requests(server: tuple[WebServer, Gated]) -> None:
    port = server[0].address[1]
    assert _raw(port, b"GET /metrics\r\n").startswith(b"HTTP/1.1 400 ")  # HTTP/0.9
    assert _raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n").startswith(b"HTTP/1.1 408 ")
    assert _raw(port, b"") == b"", "a silent connection is closed after the header timeout"
    assert _raw(port, b"GET /metrics HTTP/2.0\r\n\r\n").startswith(b"HTTP/1.1 505 ")
    assert _raw(port, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 2000 + b"\r\n").startswith(
        b"HTTP/1.1 431 ")
    assert _raw(port, b"POST /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert _raw(port, b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                ).startswith(b"HTTP/1.1 501 ")
    assert _raw(port, b"GET / HTTP/1.1\r\nbad header\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    many = "&".join(f"name[]=m{i}" for i in range(300))
    assert _raw(port, f"GET /metrics?{many} HTTP/1.0\r\n\r\n".encode()).startswith(
        b"HTTP/1.1 400 ")


class Broken(Collector):
    def collect(self) -> Iterator[Metric]:
        raise RuntimeError("a collector bug")


def test_a_failing_collector_gives_500_and_the_server_lives() -> None:
    srv = serve(WebSettings(host="127.0.0.1", port=0), Broken(), lambda: None, None)
    try:
        port = srv.address[1]
        assert _get(port)[0] == 500
        assert _get(port, "/-/healthy")[0] == 200
    finally:
        srv.shutdown()


def test_keep_alive_serves_several_requests(server: tuple[WebServer, Gated]) -> None:
    port = server[0].address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for path in ("/metrics", "/", "/-/ready", "/nope", "/metrics?x=1"):
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        assert r.status == (404 if path == "/nope" else 200)
    c.request("HEAD", "/metrics")
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"" and int(r.headers["Content-Length"]) > 0
    c.close()
    out = _raw(port, b"GET /-/healthy HTTP/1.0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(b"\r\n\r\nOK\n")


@pytest.mark.parametrize(("head", "status"), [
    # RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is a 400
    (b"GET /metrics HTTP/1.1\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: a b\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: a/b\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n", 200),
    (b"GET /metrics HTTP/1.1\r\nHOST: [::1]:10061\r\n", 200),
    (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:10061\r\n", 200),
    (b"GET /metrics HTTP/1.1\r\nHost:\r\n", 200),  # empty: allowed (no authority)
    (b"GET http://x/metrics HTTP/1.1\r\nHost: x\r\n", 200),
    (b"GET /metrics HTTP/1.0\r\n", 200),  # HTTP/1.0 needs none
    # RFC 9110 5.5: NUL, CR, LF and other controls in a value are refused; HTAB is fine
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: ab\r\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: \x1b[31m\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\x00\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: \x00text/plain\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n", 200),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\n", 200),  # obs-text
])
def test_host_and_control_characters(server: tuple[WebServer, Gated], head: bytes,
                                     status: int) -> None:
    out = _raw(server[0].address[1], head + b"Connection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 %d " % status), out[:200]


def test_health_reports_what_the_daemon_says() -> None:
    reason: list[str | None] = [None]
    srv = serve(WebSettings(host="127.0.0.1", port=0), Gated(), lambda: None, None,
                health=lambda: reason[0])
    try:
        port = srv.address[1]
        assert _get(port, "/-/healthy") == (200, b"OK\n")
        reason[0] = "no scan completed for 95s"
        assert _get(port, "/-/healthy") == (503, b"no scan completed for 95s\n")
        assert _get(port, "/-/ready")[0] == 200
    finally:
        srv.shutdown()
