"""In-guest runner of the movement scenario (run by test_movement.py inside QEMU).

    /usr/bin/python3 movement_inguest.py PLAN.json

Balancing off, THP only on request. Starts two rkwork workloads: ``still`` (256 MiB
interleaved over every node, never moved) and ``moved`` (128 MiB bound to node 2), and
``recycle`` (issue 33: 64 MiB it frees with ``MADV_DONTNEED`` every few seconds and touches
again from a new thread pinned to the next node's CPUs; nothing migrates it), then the
exporter with every process forced onto the sampled reader (``--placement.hold-budget`` of
1 us, ``--placement.policy-hold-budget`` 0: no full read for policies or of a quiet process)
and a second one reading every process in full (``--placement.sample-above=0``).
After each completed scan of the first it saves its scrape, the second's and, read right
beside them, the workloads' numa_maps (``scan-NN.prom``, ``scan-NN-full.prom``,
``numa_maps-NN-<name>``); after ``scans_before`` scans it moves ``moved`` from node 2 to
node 3 with ``migratepages`` (migrate_pages(2)) and goes on for ``scans_after`` scans.
``summary.json`` says what happened when. Standard library only (the guest's own python3
runs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

WORKLOADS = {
    "still": ["--cpunodebind=0", "--interleave=all"],
    "moved": ["--cpunodebind=0", "--membind=2"],
}
SIZES = {"still": 256, "moved": 128}
DRIFT_MIB = 64
RECYCLE_MIB = 64
RECYCLE_PERIOD_S = 6.0
# named rkwork-recycle (the exporters include ^rkwork); writes pid= to its ready file once
# its memory is touched, then frees and touches it again from the next node, forever
RECYCLER = r"""
import ctypes, mmap, os, sys, threading, time
ready, mib, period, phases = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
ctypes.CDLL(None).prctl(15, b"rkwork-recycle", 0, 0, 0)
size = mib << 20
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_NOHUGEPAGE)

def cpus(node):
    try:
        text = open(f"/sys/devices/system/node/node{node}/cpulist").read().strip()
    except OSError:
        return set()
    out = set()
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out

nodes = [n for n in range(64) if cpus(n)]

def touch(node):
    os.sched_setaffinity(0, cpus(node))  # this thread only: first touch allocates there
    for i in range(0, size, 4096):
        m[i] = 1

start = "%x" % ctypes.addressof(ctypes.c_char.from_buffer(m))

def where():
    # the node holding most of the region now, from the process's own numa_maps: the line
    # of the mapping that holds it (a thread's stack mapped next to it may merge with it)
    lines = [(int(line.split()[0], 16), line) for line in open("/proc/self/numa_maps")]
    line = max((a, t) for a, t in lines if a <= int(start, 16))[1]
    counts = [(int(w[1:].split("=")[1]), int(w[1:].split("=")[0]))
              for w in line.split() if w[0] == "N" and "=" in w]
    return max(counts)[1] if counts else -1

def recycle(k, freed):
    t = threading.Thread(target=touch, args=(nodes[k % len(nodes)],))
    t.start()
    t.join()
    # a phase: freed at (wall) time freed, all on one node from now until the next free
    with open(phases, "a") as fh:
        fh.write(f"{start} {freed:.3f} {time.time():.3f} {where()}\n")

recycle(0, time.time())
with open(ready + ".tmp", "w") as fh:
    fh.write(f"pid={os.getpid()}\n")
os.rename(ready + ".tmp", ready)
k = 1
while True:
    time.sleep(period)
    freed = time.time()
    m.madvise(mmap.MADV_DONTNEED)
    recycle(k, freed)
    k += 1
"""
SPARSE_RESERVE_MIB = 1024
SPARSE_STRIDE = 17  # pages; co-prime with the node count: interleave spreads them
GROW_START_MIB, GROW_STEP_MIB, GROW_MAX_MIB, GROW_PERIOD_S = 64, 2, 448, 2.0  # grows all run
# rkwork-sparse: every SPARSE_STRIDE-th page of a reservation touched once (present pages
# spread thinly over a big mapping); rkwork-grow: a heap touched GROW_STEP_MIB further every
# GROW_PERIOD_S. Run under numactl --interleave=all; write pid= once the first part is in.
SHAPED = r"""
import ctypes, mmap, os, sys, time
ready, shape, a, b, c, d = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:7])
ctypes.CDLL(None).prctl(15, b"rkwork-" + shape.encode(), 0, 0, 0)
size = int(a) << 20
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_NOHUGEPAGE)
def touch(lo, hi, step):
    for i in range(lo, hi, step):
        m[i] = 1
