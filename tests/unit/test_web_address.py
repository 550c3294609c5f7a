"""Binding: dual stack for ':port', IPv4 fallback without IPv6, one family otherwise; and the
cap on open connections."""

from __future__ import annotations

import errno
import socket
import time

import pytest
from tests.e2e.web_support import has_ipv6_loopback

from numa_exporter.web import address
from numa_exporter.web.config import WebSettings
from numa_exporter.web.server import serve


def test_empty_host_binds_dual_stack() -> None:
    if not has_ipv6_loopback():
        pytest.skip("this host has no IPv6: dual stack cannot be checked")
    s = address.bind("", 0)
    try:
        assert s.family == socket.AF_INET6
        assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        port = s.getsockname()[1]
        for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(fam) as c:
                c.settimeout(5)
                c.connect((host, port))
    finally:
        s.close()


def test_empty_host_falls_back_to_ipv4(monkeypatch: pytest.MonkeyPatch) -> None:
    real = address._listen

    def no_v6(family: int, addr: tuple[str, int], dual: bool = False) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, addr, dual)

    monkeypatch.setattr(address, "_listen", no_v6)
    s = address.bind("", 0)
    try:
        assert s.family == socket.AF_INET and s.getsockname()[0] == "0.0.0.0"
    finally:
        s.close()
    monkeypatch.setattr(address.socket, "has_ipv6", False)
    s = address.bind("", 0)
    s.close()
    assert s.family == socket.AF_INET


def test_other_bind_errors_are_not_hidden() -> None:
    s = address.bind("127.0.0.1", 0)
    try:
        with pytest.raises(OSError) as exc:
            address.bind("127.0.0.1", s.getsockname()[1])
        assert exc.value.errno == errno.EADDRINUSE
    finally:
        s.close()


def test_one_family_for_literal_hosts() -> None:
    s = address.bind("127.0.0.1", 0)
    assert s.family == socket.AF_INET
    s.close()
    if has_ipv6_loopback():
        s = address.bind("::1", 0)
        assert s.family == socket.AF_INET6
        assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
        s.close()


class _Empty:
    def collect(self) -> list[object]:
        return []


def test_connections_beyond_the_cap_are_closed() -> None:
    srv = serve(WebSettings(host="127.0.0.1", port=0), _Empty(),  # type: ignore[arg-type]
                lambda: None, None)
    try:
        srv.max_connections = 2
        port = srv.address[1]
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        deadline = time.monotonic() + 10
        while srv.connections < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert extra.recv(100) == b"", "closed at once, without waiting for a request"
        extra.close()
        assert srv.rejected == 1
        for s in held:
            s.close()
        while srv.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /-/healthy HTTP/1.0\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200 ")
    finally:
        srv.shutdown()
