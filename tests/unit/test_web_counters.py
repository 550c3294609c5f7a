"""The web layer's counters on /metrics: each kind of refused request and each credential
outcome counted under its own label value, read back from the server's own exposition.

The expensive steps (bcrypt, the compression of a filtered scrape) are held behind gates the
tests open themselves, so which requests are refused is exact, with no clock involved.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families
from tests.unit.web_harness import Gate, Snap, outstanding, wait_for

from numa_exporter.web import render
from numa_exporter.web.config import WebSettings
from numa_exporter.web.server import WebServer, serve

REFUSED = "numa_exporter_web_requests_refused_total"
AUTH = "numa_exporter_web_auth_checks_total"
# written out here, not imported: the label values are part of the exported contract
REASONS = ("auth_client_limit", "auth_global_limit", "max_requests", "uncached_render_limit",
           "bad_request", "connection_limit")
RESULTS = ("ok", "wrong", "cached_ok", "cached_wrong", "missing")


def _basic(password: str, user: str = "prom") -> str:
    return "Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _get(port: int, head: str, source: str = "127.0.0.1") -> tuple[int, bytes]:
    """Send one request (``head`` without its final blank line, Connection: close added);
    return the status (0: closed without an answer) and the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=60,
                                  source_address=(source, 0)) as s:
        s.sendall(head.encode() + b"Connection: close\r\n\r\n")
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:  # closed unread: the kernel resets the connection
            pass
    if not got:
        return 0, b""
    head_bytes, _, body = got.partition(b"\r\n\r\n")
    return int(head_bytes.split(b" ", 2)[1]), body


def _scrape(port: int, extra: str = "") -> str:
    status, body = _get(port, f"GET /metrics HTTP/1.1\r\nHost: x\r\n{extra}")
    assert status == 200, (status, body[:200])
    return body.decode()


def _counts(text: str) -> dict[tuple[str, str], float]:
    """Return the web counters of an exposition by (sample name, its one label's value)."""
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in (REFUSED, AUTH):
                assert len(s.labels) == 1, s
                out[(s.name, next(iter(s.labels.values())))] = s.value
    return out


def _expect(text: str, refused: dict[str, int] | None = None,
            checks: dict[str, int] | None = None) -> None:
    """Assert every reason and result is exported, at the given counts, others at 0."""
    want = {(REFUSED, r): float((refused or {}).get(r, 0)) for r in REASONS}
    want.update({(AUTH, r): float((checks or {}).get(r, 0)) for r in RESULTS})
    assert _counts(text) == want


class Clients:
    """Requests sent from threads; their statuses in the order they were answered."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.lock = threading.Lock()
        self.statuses: list[int] = []
        self.threads: list[threading.Thread] = []

    def send(self, head: str, source: str = "127.0.0.1") -> None:
        def run() -> None:
            status, _ = _get(self.port, head, source)
            with self.lock:
                self.statuses.append(status)
        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def answered(self) -> list[int]:
        with self.lock:
            return list(self.statuses)

    def join(self) -> list[int]:
        for t in self.threads:
            t.join(60)
        return sorted(self.answered())


def test_auth_outcomes_and_the_per_address_limit_are_counted(
        auth_server: WebServer, gated_bcrypt: tuple[Gate, list[bytes]]) -> None:
    """10 wrong passwords at once from one address: 2 checked (wrong), 8 refused with 429
    (auth_client_limit); then the right one (ok), a wrong one again (cached_wrong), none
    (missing), and the scrape that reads the counters (cached_ok)."""
    gate, order = gated_bcrypt
    port = auth_server.address[1]
    flood = Clients(port)
    for i in range(10):
        flood.send(f"GET / HTTP/1.1\r\nHost: x\r\n{_basic(f'wrong{i}')}\r\n", "127.0.0.2")
    wait_for(lambda: len(flood.answered()) + outstanding(auth_server) == 10, "the flood")
    assert flood.answered() == [429] * 8
    gate.let(1000)
    assert flood.join() == [401] * 2 + [429] * 8
    assert _get(port, f"GET / HTTP/1.1\r\nHost: x\r\n{_basic('right')}\r\n")[0] == 200
    again = order[0].decode()
    assert _get(port, f"GET / HTTP/1.1\r\nHost: x\r\n{_basic(again)}\r\n")[0] == 401
    assert _get(port, "GET / HTTP/1.1\r\nHost: x\r\n")[0] == 401
    assert _get(port, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n")[0] == 401
    text = _scrape(port, _basic("right") + "\r\n")
    _expect(text, refused={"auth_client_limit": 8},
            checks={"wrong": 2, "ok": 1, "cached_wrong": 1, "missing": 2, "cached_ok": 1})


def test_the_global_check_limit_is_counted_for_refused_and_dropped_checks(
        auth_server: WebServer, gated_bcrypt: tuple[Gate, list[bytes]]) -> None:
    """One check running and 16 waiting (2 of them from one address): a newcomer from a
    new address takes the place of that address's newest (503, dropped), the next newcomer
    is refused (503): auth_global_limit counts both."""
    gate, _ = gated_bcrypt
    port = auth_server.address[1]
    clients = Clients(port)
    sources = ["127.0.0.10", "127.0.0.11", "127.0.0.11",
               *(f"127.0.0.{20 + i}" for i in range(14)), "127.0.0.50", "127.0.0.51"]
    for n, source in enumerate(sources):
        clients.send(f"GET / HTTP/1.1\r\nHost: x\r\n{_basic(f'wrong{n}')}\r\n", source)
        wait_for(lambda n=n: len(clients.answered()) + outstanding(auth_server) == n + 1,
              f"request {n} to be queued or answered")
    assert clients.answered() == [503, 503]
    gate.let(1000)
    assert clients.join() == [401] * 17 + [503] * 2
    text = _scrape(port, _basic("right") + "\r\n")
    _expect(text, refused={"auth_global_limit": 2}, checks={"wrong": 17, "ok": 1})


@pytest.fixture
def gated_gzip(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Compression of a filtered body (the one answer no cache holds) waits for the gate."""
    opened = threading.Event()
    real = render.gzip_whole

    def gzip_whole(body: bytes) -> bytes:
        opened.wait(60)
        return real(body)

    monkeypatch.setattr(render, "gzip_whole", gzip_whole)
    yield opened
    opened.set()


