"""The daemon's HTTP server under hostile clients: idle connections, slow readers, requests
that never finish, disconnects mid-response; bounded threads and memory, a real backlog.

Thread counts, RSS and scrape latencies are printed (``-s``) and recorded as properties;
only bounded thread counts and successful scrapes are asserted, never wall-clock numbers.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Daemon
from tests.e2e.web_support import (
    build_many_root,
    open_fds,
    raw_request,
    root_args,
    rss_of,
    threads_of,
)

pytestmark = pytest.mark.e2e
StartDaemon = Callable[..., Daemon]
# Enough processes for a body (about 5.5 MB) larger than loopback socket buffers absorb.
PROCESSES = 3600
MAX_THREADS = 12  # main, sampler, event loop, 2 render + 1 uncached + 1 auth workers, slack


@pytest.fixture(scope="module")
def big_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_many_root(tmp_path_factory.mktemp("web") / "root", PROCESSES)


def _ready(d: Daemon, timeout: float = 120) -> int:
    """Wait for the first scan; return the exposition's size."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.proc.poll() is not None:
            raise AssertionError(f"daemon exited: {d.log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(d.url + "/metrics", timeout=30) as r:
                body = r.read()
            if b"numa_exporter_scans_total 1" in body:
                return len(body)
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError("no first scan")


def _slow_reader(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return s


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for s in held:
        s.close()


def _scrape(url: str) -> tuple[int, float]:
    t = time.monotonic()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
        assert r.status == 200
    assert b"numa_exporter_scans_total" in body
    return len(body), time.monotonic() - t


def test_idle_connections_and_slow_readers_cost_no_threads(
        start_daemon: StartDaemon, big_root: Path, sockets: list[socket.socket],
        record_property: Any) -> None:
    d = start_daemon(*root_args(big_root), "--scan.interval=120s")
    size = _ready(d)
    pid = d.proc.pid
    base = {"threads": threads_of(pid), "rss_mib": rss_of(pid) >> 20}
    sockets.extend(socket.create_connection(("127.0.0.1", d.port)) for _ in range(500))
    sockets.extend(_slow_reader(d.port) for _ in range(50))
    time.sleep(1.0)
    loaded = {"threads": threads_of(pid), "rss_mib": rss_of(pid) >> 20, "fds": open_fds(pid)}
    latencies = sorted(_scrape(d.url + "/metrics")[1] for _ in range(20))
    after = {"threads": threads_of(pid), "rss_mib": rss_of(pid) >> 20}
    report = {"body_bytes": size, "before": base, "loaded": loaded, "after_scrapes": after,
              "scrape_seconds_median": latencies[10], "scrape_seconds_max": latencies[-1]}
    print(json.dumps(report))
    record_property("web_load", json.dumps(report))
    assert loaded["fds"] >= 550, "the connections are open on the daemon's side"
    assert loaded["threads"] <= MAX_THREADS, report
    assert after["threads"] <= MAX_THREADS, report


def test_time_outs_close_silent_partial_and_unread_connections(
        start_daemon: StartDaemon, big_root: Path, sockets: list[socket.socket]) -> None:
    # every process in full: a body larger than the socket buffers can take at once
    d = start_daemon(*root_args(big_root), "--scan.interval=120s", "--process.detail-above=0",
                     "--web.read-header-timeout=1s", "--web.write-timeout=2s",
                     "--web.idle-timeout=1s")
    _ready(d)
    silent = socket.create_connection(("127.0.0.1", d.port))
    partial = socket.create_connection(("127.0.0.1", d.port))
    partial.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    unread = _slow_reader(d.port)
    sockets.extend((silent, partial, unread))
    for s in sockets:
        s.settimeout(60)
    assert silent.recv(100) == b"", "a connection that never speaks is closed"
    assert partial.recv(100).startswith(b"HTTP/1.1 408 "), "unfinished headers get 408"
    # the unread response is abandoned after the write timeout: the socket is reset or closed
    got = 0
    time.sleep(4)
    unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    try:
        while chunk := unread.recv(1 << 20):
            got += len(chunk)
    except ConnectionResetError:
        pass
    size = _ready(d)
    assert got < size, "the server gave up on the slow reader before sending everything"
    # HTTP/0.9 has no headers: answered 400 at once instead of waiting for headers forever
    assert raw_request(d.port, b"GET /metrics\r\n", timeout=60).startswith(b"HTTP/1.1 400 ")
    # an idle keep-alive connection is closed after --web.idle-timeout
    ka = socket.create_connection(("127.0.0.1", d.port), timeout=60)
    sockets.append(ka)
    ka.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while not first.endswith(b"\r\n\r\nOK\n"):
        first += ka.recv(4096)
    assert first.startswith(b"HTTP/1.1 200 ") and b"Connection: close" not in first
    assert ka.recv(4096) == b"", "closed once idle"
    assert "Traceback" not in d.log_path.read_text()


def test_disconnects_are_one_line_logs_not_tracebacks(
        start_daemon: StartDaemon, big_root: Path) -> None:
    d = start_daemon(*root_args(big_root), "--scan.interval=120s")
    _ready(d)
    for _ in range(5):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", d.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST with most of the response unsent
    deadline = time.monotonic() + 30
    log = ""
    while time.monotonic() < deadline:
        log = d.log_path.read_text()
        if "http client error" in log:
            break
        time.sleep(0.2)
    _scrape(d.url + "/metrics")
    assert "Traceback" not in log
    errors = [json.loads(ln) for ln in log.splitlines() if "http client error" in ln]
    assert errors, log[-2000:]
    assert all(e["level"] == "info" and e["peer"].startswith("127.0.0.1:") for e in errors)
    assert all(ln.startswith("{") for ln in log.splitlines() if ln.strip()), log[-2000:]


def test_listen_backlog_is_large(start_daemon: StartDaemon) -> None:
    ss = shutil.which("ss")
    if ss is None:
        pytest.skip("ss not installed (Debian package iproute2; tools/test.sh installs it)")
    d = start_daemon("--path.procfs=/proc", "--scan.interval=120s", "--log.format=json")
    deadline = time.monotonic() + 30
    out = ""
    while time.monotonic() < deadline:
        out = subprocess.run([ss, "-ltnH", f"sport = :{d.port}"], capture_output=True,
                             text=True, check=False, timeout=10).stdout
        if out.strip():
            break
        time.sleep(0.2)
    backlog = int(out.split()[2])  # Send-Q of a listening socket is its backlog
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    assert backlog >= min(1024, somaxconn), out


def test_requests_without_headers_do_not_hang_with_default_flags(
        start_daemon: StartDaemon, sockets: list[socket.socket]) -> None:
    """HTTP/0.9 gets 400 at once; a silent connection is closed after the default header
    timeout (10s). The client's 60s socket timeout only guards against a hang."""
    d = start_daemon("--path.procfs=/proc", "--scan.interval=120s", "--log.format=json")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", d.port), timeout=5).close()
            break
        except OSError:
            time.sleep(0.2)
    assert raw_request(d.port, b"GET /metrics\r\n", timeout=60).startswith(b"HTTP/1.1 400 ")
    silent = socket.create_connection(("127.0.0.1", d.port), timeout=60)
    sockets.append(silent)
    assert silent.recv(100) == b""
