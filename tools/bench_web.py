#!/usr/bin/env python3
"""Benchmark: scrape latency of the running daemon while scans run in the background.

    .venv/bin/python tools/bench_web.py [--root proc|many:N] [--seconds 20] [--clients 1]
                                        [--fresh] [--timeout 30] [--extra=--flag=value]

Starts the installed daemon with ``--scan.interval=1s`` (so a scan is nearly always running)
on this machine's /proc at ``--process.min-resident=0`` (``--root proc``, the default) or on
a generated fixture root with N copies of a fixture process (``--root many:N``), waits for
two scans, then scrapes /metrics over keep-alive connections from ``--clients`` threads for
``--seconds``. Prints one JSON line: series count, body bytes, scans during the run, scrape
latency median/p90/p99/max (ms), the daemon's threads and RSS, and the same for gzip.
Timings are wall clock on this machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.web_support import (  # noqa: E402
    build_many_root,
    root_args,
    rss_of,
    threads_of,
    wait_port,
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


FAILED: list[str] = []


def _scrapes(port: int, seconds: float, gzip: bool, out: list[float], fresh: bool,
             timeout: float) -> None:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        try:
            c.request("GET", "/metrics", headers=headers)
            r = c.getresponse()
            r.read()
        except OSError as exc:
            FAILED.append(type(exc).__name__)
            c.close()
            continue
        out.append(time.perf_counter() - t)
        if r.status != 200:
            FAILED.append(str(r.status))
        if fresh:
            c.close()
    c.close()


def _scans(port: int) -> float:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    for line in body.splitlines():
        if line.startswith("numa_exporter_scans_total "):
            return float(line.split()[1])
    return 0.0


def _run(port: int, seconds: float, clients: int, gzip: bool, fresh: bool = False,
         timeout: float = 30.0) -> dict[str, float]:
    lat: list[float] = []
    FAILED.clear()
    threads = [threading.Thread(target=_scrapes,
                                args=(port, seconds, gzip, lat, fresh, timeout))
               for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat.sort()

    def q(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 3)

    return {"scrapes": len(lat), "failed": len(FAILED),
            "median_ms": round(statistics.median(lat) * 1000, 3), "p90_ms": q(0.90),
            "p99_ms": q(0.99), "max_ms": round(lat[-1] * 1000, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="proc", help="proc or many:N")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--extra", action="append", default=[], help="extra daemon flag")
    ap.add_argument("--fresh", action="store_true",
                    help="a new connection per scrape (default: keep-alive)")
    ap.add_argument("--timeout", type=float, default=30.0, help="client time-out, seconds")
    ns = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-web-")
    if ns.root == "proc":
        args = ["--process.min-resident=0", "--log.format=json"]
    else:
        n = int(ns.root.split(":", 1)[1])
        args = root_args(build_many_root(Path(tmp.name) / "root", n))
    port = _free_port()
    exe = Path(sys.executable).parent / "numa-exporter"
    cmd = [str(exe), f"--web.listen-address=127.0.0.1:{port}", "--scan.interval=1s", *args,
           *ns.extra]
    with open(Path(tmp.name) / "daemon.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, timeout=60)
        deadline = time.monotonic() + 120
        while _scans(port) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/metrics")
        body = c.getresponse().read()
        c.close()
        series = sum(1 for ln in body.splitlines() if ln and not ln.startswith(b"#"))
        before = _scans(port)
        plain = _run(port, ns.seconds, ns.clients, False, ns.fresh, ns.timeout)
        gz = _run(port, ns.seconds / 2, ns.clients, True, ns.fresh, ns.timeout)
        report = {"root": ns.root, "clients": ns.clients, "series": series,
                  "body_bytes": len(body), "scans_during_run": _scans(port) - before,
                  "plain": plain, "gzip": gz, "daemon_threads": threads_of(proc.pid),
                  "daemon_rss_mib": rss_of(proc.pid) >> 20}
        print(json.dumps(report))
    finally:
        proc.terminate()
        proc.wait(10)
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
