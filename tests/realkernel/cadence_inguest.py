"""In-guest runner for the cadence check at default flags (run by test_cadence_guest.py).

    <venv python> cadence_inguest.py PLAN.json

Starts the plan's workloads (rkwork under numactl, each bound to a node), then the exporter
with its default flags but for the interval and the process filter, and scrapes it after
every scan for a while; halfway it moves one workload's pages with ``migratepages`` and notes
when that finished. Everything goes to ``<out>/cadence.json``: per scrape, the wall time,
the scans counter and, per workload pid, its last scan timestamp and bytes per node; the
exporter's log is kept beside it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

_SAMPLE = re.compile(r'^(numa_[a-z_]+)\{([^}]*)\} ([0-9.e+-]+)$', re.M)
_LABEL = re.compile(r'([a-z_]+)="([^"]*)"')


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return str(resp.read().decode("utf-8", "replace"))
    except OSError:
        return None


def _record(text: str, pids: list[int]) -> dict[str, Any]:
    """Return the scans counter and, per pid, last scan time, method and bytes per node."""
    scans = re.search(r"^numa_exporter_scans_total(?:\{\})? ([0-9.e+]+)$", text, re.M)
    out: dict[str, Any] = {"scans": int(float(scans.group(1))) if scans else -1,
                           "pids": {str(p): {"nodes": {}} for p in pids}}
    for name, labels, value in _SAMPLE.findall(text):
        lab = dict(_LABEL.findall(labels))
        rec = out["pids"].get(lab.get("pid", ""))
        if rec is None:
            continue
        if name == "numa_process_memory_bytes":
            node = lab["node"]
            rec["nodes"][node] = rec["nodes"].get(node, 0) + int(float(value))
        elif name == "numa_process_last_scan_timestamp_seconds":
            rec["last_scan"] = float(value)
        elif name == "numa_process_placement_info":
            rec["method"] = lab.get("method")
    return out


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"errors": [], "scrapes": []}
    procs: list[subprocess.Popen[bytes]] = []
    exporter: subprocess.Popen[bytes] | None = None
    try:
        pids: list[int] = []
        for i, w in enumerate(plan["workloads"]):
            ready = Path(f"/tmp/rk-cadence-{i}")
            ready.unlink(missing_ok=True)
            argv = ["numactl", "--cpunodebind=0", f"--membind={w['node']}", plan["workload"],
                    "-m", "anon", "-s", str(w["size_mib"]), "-c", "0", "-r", str(ready),
                    "-T", "900"]
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
            deadline = time.monotonic() + 180
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            info = dict(line.split("=", 1) for line in ready.read_text().splitlines()
                        if "=" in line)
            pids.append(int(info["pid"]))
        result["pids"] = pids
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, "-m", "numa_exporter", f"--web.listen-address=127.0.0.1:{port}",
                f"--scan.interval={plan['interval']}", "--process.include=^rkwork",
                # default flags for reading; the per-node breakdown of these 100-200 MiB
                # workloads is served too (exposition only: which process is read when,
                # the subject here, does not depend on it)
                "--process.detail-above=0",
                "--log.format=json"]
        result["exporter_argv"] = argv
        with open(out / "exporter.log", "wb") as log:
            exporter = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        url = f"http://127.0.0.1:{port}/metrics"
        last = -1
        start = time.monotonic()
        moved = False
        while time.monotonic() - start < plan["run_s"]:
            text = _scrape(url)
            if text is not None:
                rec = _record(text, pids)
                if rec["scans"] != last:
                    last = rec["scans"]
                    rec["wall"] = time.time()
                    result["scrapes"].append(rec)
            if not moved and time.monotonic() - start >= plan["move_after_s"] and last >= 3:
                m = plan["move"]
                pid = pids[m["workload"]]
                result["move_started"] = time.time()
                subprocess.run(["migratepages", str(pid), str(m["from"]), str(m["to"])],
                               check=True, timeout=300)
                result["move_done"] = time.time()
                moved = True
            time.sleep(0.2)
    except Exception as exc:
        result["errors"].append(repr(exc))
        result["traceback"] = traceback.format_exc()
    finally:
        if exporter is not None and exporter.poll() is None:
            os.killpg(exporter.pid, signal.SIGTERM)
            exporter.wait(timeout=10)
        for p in procs:
            p.kill()
            p.wait()
        (out / "cadence.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
