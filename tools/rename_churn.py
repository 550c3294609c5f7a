"""Series a process mints in a real Prometheus by renaming itself (issue 15 #9).

    .venv/bin/python -m tools.rename_churn                 # 60 s, this checkout's exporter
    .venv/bin/python -m tools.rename_churn --duration 30 --json churn.json
    PYTHONPATH=OTHER_CHECKOUT/src .venv/bin/python -m tools.rename_churn --module

A child process renames itself (``prctl(PR_SET_NAME)``) every ``--period`` seconds
(``churn-0``, ``churn-1``, ...); the exporter (``--scan.interval=200ms``, only that process
selected) is scraped every second by Prometheus (Debian's binary, own storage, loopback).
After a warm-up it reads Prometheus' ``prometheus_tsdb_head_series`` and the names seen
(distinct ``comm`` values among the series of that pid), waits ``--duration`` seconds and reads
them again. It prints the head series created per name seen: what one rename costs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RENAMER = r"""
import ctypes, mmap, sys, time
libc = ctypes.CDLL(None)
libc.prctl(1, 9, 0, 0, 0)                        # PR_SET_PDEATHSIG: SIGKILL with us
m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, len(m), 4096):
    m[i] = 1
print("ready", flush=True)
n, period = 0, float(sys.argv[1])
while True:
    libc.prctl(15, ctypes.c_char_p(b"churn-%d" % n), 0, 0, 0)   # PR_SET_NAME
    n += 1
    time.sleep(period)
"""


@dataclass
class Result:
    """One measurement: head series and names seen before and after the window."""

    duration_s: float
    period_s: float
    head_series_before: int
    head_series_after: int
    names_before: int
    names_after: int
    pid_series_after: int

    @property
    def series_per_rename(self) -> float:
        """Return the head series created per new name seen (inf when none was seen)."""
        renames = self.names_after - self.names_before
        created = self.head_series_after - self.head_series_before
        return created / renames if renames > 0 else float("inf")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def _wait(what: str, check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"timed out waiting for {what}")


@contextmanager
def _process(cmd: list[str], log: Path, **kw: Any) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=kw.pop("stdout", out), stderr=out, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def head_series(prom: str) -> int:
    """Return ``prometheus_tsdb_head_series`` from Prometheus' own /metrics."""
    for line in _get(f"{prom}/metrics").decode().splitlines():
        if line.startswith("prometheus_tsdb_head_series "):
            return int(float(line.split()[1]))
    raise RuntimeError("prometheus_tsdb_head_series not found")


def pid_series(prom: str, pid: int) -> list[dict[str, str]]:
    """Return the label sets of every series of ``pid`` Prometheus holds."""
    q = urllib.parse.urlencode({"match[]": f'{{pid="{pid}"}}', "start": "0"})
    doc = json.loads(_get(f"{prom}/api/v1/series?{q}"))
    return list(doc["data"])


def names_seen(prom: str, pid: int) -> int:
    """Return how many distinct comm values the series of ``pid`` carry."""
    return len({s["comm"] for s in pid_series(prom, pid) if "comm" in s})


def exporter_command(module: bool) -> list[str]:
    """Return the command that starts the exporter (``python -m`` with ``module``)."""
    script = shutil.which("numa-exporter", path=str(Path(sys.executable).parent))
    return [sys.executable, "-m", "numa_exporter"] if module or not script else [script]


def measure(duration: float, period: float = 0.2, module: bool = False,
            prometheus: str | None = None) -> Result:
    """Run the renaming process, the exporter and Prometheus; return the measurement."""
    prometheus = prometheus or shutil.which("prometheus")
    if prometheus is None:
        raise RuntimeError("prometheus not found (Debian package prometheus)")
    with tempfile.TemporaryDirectory(prefix="rename-churn-") as tmp_s:
        tmp = Path(tmp_s)
        with _process([sys.executable, "-c", RENAMER, str(period)], tmp / "renamer.log",
                      stdout=subprocess.PIPE) as child:
            assert child.stdout is not None
            if child.stdout.readline().strip() != b"ready":
                raise RuntimeError("the renaming process did not start")
            port = _free_port()
            exporter = [*exporter_command(module), f"--web.listen-address=127.0.0.1:{port}",
                        "--process.include=^churn-", "--process.min-resident=0",
                        "--scan.interval=200ms", "--log.level=warn"]
            with _process(exporter, tmp / "exporter.log"):
                _wait("the exporter", lambda: b"numa_exporter_scans_total" in _get(
                    f"http://127.0.0.1:{port}/metrics"))
                config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                          "scrape_configs": [{"job_name": "numa-exporter", "static_configs": [
                              {"targets": [f"127.0.0.1:{port}"]}]}]}
                cfg = tmp / "prometheus.yml"
                cfg.write_text(json.dumps(config))  # JSON is YAML
                pport = _free_port()
                prom = f"http://127.0.0.1:{pport}"
                with _process([prometheus, f"--config.file={cfg}",
                               f"--storage.tsdb.path={tmp / 'data'}",
                               f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
                              tmp / "prometheus.log"):
                    _wait("prometheus", lambda: _get(f"{prom}/-/ready") is not None)
                    _wait("names in Prometheus", lambda: names_seen(prom, child.pid) >= 3)
                    h0, n0 = head_series(prom), names_seen(prom, child.pid)
                    time.sleep(duration)
                    h1, n1 = head_series(prom), names_seen(prom, child.pid)
                    return Result(duration, period, h0, h1, n0, n1,
                                  len(pid_series(prom, child.pid)))


def main(argv: list[str] | None = None) -> int:
    """Measure and print (or write as JSON); return 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--period", type=float, default=0.2, help="seconds between renames")
    ap.add_argument("--module", action="store_true",
                    help="start the exporter with python -m numa_exporter (PYTHONPATH)")
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args(argv)
    r = measure(ns.duration, ns.period, ns.module)
    out = {**asdict(r), "series_per_rename": round(r.series_per_rename, 2)}
    print(f"{r.duration_s:.0f} s, a rename every {r.period_s:g} s: head series "
          f"{r.head_series_before} -> {r.head_series_after} "
          f"(+{r.head_series_after - r.head_series_before}) for "
          f"{r.names_after - r.names_before} new names seen: "
          f"{r.series_per_rename:.2f} series per rename; the pid has "
          f"{r.pid_series_after} series in all")
    if ns.json:
        ns.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
