"""The server in-process under hostile clients that cost CPU: floods of wrong passwords and
of scrapes the render cache cannot answer. Each test holds the expensive step behind a gate
it opens itself, so what was answered before that step could finish -- and in which order
the steps ran -- is observed exactly, with no clock involved."""

from __future__ import annotations

import base64
import re
import socket
import threading

import pytest
from tests.unit.web_harness import Gate, Snap, outstanding, wait_for

from numa_exporter.web import render
from numa_exporter.web.auth_queue import PER_PEER
from numa_exporter.web.config import WebSettings
from numa_exporter.web.handlers import UNCACHED_RENDERS
from numa_exporter.web.server import WebServer, serve

ATTACKER = "127.0.0.2"  # the flood's own loopback address; the scraper uses 127.0.0.1
FLOOD = 40


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _status(port: int, head: str, source: str = "127.0.0.1") -> int:
    """Send one request head from ``source``; return the response's status code."""
    with socket.create_connection(("127.0.0.1", port), timeout=60,
                                  source_address=(source, 0)) as s:
        s.sendall(head.encode() + b"\r\n")
        got = b""
        while b"\r\n" not in got and (chunk := s.recv(4096)):
            got += chunk
    return int(got.split(b" ", 2)[1]) if got else 0


class Answers:
    """Responses in the order they arrived, from several client threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[str, int]] = []
        self.threads: list[threading.Thread] = []

    def send(self, port: int, who: str, head: str, source: str = "127.0.0.1") -> None:
        def run() -> None:
            status = _status(port, head, source)
            with self.lock:
                self.got.append((who, status))
        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def of(self, who: str) -> list[int]:
        with self.lock:
            return [s for w, s in self.got if w == who]

    def join(self) -> None:
        for t in self.threads:
            t.join(60)


def test_right_password_gets_through_a_flood_of_wrong_ones(
        auth_server: WebServer, gated_bcrypt: tuple[Gate, list[bytes]]) -> None:
    """40 wrong passwords at once from one address, then the right one (never checked
    before) from another: the flood beyond the address's limit is refused before any
    check finishes, and the right password is the next one checked and answered 200 while
    the flood's checks are still outstanding."""
    gate, order = gated_bcrypt
    port = auth_server.address[1]
    answers = Answers()
    for i in range(FLOOD):
        answers.send(port, "flood", f"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: {_basic('prom', f'wrong{i}')}\r\n", ATTACKER)
    wait_for(lambda: len(answers.of("flood")) + outstanding(auth_server) == FLOOD,
          "the flood to be answered or queued")
    refused = answers.of("flood")
    assert refused == [429] * (FLOOD - PER_PEER), "refused at once, no check finished yet"
    answers.send(port, "right", "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: {_basic('prom', 'right')}\r\n")
    wait_for(lambda: outstanding(auth_server) == PER_PEER + 1, "the right one to be queued")
    assert len(order) == 1, "one check started (the flood's first), held at the gate"
    gate.let(2)  # the running check and the next one, whichever the server starts
    wait_for(lambda: bool(answers.of("right")), "the right password's answer")
    assert answers.of("right") == [200]
    assert order.index(b"right") == 1, f"checked right after the one running: {order}"
    assert outstanding(auth_server) == 1, "the flood's second check still outstanding"
    gate.let()
    answers.join()
    assert sorted(answers.of("flood")) == [401] * PER_PEER + [429] * (FLOOD - PER_PEER)
    assert auth_server.checks.stats.peer_refused == FLOOD - PER_PEER
    # now cached: answered without a check, whatever is outstanding
    assert _status(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                   f"Authorization: {_basic('prom', 'right')}\r\n") == 200
    assert len(order) == PER_PEER + 1


def test_a_repeated_wrong_password_is_checked_once(
        auth_server: WebServer, gated_bcrypt: tuple[Gate, list[bytes]]) -> None:
    gate, order = gated_bcrypt
    gate.let()
    port = auth_server.address[1]
    head = f"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: {_basic('prom', 'nope')}\r\n"
    assert [_status(port, head) for _ in range(5)] == [401] * 5
    assert order == [b"nope"]
    assert _status(port, "GET / HTTP/1.1\r\nHost: x\r\n") == 401, "no credentials"


def test_pipelined_requests_on_one_connection_are_checked_one_at_a_time(
        auth_server: WebServer, gated_bcrypt: tuple[Gate, list[bytes]]) -> None:
    """A connection never has two checks outstanding: five pipelined wrong passwords are all
    checked (401), none refused for the address's limit of two."""
    gate, order = gated_bcrypt
    gate.let()
    port = auth_server.address[1]
    heads = b"".join(f"GET / HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: {_basic('prom', f'p{i}')}\r\n\r\n".encode()
                     for i in range(5))
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(heads + b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    statuses = [int(m) for m in re.findall(rb"HTTP/1\.1 ([0-9]{3}) ", got)]
    assert statuses == [401] * 6
    assert order == [b"p0", b"p1", b"p2", b"p3", b"p4"]


@pytest.fixture
def gated_gzip(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[int]]:
    """Compression of a filtered body (the one rendering the cache cannot hold) that waits
    for the gate; records each call."""
    gate = threading.Event()
    calls: list[int] = []
    real = render.gzip_whole

    def gzip_whole(body: bytes) -> bytes:
        calls.append(len(body))
        gate.wait(60)
        return real(body)

    monkeypatch.setattr(render, "gzip_whole", gzip_whole)
    return gate, calls


def test_uncached_renderings_cannot_crowd_out_cached_scrapes(
        gated_gzip: tuple[threading.Event, list[int]]) -> None:
    """With --web.max-requests=10, ten scrapes that each need their own compression
    (name[] with gzip) are held: beyond their own limit they get 503 at once, and plain
    scrapes, which the render cache answers, still get 200 meanwhile."""
    gate, calls = gated_gzip
    srv = serve(WebSettings(host="127.0.0.1", port=0, max_requests=10), Snap(),
                lambda: None, None)
    try:
        port = srv.address[1]
        assert _status(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n") == 200  # cache filled
        answers = Answers()
        for _ in range(10):
            answers.send(port, "filtered", "GET /metrics?name[]=snap_value HTTP/1.1\r\n"
                         "Host: x\r\nAccept-Encoding: gzip\r\n", ATTACKER)
        wait_for(lambda: len(answers.of("filtered")) + srv.handlers.uncached.held == 10,
              "the filtered scrapes to be answered or held")
        assert answers.of("filtered") == [503] * (10 - UNCACHED_RENDERS)
        for accept in ("", "application/openmetrics-text; version=1.0.0"):
            for enc in ("", "gzip"):
                assert _status(port, f"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}"
                               f"\r\nAccept-Encoding: {enc}\r\n") == 200
        assert _status(port, "GET /metrics?name[]=snap_value HTTP/1.1\r\nHost: x\r\n") == 200
        gate.set()
        answers.join()
        assert sorted(answers.of("filtered")) == [200] * UNCACHED_RENDERS + [503] * (
            10 - UNCACHED_RENDERS)
        assert len(calls) == UNCACHED_RENDERS
    finally:
        gate.set()
        srv.shutdown()
