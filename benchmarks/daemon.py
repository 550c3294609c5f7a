"""The real daemon, measured from outside.

``Daemon`` starts ``python -m numa_exporter`` on a loopback port with a JSON log and reads
what it costs the way any operator could: CPU time, RSS, threads and open fds from psutil,
scans from its log and from ``numa_exporter_scans_total`` on ``/metrics``.

The fleet case (:func:`run_fleet_case`): N processes of ~70 MiB each, CPU per scan, RSS and
scrape latency as the watched processes grow in number.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from benchmarks.targets import (
    start_fleet,
)

GiB = 1 << 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample_value(text: str, name: str, **labels: str) -> float | None:
    """Return the value of the first sample ``name{labels...}`` in an exposition, or None."""
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name): len(name) + 1] not in ("{", " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


class Daemon:
    """A running exporter (``python -m numa_exporter``) with a JSON log in ``workdir``."""

    def __init__(self, args: Sequence[str], workdir: Path, name: str = "daemon") -> None:
        self.port = _free_port()
        self.log = workdir / f"{name}.log"
        cmd = [sys.executable, "-m", "numa_exporter",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info",
               "--log.format=json", *args]
        self.args = list(args)
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)
        self._seen = 0  # log bytes already parsed
        self._scans: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """Return the daemon's user + system CPU seconds so far (clock-tick resolution)."""
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def usage(self) -> dict[str, int]:
        """Return the daemon's RSS bytes, threads and open fds now."""
        with self.ps.oneshot():
            return {"rss_bytes": int(self.ps.memory_info().rss),
                    "threads": int(self.ps.num_threads()), "fds": int(self.ps.num_fds())}

    def scans(self) -> list[dict[str, Any]]:
        """Return the ``scan`` lines of the log so far, parsed."""
        with open(self.log, "rb") as fh:
            fh.seek(self._seen)
            data = fh.read()
        cut = data.rfind(b"\n") + 1
        self._seen += cut
        for line in data[:cut].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("msg", rec.get("event")) == "scan":
                self._scans.append(rec)
        return self._scans

    def wait_scans(self, n: int, timeout: float) -> None:
        """Return once the log holds ``n`` scans; raise RuntimeError on exit or time-out."""
        deadline = time.monotonic() + timeout
        while len(self.scans()) < n:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {n} scans in {timeout}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def scrape(self, timeout: float = 30.0) -> str:
        """Return the text of one ``/metrics`` scrape."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())

    def pause(self) -> None:
        """Stop the daemon (SIGSTOP) so that it neither scans nor competes for the CPU."""
        self.ps.suspend()

    def resume(self) -> None:
        """Let a paused daemon go on (SIGCONT)."""
        self.ps.resume()

    def close(self) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.ps.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- the fleet case --------------------------------------------------------------------------


def run_fleet_case(n: int, mib: int, interval: float, scans: int, scrapes: int
                   ) -> dict[str, object]:
    """Return CPU per scan, RSS, threads, fds, scrape latency and series count of the daemon
    watching ``n`` processes of ``mib`` MiB (:func:`start_fleet`)."""
    fleet = start_fleet(n, mib)
    workdir = Path(tempfile.mkdtemp(prefix="numa-bench-"))
    d: Daemon | None = None
    try:
        d = Daemon(("--process.min-resident=64MiB", "--process.include=^numa-bench-d$",
                    f"--scan.interval={interval}s"), workdir)
        warm = 2  # the first scan reads every thread in full; the second is steady state
        d.wait_scans(warm, 60 + interval * warm * 4)
        cpu0 = d.cpu_seconds()
        d.wait_scans(warm + scans, 60 + interval * scans * 4)
        cpu1 = d.cpu_seconds()
        recs = d.scans()[warm: warm + scans]
        lat: list[float] = []
        first = ""
        for _ in range(scrapes):  # back to back: later scans share the CPU with them
            t0 = time.perf_counter()
            text = d.scrape()
            lat.append(time.perf_counter() - t0)
            first = first or text
        lat.sort()
        series = sum(1 for line in first.splitlines() if line and not line.startswith("#"))
        usage = d.usage()
        return {
            "processes": n,
            "scanned": statistics.median(int(str(r["processes"])) for r in recs),
            "left_for_next_scan": max(int(str(r.get("pending", 0))) for r in recs),
            "cpu_seconds_per_scan": (cpu1 - cpu0) / scans,
            "scan_seconds_median": statistics.median(float(str(r["seconds"])) for r in recs),
            **usage,
            "scrape_seconds_median": statistics.median(lat),
            "scrape_seconds_p99": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))],
            "series": series,
            "scans_measured": scans,
            "scrapes": scrapes,
        }
    finally:
        if d is not None:
            d.close()
        fleet.close()
        shutil.rmtree(workdir, ignore_errors=True)
