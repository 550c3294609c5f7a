"""Flood clients for the soak's hostile rounds: many threads sending requests in a loop from
loopback addresses other than the scraper's, counting the answers by status.

A flood is bounded: ``clients`` threads, each with one request in flight at a time and a
pause after each answer, for ``seconds``, every request with a socket time-out; nothing is
sent beyond 127.0.0.0/8. The pause keeps the soak's own CPU use (it runs on the same
machine) from being what slows the daemon: 40 clients pausing 0.2 s still send several times
more requests than bcrypt checks or uncached renderings can be done.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

ATTACKERS = tuple(f"127.0.0.{i}" for i in range(2, 10))  # the scraper is 127.0.0.1


def basic(user: str, password: str) -> str:
    """Return an ``Authorization`` header value for basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def status_of(port: int, head: str, source: str = "127.0.0.1", timeout: float = 10.0,
              host: str = "127.0.0.1", read_body: bool = True) -> int:
    """Send one request head (``Connection: close`` added) from ``source``; return the
    response's status code, 0 when there is none in time or the connection failed. Without
    ``read_body`` the connection is closed once the status line is in (the server has done
    its work by then; the soak saves reading what it would throw away)."""
    try:
        with socket.create_connection((host, port), timeout=timeout,
                                      source_address=(source, 0)) as s:
            s.sendall(head.encode("latin-1") + b"Connection: close\r\n\r\n")
            got = b""
            while b"\r\n" not in got and (chunk := s.recv(4096)):
                got += chunk
            while read_body and s.recv(65536):  # to the end, as a scraper would
                pass
    except OSError:
        return 0
    parts = got.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@dataclass
class Flood:
    """Answers a flood got, by status (0: none in time or a failed connection)."""

    statuses: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, port: int, heads: Callable[[int, int], str], clients: int,
            seconds: float, stop: threading.Event, pause: float = 0.2) -> None:
        """Send ``heads(client, n)`` from ``clients`` threads for ``seconds`` (or until
        ``stop``), each from one of ``ATTACKERS``, pausing ``pause`` seconds after each
        answer; return when all are done."""
        end = time.monotonic() + seconds

        def client(c: int) -> None:
            n = 0
            while time.monotonic() < end and not stop.is_set():
                st = status_of(port, heads(c, n), ATTACKERS[c % len(ATTACKERS)],
                               read_body=False)
                with self.lock:
                    self.statuses[st] += 1
                n += 1
                stop.wait(pause)

        threads = [threading.Thread(target=client, args=(c,), daemon=True)
                   for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 30)

    def count(self, status: int) -> int:
        """Return how many answers had this status so far."""
        with self.lock:
            return self.statuses[status]

    def summary(self) -> str:
        """Return the counts as ``total (status: count, ...)``."""
        with self.lock:
            parts = ", ".join(f"{k or 'none'}: {v}" for k, v in sorted(self.statuses.items()))
            return f"{sum(self.statuses.values())} ({parts})"


def cpu_seconds(pid: int) -> float:
    """Return the user + system CPU seconds process ``pid`` has used (0 when unknown)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system)


def scans_in(body: str) -> float:
    """Return ``numa_exporter_scans_total`` from an exposition (0 when absent)."""
    for line in body.splitlines():
        if line.startswith("numa_exporter_scans_total "):
            return float(line.split()[1])
    return 0.0