def test_scrape_limits_are_counted(gated_gzip: threading.Event) -> None:
    """--web.max-requests=2, both places held by filtered gzip scrapes: a third filtered
    one is refused for the uncached-render limit, a plain one for --web.max-requests."""
    srv = serve(WebSettings(host="127.0.0.1", port=0, max_requests=2), Snap(),
                lambda: None, None)
    try:
        port = srv.address[1]
        filtered = ("GET /metrics?name[]=snap_value HTTP/1.1\r\nHost: x\r\n"
                    "Accept-Encoding: gzip\r\n")
        held = Clients(port)
        for _ in range(2):
            held.send(filtered)
        wait_for(lambda: srv.scrapes.held == 2, "two filtered scrapes to be held")
        assert _get(port, filtered)[0] == 503
        assert _get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n")[0] == 503
        gated_gzip.set()
        assert held.join() == [200, 200]
        _expect(_scrape(port), refused={"uncached_render_limit": 1, "max_requests": 1})
    finally:
        gated_gzip.set()
        srv.shutdown()


@pytest.fixture
def server() -> Iterator[WebServer]:
    srv = serve(WebSettings(host="127.0.0.1", port=0), Snap(), lambda: None, None)
    yield srv
    srv.shutdown()


def test_bad_requests_and_refused_connections_are_counted(server: WebServer) -> None:
    port = server.address[1]
    _expect(_scrape(port))  # every label value there from the start, at 0
    assert _get(port, "GARBAGE\r\n")[0] == 400
    assert _get(port, "GET /metrics HTTP/1.1\r\n")[0] == 400  # no Host
    assert _get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n")[0] == 400
    assert _get(port, "GET /nope HTTP/1.1\r\nHost: x\r\n")[0] == 404  # answered: not counted
    server.max_connections = 1
    with socket.create_connection(("127.0.0.1", port), timeout=60) as idle:
        wait_for(lambda: server.connections == 1, "the idle connection to be accepted")
        assert _get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n") == (0, b"")
        idle.close()
    wait_for(lambda: server.connections == 0, "the idle connection to close")
    _expect(_scrape(port), refused={"bad_request": 3, "connection_limit": 1})


def test_counters_pass_promtool_and_parse_as_openmetrics(server: WebServer) -> None:
    port = server.address[1]
    assert _get(port, "GARBAGE\r\n")[0] == 400
    om = _scrape(port, "Accept: application/openmetrics-text; version=1.0.0\r\n")
    fams = {f.name: f for f in parse_openmetrics(om)}
    refused = fams["numa_exporter_web_requests_refused"]
    assert refused.type == "counter"
    assert {s.labels["reason"]: s.value for s in refused.samples}["bad_request"] == 1
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (apt-get install prometheus) is not available")
    r = subprocess.run([promtool, "check", "metrics"], input=_scrape(port), text=True,
                       capture_output=True, timeout=60, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (
        r.stdout + r.stderr)


def test_disable_exporter_metrics_leaves_the_web_counters_out() -> None:
    """As node_exporter's flag leaves out its promhttp_* handler metrics."""
    srv = serve(WebSettings(host="127.0.0.1", port=0, disable_exporter_metrics=True), Snap(),
                lambda: None, None)
    try:
        port = srv.address[1]
        assert _get(port, "GARBAGE\r\n")[0] == 400
        text = _scrape(port)
        assert "snap_value 1" in text
        assert "numa_exporter_web_" not in text
    finally:
        srv.shutdown()