if shape == "sparse":
    touch(0, size, 4096 * int(b))
    upto = size
else:
    upto = int(b) << 20
    touch(0, upto, 4096)
with open(ready + ".tmp", "w") as fh:
    fh.write(f"pid={os.getpid()}\n")
os.rename(ready + ".tmp", ready)
while True:
    time.sleep(d if shape == "grow" else 60)
    if shape == "grow" and upto < size:
        touch(upto, min(upto + (int(c) << 20), size), 4096)
        upto = min(upto + (int(c) << 20), size)
"""


def _write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:
            return str(resp.read().decode("utf-8", "replace"))
    except OSError:
        return None


def _scans(text: str | None) -> int:
    m = re.search(r"^numa_exporter_scans_total(?:\{\})? ([0-9.e+]+)$", text or "", re.M)
    return int(float(m.group(1))) if m else -1


def _next_scan(url: str, after: int, timeout: float) -> tuple[int, str] | None:
    """Return (scans, text) once more than ``after`` scans completed (None at timeout)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = _scrape(url)
        n = _scans(text)
        if n > after and text is not None:
            return n, text
        time.sleep(0.2)
    return None


def _start(name: str, plan: dict[str, Any], out: Path) -> tuple[subprocess.Popen[bytes], int]:
    ready = Path(f"/tmp/rk-move-{name}")
    ready.unlink(missing_ok=True)
    if name == "recycle":
        argv = [sys.executable, "-c", RECYCLER, str(ready), str(RECYCLE_MIB),
                str(RECYCLE_PERIOD_S), str(out / "recycle-phases.txt")]
    elif name == "sparse":
        argv = ["numactl", "--interleave=all", sys.executable, "-c", SHAPED, str(ready),
                name, str(SPARSE_RESERVE_MIB), str(SPARSE_STRIDE), "0", "0"]
    elif name == "grow":
        argv = ["numactl", "--interleave=all", sys.executable, "-c", SHAPED, str(ready),
                name, str(GROW_MAX_MIB), str(GROW_START_MIB), str(GROW_STEP_MIB),
                str(GROW_PERIOD_S)]
    elif name == "drift":
        # first touched on node 1, then moved to node 0's CPUs where it keeps touching its
        # memory: NUMA balancing (when on) migrates it, other processes' migrations
        argv = ["numactl", "--cpunodebind=1", plan["workload"], "-m", "migrate", "-s",
                str(DRIFT_MIB), "-c", "0", "-r", str(ready), "-T", "1200"]
    else:
        argv = ["numactl", *WORKLOADS[name], plan["workload"], "-m", "anon", "-s",
                str(SIZES[name]), "-c", "0", "-r", str(ready), "-T", "1200"]
    with open(out / f"workload-{name}.out", "wb") as fh:
        wl = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + 180
    while not ready.exists() and wl.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    if not ready.exists():
        raise RuntimeError(f"{name} never became ready (rc={wl.poll()})")
    info = dict(line.split("=", 1) for line in ready.read_text().splitlines() if "=" in line)
    return wl, int(info["pid"])


def _record(url: str, scans: int, pids: dict[str, int], out: Path, timeout: float,
            full: str | None = None) -> int:
    got = _next_scan(url, scans, timeout)
    if got is None:
        raise RuntimeError(f"no scan after {scans} within {timeout} s")
    n, text = got
    walls = [time.time()]  # each scrape's (wall) time: its reads were made before it
    _write(out / f"scan-{n:03d}.prom", text)
    if full is not None:
        _write(out / f"scan-{n:03d}-full.prom", _scrape(full) or "")
        walls.append(time.time())
    _write(out / f"scraped-{n:03d}", " ".join(f"{w:.3f}" for w in walls))
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            _write(out / f"numa_maps-{n:03d}-{name}", Path(f"/proc/{pid}/numa_maps").read_text())
    _write(out / f"vmstat-{n:03d}", Path("/proc/vmstat").read_text())
    return n


