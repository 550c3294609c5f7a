"""HTTP: a landing page at ``/`` and the exposition at the telemetry path."""

from __future__ import annotations

import gzip
import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from numa_exporter import __version__


def parse_listen_address(text: str) -> tuple[str, int]:
    """Return (host, port) for ``:10061``, ``127.0.0.1:10061`` or ``[::1]:10061``."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ValueError(f"not a listen address: {text!r} (examples: :10061, 127.0.0.1:10061)")
    host = host.strip("[]")
    return host or "", int(port_s)


def landing_page(path: str) -> bytes:
    """Return the HTML of the landing page, linking to the telemetry path."""
    p = html.escape(path)
    return (
        "<!doctype html><html><head><title>numa-exporter</title></head><body>"
        f"<h1>numa-exporter {html.escape(__version__)}</h1>"
        "<p>Per-process NUMA memory placement for Prometheus.</p>"
        f'<p><a href="{p}">{p}</a></p></body></html>\n'
    ).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    telemetry_path: str


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = f"numa-exporter/{__version__}"

    def log_message(self, format: str, *args: Any) -> None:
        return  # access logs would drown the one-line-per-scan log

    def _send(self, code: int, ctype: str, body: bytes, gz: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if gz:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == self.server.telemetry_path:
            body = generate_latest(self.server.registry)
            gz = "gzip" in self.headers.get("Accept-Encoding", "")
            self._send(200, CONTENT_TYPE_LATEST, gzip.compress(body) if gz else body, gz)
        elif path == "/":
            self._send(200, "text/html; charset=utf-8", landing_page(self.server.telemetry_path))
        elif path in ("/-/healthy", "/-/ready"):
            self._send(200, "text/plain; charset=utf-8", b"OK\n")
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")


def serve(registry: CollectorRegistry, host: str, port: int, telemetry_path: str
          ) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Return a started HTTP server (in a daemon thread) serving the registry."""
    server = _Server((host, port), _Handler)
    server.registry = registry
    server.telemetry_path = telemetry_path
    t = threading.Thread(target=server.serve_forever, name="numa-http", daemon=True)
    t.start()
    return server, t
