"""The daemon case: the real exporter watching N processes, scraped over loopback."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.targets import start_fleet

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    f = data[data.rfind(b")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _scans(log: Path) -> list[dict[str, object]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg", rec.get("event")) == "scan":
            out.append(rec)
    return out


def _wait_scans(log: Path, n: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(_scans(log)) < n:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {n} scans in {timeout}s: {log.read_text()[-2000:]}")
        time.sleep(0.05)


def run_daemon_case(n: int, mib: int, interval: float, scans: int, scrapes: int,
                    extra_args: tuple[str, ...] = ()) -> dict[str, object]:
    """Return CPU per scan, RSS, scrape latency and series count with ``n`` processes
    (``extra_args`` are added to the daemon's command line)."""
    fleet = start_fleet(n, mib)
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="numa-bench-"))
    log = tmp / "daemon.log"
    cmd = [sys.executable, "-m", "numa_exporter", f"--web.listen-address=127.0.0.1:{port}",
           "--process.min-resident=64MiB", "--process.include=^numa-bench-d$",
           f"--scan.interval={interval}s", "--log.level=info", "--log.format=json",
           *extra_args]
    with open(log, "wb") as fh:
        daemon = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    try:
        warm = 2  # the first scan reads every thread in full; the second is steady state
        _wait_scans(log, warm, daemon, 60 + interval * warm * 4)
        cpu0 = _cpu_seconds(daemon.pid)
        _wait_scans(log, warm + scans, daemon, 60 + interval * scans * 4)
        cpu1 = _cpu_seconds(daemon.pid)
        recs = _scans(log)[warm : warm + scans]
        url = f"http://127.0.0.1:{port}/metrics"
        lat: list[float] = []
        first = ""
        for _ in range(scrapes):  # back to back: later scans share the CPU with them
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=30) as resp:
                text = resp.read().decode()
            lat.append(time.perf_counter() - t0)
            first = first or text
        lat.sort()
        series = sum(1 for line in first.splitlines() if line and not line.startswith("#"))
        return {
            "processes": n,
            "scanned": statistics.median(int(str(r["processes"])) for r in recs),
            "left_for_next_scan": max(int(str(r.get("pending", 0))) for r in recs),
            "cpu_seconds_per_scan": (cpu1 - cpu0) / scans,
            "scan_seconds_median": statistics.median(float(str(r["seconds"])) for r in recs),
            "rss_bytes": _rss_bytes(daemon.pid),
            "scrape_seconds_median": statistics.median(lat),
            "scrape_seconds_p99": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))],
            "series": series,
            "scans_measured": scans,
            "scrapes": scrapes,
        }
    finally:
        daemon.terminate()
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        fleet.close()
        for p in tmp.iterdir():
            p.unlink()
        tmp.rmdir()
