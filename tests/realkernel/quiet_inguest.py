"""In-guest runner of the quiet-process scenario (run by test_quiet_guest.py inside QEMU).

    /usr/bin/python3 quiet_inguest.py PLAN.json

Balancing off, THP only on request (none here: 4 KiB pages). Starts sleeping processes
named ``rkquiet-*``, each with its memory on node 0, and the exporter at its defaults but
for a hold budget of 1 us (so that these small processes are ones the planner would sample:
quiet, each is read in full once and then kept). Once every process has been kept for a few
scans, it changes them one at a time WHILE THEY SLEEP, each from outside:

* ``mig``: ``migratepages PID 0 1`` (migrate_pages(2));
* ``grow``: 32 MiB written with ``process_vm_writev`` into pages of its that were never
  present (from a writer bound to node 1: the new pages are the writer's faults, the
  resident size the target's);
* ``cg``: moved from a cgroup v2 cpuset with ``cpuset.mems`` 0 to one with 1 (cgroup v2
  migrates a task's pages on such a move: ``cpuset_attach`` -> ``cpuset_migrate_mm``);
* ``cowkid`` last: 8 MiB written with ``process_vm_writev`` into pages it shares
  copy-on-write with its parent after ``fork`` (the copies are the writer's faults and its
  resident size stays the same: the known gap of docs/movement.md); the host's vmstat is
  saved around the write, and the scans are followed until the served bytes show the copies
  on node 1 (the 5-minute verification) or ``cow_wait_s`` passes.

For each change: the scan count before it, then the first scrape of a scan that began after
it (the scan counter moved by two), with the target's numa_maps read right beside it.
``summary.json`` says what happened when. Standard library only.
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

MiB = 1 << 20
CG = Path("/sys/fs/cgroup")
# a sleeper: named by argv[2], touches argv[3] MiB of a mapping of argv[4] MiB (all of it
# when equal), optionally joins cgroup argv[5] first, writes pid= and addr= to argv[1], sleeps;
# with argv[6] "fork" it forks after touching and the child (named argv[2]) is the one told
SLEEPER = r"""
import ctypes, mmap, os, sys, time
ready, name, touch, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
group = sys.argv[5] if len(sys.argv) > 5 else ""
fork = len(sys.argv) > 6 and sys.argv[6] == "fork"
if group:
    with open(f"/sys/fs/cgroup/{group}/cgroup.procs", "w") as fh:
        fh.write(str(os.getpid()))
m = mmap.mmap(-1, size << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_NOHUGEPAGE)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
for i in range(0, touch << 20, 4096):
    m[i] = 1
if fork:
    ctypes.CDLL(None).prctl(15, (name[:-3] + "par").encode(), 0, 0, 0)
    if os.fork():
        time.sleep(3600)
        sys.exit(0)
ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
with open(ready + ".tmp", "w") as fh:
    fh.write(f"pid={os.getpid()}\naddr={addr}\n")
os.rename(ready + ".tmp", ready)
time.sleep(3600)
"""
WRITER = r"""
import ctypes, sys
pid, addr, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]
libc = ctypes.CDLL(None, use_errno=True)
src = ctypes.create_string_buffer(b"\x5a" * size, size)
local = IoVec(ctypes.cast(src, ctypes.c_void_p), size)
remote = IoVec(addr, size)
n = libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
sys.exit(0 if n == size else 1)
"""
# name: (touched MiB, mapping MiB, cgroup, fork)
PROCS = {"mig": (64, 64, "", False), "grow": (16, 64, "", False),
         "cg": (64, 64, "rkq0", False), "cowkid": (32, 32, "", True)}
_SERIES = re.compile(r'^numa_process_memory_bytes\{([^}]*)\} ([0-9.e+]+)$', re.M)


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


def _wait_scans(url: str, n: int, timeout: float) -> str:
    """Return a scrape once at least ``n`` scans completed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = _scrape(url)
        if _scans(text) >= n and text is not None:
            return text
        time.sleep(0.2)
    raise RuntimeError(f"no {n} scans within {timeout} s")


