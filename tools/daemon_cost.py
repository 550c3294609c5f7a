"""Black-box CPU of the daemon per scan against ``numastat -p``, on the shapes of issue 14.

    python tools/daemon_cost.py SHAPE [SCANS] [EXTRA DAEMON FLAGS...]

SHAPE is ``threads`` (1 GiB of 4 KiB pages + 500 sleeping threads), ``maps60k`` (60,000
one-page mappings), ``4g`` (4 GiB of 4 KiB pages), ``thp`` (4 GiB with MADV_HUGEPAGE:
transparent huge pages where the kernel has them), ``sparse`` (1 GiB resident at the start of
a 16 TiB MAP_NORESERVE reservation) or ``none`` (nothing selected). A target process of that
shape is started, then the daemon with ``--process.min-resident=0 --scan.interval=1s
--process.include=<the target>`` (otherwise defaults, or EXTRA); after 3 scans, the daemon's
CPU time (its process CPU clock, CPUCLOCK_SCHED in ns: psutil's ``cpu_times`` counts 10 ms
clock ticks, too coarse for a few ms a scan) is read over SCANS scans (default 10) and
divided by the scans its log shows; ``numastat -p`` is run 5 times on the target and its
CPU taken from RUSAGE_CHILDREN. Prints one JSON line (and the target's read-cost series).
Needs numastat.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

TARGETS = {
    "threads": ("import mmap,threading,time\n"
                "m=mmap.mmap(-1,1<<30,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS)\n"
                "m.madvise(mmap.MADV_NOHUGEPAGE)\n"
                "for i in range(0,len(m),4096): m[i]=1\n"
                "ev=threading.Event()\n"
                "ts=[threading.Thread(target=ev.wait,daemon=True) for _ in range(500)]\n"
                "[t.start() for t in ts]\n"
                "print('ready',flush=True); time.sleep(3600)\n"),
    "maps60k": ("import mmap,time\n"
                "ms=[]\n"
                "for i in range(60000):\n"
                "  w=mmap.PROT_WRITE if i%2 else 0\n"
                "  m=mmap.mmap(-1,4096,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS,"
                "prot=mmap.PROT_READ|w)\n"
                "  ms.append(m)\n"
                "  if i%2: m[0]=1\n"
                "print('ready',flush=True); time.sleep(3600)\n"),
    "4g": ("import mmap,time\n"
           "m=mmap.mmap(-1,4<<30,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS)\n"
           "m.madvise(mmap.MADV_NOHUGEPAGE)\n"
           "for i in range(0,len(m),4096): m[i]=1\n"
           "print('ready',flush=True); time.sleep(3600)\n"),
    "thp": ("import mmap,time\n"
            "m=mmap.mmap(-1,4<<30,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS)\n"
            "m.madvise(mmap.MADV_HUGEPAGE)\n"
            "for i in range(0,len(m),4096): m[i]=1\n"
            "print('ready',flush=True); time.sleep(3600)\n"),
    "sparse": ("import mmap,time\n"
               "m=mmap.mmap(-1,16<<40,flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS|0x4000)\n"
               "m.madvise(mmap.MADV_NOHUGEPAGE,0,1<<30)\n"
               "for i in range(0,1<<30,4096): m[i]=1\n"
               "print('ready',flush=True); time.sleep(3600)\n"),
    "none": "import time\nprint('ready',flush=True); time.sleep(3600)\n",
}
MARK = "daemon-cost-target"


def _scans(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg", rec.get("event")) == "scan":
            out.append(rec)
    return out


def _wait(log: Path, n: int, daemon: subprocess.Popen[bytes], timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while len(_scans(log)) < n:
        if daemon.poll() is not None:
            raise SystemExit(log.read_text()[-3000:])
        if time.monotonic() > end:
            raise SystemExit(f"no {n} scans in {timeout} s")
        time.sleep(0.05)


def main(shape: str, scans: int = 10, extra: tuple[str, ...] = ()) -> None:
    """Print the daemon's CPU per scan and numastat's for one target shape."""
    tgt = subprocess.Popen([sys.executable, "-c", TARGETS[shape], MARK], stdout=subprocess.PIPE)
    assert tgt.stdout is not None and tgt.stdout.readline() == b"ready\n"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(tempfile.mkdtemp()) / "daemon.log"
    include = "^nothing-matches$" if shape == "none" else f"{MARK}$"
    cmd = [sys.executable, "-m", "numa_exporter", f"--web.listen-address=127.0.0.1:{port}",
           "--process.min-resident=0", "--scan.interval=1s", f"--process.include={include}",
           "--log.format=json", *extra]
    with open(log, "wb") as fh:
        daemon = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    try:
        _wait(log, 3, daemon)
        clock = ((~daemon.pid) << 3) | 2  # the process's CPUCLOCK_SCHED, all threads
        c0, n0 = time.clock_gettime_ns(clock), len(_scans(log))
        _wait(log, n0 + scans, daemon)
        c1, n1 = time.clock_gettime_ns(clock), len(_scans(log))
        cpu = (c1 - c0) / 1e9 / (n1 - n0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if f'pid="{tgt.pid}"' in line and line.startswith(
                    ("numa_process_placement", "numa_process_read_cpu")):
                print(line)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(5):
            subprocess.run(["numastat", "-p", str(tgt.pid)], stdout=subprocess.DEVNULL,
                           check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        ns = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / 5
        last = _scans(log)[n1 - 1]
        huge = 0  # AnonHugePages of the target (read after the window: smaps walks it all)
        for line in Path(f"/proc/{tgt.pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                huge = int(line.split()[1]) << 10
        print(json.dumps({
            "shape": shape, "extra": list(extra),
            "daemon_cpu_ms_per_scan": round(cpu * 1e3, 2),
            "numastat_cpu_ms": round(ns * 1e3, 2),
            "ratio": round(cpu / ns, 2) if ns else None,
            "target_anon_huge_bytes": huge,
            "last_scan": {k: v for k, v in last.items() if k == "seconds" or k.startswith(
                ("cpu_", "processes", "kept", "pending"))},
        }))
    finally:
        daemon.terminate()
        daemon.wait()
        tgt.kill()
        tgt.wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10, tuple(sys.argv[3:]))