def run(plan: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run the scenario; return its summary."""
    summary: dict[str, Any] = {"errors": [], "scans": [], "migrated_after": None}
    wls: list[subprocess.Popen[bytes]] = []
    exp: subprocess.Popen[bytes] | None = None
    full: subprocess.Popen[bytes] | None = None
    try:
        pids: dict[str, int] = {}
        for name in (*WORKLOADS, "recycle", "sparse", "grow", "drift"):
            wl, pid = _start(name, plan, out)
            wls.append(wl)
            pids[name] = pid
        summary["pids"] = pids
        port = plan["port"]
        argv = [*plan["exporter"], f"--web.listen-address=127.0.0.1:{port}",
                f"--scan.interval={plan['interval']}", "--process.min-resident=0",
                "--process.detail-above=0", "--process.include=^rkwork",
                "--placement.hold-budget=0.000001",
                # no full read for policies or of a quiet process (issue 34): the sampled
                # reader's movement and convergence are the subject
                "--placement.policy-hold-budget=0",
                "--log.format=json", "--log.level=debug"]
        summary["exporter_argv"] = argv
        with open(out / "exporter.out", "wb") as so, open(out / "exporter.log", "wb") as se:
            exp = subprocess.Popen(argv, stdout=so, stderr=se, start_new_session=True)
        full_argv = [*plan["exporter"], f"--web.listen-address=127.0.0.1:{port + 1}",
                     f"--scan.interval={plan['interval']}", "--process.min-resident=0",
                     "--process.detail-above=0", "--process.include=^rkwork",
                     "--placement.sample-above=0", "--log.format=json"]
        with open(out / "exporter-full.out", "wb") as so, \
                open(out / "exporter-full.log", "wb") as se:
            full = subprocess.Popen(full_argv, stdout=so, stderr=se, start_new_session=True)
        url = f"http://127.0.0.1:{port}/metrics"
        full_url = f"http://127.0.0.1:{port + 1}/metrics"
        first = _next_scan(url, 0, 180)
        if first is None or _next_scan(full_url, 0, 180) is None:
            raise RuntimeError("an exporter never completed a scan")
        scans = first[0]
        t0 = time.monotonic()
        scans = _record(url, scans, pids, out, 120, full_url)
        summary["scans"].append([scans, 0.0])
        # off to node 0, touching its memory: balancing (when on) migrates it from here on
        os.kill(pids["drift"], signal.SIGUSR1)
        for _ in range(plan["scans_before"] - 1):
            scans = _record(url, scans, pids, out, 120, full_url)
            summary["scans"].append([scans, round(time.monotonic() - t0, 2)])
        r = subprocess.run(["migratepages", str(pids["moved"]), "2", "3"], capture_output=True,
                           text=True, timeout=300, check=False)
        summary["migrated_after"] = scans
        summary["migratepages"] = [r.returncode, r.stderr[-500:]]
        summary["migrated_s"] = round(time.monotonic() - t0, 2)
        for _ in range(plan["scans_after"]):
            scans = _record(url, scans, pids, out, 120, full_url)
            summary["scans"].append([scans, round(time.monotonic() - t0, 2)])
        # and on until the run spans ``min_seconds`` (scans on time, as on an idle host, end
        # at about a minute: the convergence checks need scans after it)
        while time.monotonic() - t0 < plan.get("min_seconds", 0):
            scans = _record(url, scans, pids, out, 120, full_url)
            summary["scans"].append([scans, round(time.monotonic() - t0, 2)])
    except Exception as exc:
        summary["errors"].append(f"{type(exc).__name__}: {exc}")
        summary["traceback"] = traceback.format_exc()
    finally:
        for e in (exp, full):
            if e is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(e.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                e.wait(timeout=10)
        for wl in wls:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(wl.pid, signal.SIGKILL)
            wl.wait(timeout=10)
    return summary


def main() -> int:
    """Run the plan in argv[1]; return 0 (errors are in summary.json)."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    Path("/sys/kernel/mm/transparent_hugepage/enabled").write_text("madvise")
    Path("/proc/sys/kernel/numa_balancing").write_text(str(plan.get("balancing", 0)))
    _write(out / "uname.txt", os.uname().release)
    t0 = time.monotonic()
    summary = run(plan, out)
    summary["elapsed_s"] = round(time.monotonic() - t0, 2)
    _write(out / "summary.json", json.dumps(summary, indent=1))
    print(f"== movement: {summary['elapsed_s']} s errors={summary['errors']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