def served(text: str, pid: int) -> dict[str, int]:
    """Return the exported bytes per node of ``pid`` (summed over kinds)."""
    out: dict[str, int] = {}
    for labels, v in _SERIES.findall(text):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if lab.get("pid") == str(pid):
            out[lab["node"]] = out.get(lab["node"], 0) + int(float(v))
    return {n: b for n, b in out.items() if b}


def kernel(pid: int) -> dict[str, int]:
    """Return the process's bytes per node from its numa_maps."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        page = re.search(r"\bkernelpagesize_kB=(\d+)", line)
        size = int(page[1]) * 1024 if page else 4096
        for node, pages in re.findall(r"\bN(\d+)=(\d+)", line):
            out[node] = out.get(node, 0) + int(pages) * size
    return {n: b for n, b in out.items() if b}


def _value(text: str, name: str, **labels: str) -> float | None:
    for m in re.finditer(rf"^{name}(?:\{{([^}}]*)\}})? ([0-9.e+]+)$", text, re.M):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(lab.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    return None


def _vmstat() -> dict[str, int]:
    out = {}
    for line in Path("/proc/vmstat").read_text().splitlines():
        k, _, v = line.partition(" ")
        out[k] = int(v)
    return out


def _cpus(node: int) -> str:
    return Path(f"/sys/devices/system/node/node{node}/cpulist").read_text().strip()


def _point(url: str, pids: dict[str, int], after: int, timeout: float) -> dict[str, Any]:
    """Return the first scrape of a scan that completed after ``after`` scans, with every
    process's served and kernel bytes per node, its method and reason."""
    text = _wait_scans(url, after + 1, timeout)
    point: dict[str, Any] = {"scans": _scans(text), "mono": time.monotonic(),
                             "skipped": _value(text, "numa_exporter_placement_reads_skipped_total",
                                               reason="unchanged"),
                             "verified": _value(
                                 text, "numa_exporter_change_evidence_verifications_total"),
                             "procs": {}}
    for name, pid in pids.items():
        method = re.search(rf'^numa_process_placement_info\{{[^}}]*method="(\w+)"[^}}]*'
                           rf'pid="{pid}"', text, re.M) or re.search(
            rf'^numa_process_placement_info\{{[^}}]*pid="{pid}"[^}}]*method="(\w+)"', text,
            re.M)
        reason = re.search(rf'^numa_process_placement_reason_info\{{pid="{pid}",'
                           rf'reason="(\w+)"', text, re.M)
        point["procs"][name] = {"served": served(text, pid), "kernel": kernel(pid),
                                "method": method.group(1) if method else None,
                                "reason": reason.group(1) if reason else None}
    return point


def run(plan: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run the scenario; return its summary."""
    summary: dict[str, Any] = {"errors": [], "changes": {}}
    started: list[subprocess.Popen[bytes]] = []
    try:
        (CG / "cgroup.subtree_control").write_text("+cpuset")
        for group, node in (("rkq0", 0), ("rkq1", 1)):
            (CG / group).mkdir(exist_ok=True)
            (CG / group / "cpuset.cpus").write_text(_cpus(node))
            (CG / group / "cpuset.mems").write_text(str(node))
        pids: dict[str, int] = {}
        addrs: dict[str, int] = {}
        for name, (touch, size, group, fork) in PROCS.items():
            ready = Path(f"/tmp/rkquiet-{name}")
            ready.unlink(missing_ok=True)
            argv = ["numactl", "--cpunodebind=0", sys.executable, "-c", SLEEPER, str(ready),
                    f"rkquiet-{name}", str(touch), str(size), group, "fork" if fork else ""]
            started.append(subprocess.Popen(argv, start_new_session=True))
            end = time.monotonic() + 180
            while not ready.exists() and time.monotonic() < end:
                time.sleep(0.2)
            info = dict(line.split("=", 1) for line in ready.read_text().splitlines())
            pids[name], addrs[name] = int(info["pid"]), int(info["addr"])
        summary["pids"] = pids
        port = plan["port"]
        argv = [*plan["exporter"], f"--web.listen-address=127.0.0.1:{port}",
                f"--scan.interval={plan['interval']}", "--process.min-resident=0",
                "--process.detail-above=0", "--process.include=^rkquiet",
                "--placement.hold-budget=0.000001", "--log.format=json"]
        summary["exporter_argv"] = argv
        with open(out / "exporter.log", "wb") as log:
            started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True))
        url = f"http://127.0.0.1:{port}/metrics"
        summary["kept"] = _point(url, pids, plan["scans_before"] - 1, 300)
        for name in ("mig", "grow", "cg", "cowkid"):
            before = _point(url, pids, summary["kept"]["scans"] if name == "mig"
                            else _scans(_scrape(url)), 120)
            change: dict[str, Any] = {"before": before}
            if name == "cowkid":
                change["vmstat_before"] = _vmstat()
            t0 = time.monotonic()
            pid = pids[name]
            if name == "mig":
                r = subprocess.run(["migratepages", str(pid), "0", "1"], capture_output=True,
                                   text=True, timeout=300, check=False)
                change["rc"] = [r.returncode, r.stderr[-300:]]
            elif name == "cg":
                (CG / "rkq1" / "cgroup.procs").write_text(str(pid))
                change["rc"] = [0, ""]
            else:
                at = addrs[name] + (16 * MiB if name == "grow" else 0)
                size = 32 * MiB if name == "grow" else 8 * MiB
                r = subprocess.run(["numactl", "--cpunodebind=1", "--membind=1",
                                    sys.executable, "-c", WRITER, str(pid), str(at),
                                    str(size)], capture_output=True, text=True, timeout=300,
                                   check=False)
                change["rc"] = [r.returncode, r.stderr[-300:]]
            change["done_mono"] = time.monotonic()
            change["took_s"] = round(change["done_mono"] - t0, 2)
            if name == "cowkid":
                change["vmstat_after"] = _vmstat()
            start = _scans(_scrape(url))  # the scan running now may have begun before
            change["next"] = _point(url, pids, start + 1, 120)
            if name == "cowkid":
                change["follow"] = []
                end = time.monotonic() + plan["cow_wait_s"]
                last = change["next"]
                while time.monotonic() < end:
                    got = last["procs"][name]
                    was = before["procs"][name]["served"].get("1", 0)
                    if got["served"].get("1", 0) - was >= 8 * MiB * 9 // 10:
                        break
                    last = _point(url, pids, last["scans"], 120)
                    change["follow"].append({k: last[k] for k in ("scans", "mono", "verified")}
                                            | {"served": last["procs"][name]["served"]})
                change["shown_mono"] = last["mono"]
                change["shown_after_s"] = round(last["mono"] - change["done_mono"], 1)
            summary["changes"][name] = change
    except Exception as exc:
        summary["errors"].append(f"{type(exc).__name__}: {exc}")
        summary["traceback"] = traceback.format_exc()
    finally:
        for p in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM if p is started[-1] else signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
    return summary


def main() -> int:
    """Run the plan in argv[1]; return 0 (errors are in summary.json)."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    Path("/sys/kernel/mm/transparent_hugepage/enabled").write_text("madvise")
    Path("/proc/sys/kernel/numa_balancing").write_text("0")
    _write(out / "uname.txt", os.uname().release)
    t0 = time.monotonic()
    summary = run(plan, out)
    summary["elapsed_s"] = round(time.monotonic() - t0, 2)
    _write(out / "summary.json", json.dumps(summary, indent=1))
    print(f"== quiet: {summary['elapsed_s']} s errors={summary['errors']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
