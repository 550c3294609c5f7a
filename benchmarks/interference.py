#!/usr/bin/env python3
"""Benchmark: what the exporter costs the process it watches.

    .venv/bin/python benchmarks/interference.py [--gib 16] [--rounds 5] [--window 20]
                                                [--out .cache/benchmarks/interference.json]

A target maps ``--gib`` GiB of anonymous 4 KiB pages (every page written), then loops
mmap/write/munmap of a 64 KiB region and records each iteration's latency: mmap and munmap
take its mmap lock for writing, so they stall while anyone walks its page tables. Each round
runs three conditions, in an order shuffled per round, for ``--window`` seconds each:

  alone       nothing reads the target
  daemon      the real exporter with its defaults (15 s interval, sampled placement above
              the cost threshold), selecting the target (the first scan starts at once)
  continuous  a reader that reads the target's numa_maps in full, back to back (what a
              full read on every scan of a short interval, or a numastat loop, does)

and reports p50, p99, p99.9 and the worst latency per condition (median and min-max over
rounds) and the paired per-round ratio of each condition's worst latency to ``alone``'s.
The target runs on the first CPU, the daemon and the reader on the others.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GiB = 1 << 30
CPUS = sorted(os.sched_getaffinity(0))

TARGET = r"""
import array, gc, mmap, os, sys, time
gc.disable()
size = int(sys.argv[1]) << 30
big = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
big.madvise(mmap.MADV_NOHUGEPAGE)
try:
    big.madvise(23)  # MADV_POPULATE_WRITE (Linux 5.14)
except OSError:
    for i in range(0, size, os.sysconf("SC_PAGE_SIZE")):
        big[i] = 1
print("ready", flush=True)
fd = sys.stdin.fileno()
os.set_blocking(fd, False)
lat = array.array("Q")
clock = time.perf_counter_ns
buf = b""
while True:
    for _ in range(64):
        t0 = clock()
        m = mmap.mmap(-1, 65536)
        m[0] = 1
        m.close()
        lat.append(clock() - t0)
    try:
        data = os.read(fd, 4096)
    except BlockingIOError:
        continue
    if not data:
        break
    buf += data
    while b"\n" in buf:
        cmd, _, buf = buf.partition(b"\n")
        s = sorted(lat)
        n = len(s)
        q = lambda p: s[min(n - 1, int(n * p))] if n else 0
        if cmd == b"stop":
            print(n, q(0.5), q(0.99), q(0.999), s[-1] if n else 0, flush=True)
        lat = array.array("Q")
        if cmd == b"start":
            print("started", flush=True)
"""

READER = r"""
import sys, time
pid, end = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    with open(f"/proc/{pid}/numa_maps", "rb", buffering=0) as fh:
        while fh.read(65536):
            pass
"""


class Target:
    """The watched process; ``start``/``stop`` bracket one latency window."""

    def __init__(self, gib: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", TARGET, str(gib)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if len(CPUS) >= 2:
            os.sched_setaffinity(self.proc.pid, {CPUS[0]})
        if self._line(600) != b"ready":
            raise RuntimeError("target did not start")
        self.pid = self.proc.pid

    def _line(self, timeout: float = 60) -> bytes:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("target did not answer")
        return self.proc.stdout.readline().strip()

    def _send(self, cmd: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + b"\n")
        self.proc.stdin.flush()

    def start(self) -> None:
        self._send(b"start")
        if self._line() != b"started":
            raise RuntimeError("no window")

    def stop(self) -> dict[str, float]:
        self._send(b"stop")
        n, p50, p99, p999, worst = (int(x) for x in self._line().split())
        return {"iterations": n, "p50_ms": p50 / 1e6, "p99_ms": p99 / 1e6,
                "p999_ms": p999 / 1e6, "worst_ms": worst / 1e6}

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _others() -> set[int]:
    return set(CPUS[1:]) or set(CPUS)


def window(t: Target, cond: str, seconds: float, port: int) -> dict[str, Any]:
    """Run one condition for ``seconds``; return the target's latencies and what ran."""
    helper: subprocess.Popen[bytes] | None = None
    if cond == "daemon":
        helper = subprocess.Popen(
            [sys.executable, "-m", "numa_exporter", f"--web.listen-address=127.0.0.1:{port}",
             f"--process.include=^{sys.executable}", "--process.min-resident=1GiB",
             "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, _others()))
        time.sleep(0.5)  # imports; its first scan starts once it listens
    elif cond == "continuous":
        helper = subprocess.Popen([sys.executable, "-c", READER, str(t.pid), str(seconds + 5)],
                                  preexec_fn=lambda: os.sched_setaffinity(0, _others()))
    t.start()
    time.sleep(seconds)
    rec = t.stop()
    if helper is not None:
        helper.send_signal(signal.SIGTERM)
        helper.wait(timeout=30)
    return rec


def summary(vals: list[float]) -> dict[str, float]:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=int, default=16, help="target size in GiB (16)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=20.0, help="seconds per condition (20)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=19861)
    ap.add_argument("--out", default=".cache/benchmarks/interference.json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t = Target(args.gib)
    conds = ["alone", "daemon", "continuous"]
    recs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            order = conds[:]
            rng.shuffle(order)
            rec = {c: window(t, c, args.window, args.port) for c in order}
            rec["order"] = order
            recs.append(rec)
            print(f"round {r + 1}: " + ", ".join(
                f"{c} worst {rec[c]['worst_ms']:.2f} ms" for c in conds), flush=True)
    finally:
        t.close()
    out: dict[str, Any] = {"gib": args.gib, "window_s": args.window, "rounds": recs,
                           "summary": {}, "ratios": {}}
    for c in conds:
        out["summary"][c] = {k: summary([rec[c][k] for rec in recs])
                             for k in ("p50_ms", "p99_ms", "p999_ms", "worst_ms")}
    for c in ("daemon", "continuous"):
        out["ratios"][f"{c}_worst_over_alone"] = summary(
            [rec[c]["worst_ms"] / max(rec["alone"]["worst_ms"], 1e-6) for rec in recs])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\n{args.gib} GiB target, {args.rounds} rounds of {args.window:.0f} s per condition "
          "(median [min-max] over rounds)\n")
    print("| condition | p50 ms | p99 ms | p99.9 ms | worst ms | worst / alone |")
    print("|---|---|---|---|---|---|")
    for c in conds:
        s = out["summary"][c]
        ratio = out["ratios"].get(f"{c}_worst_over_alone")
        cells = [f"{s[k]['median']:.3f} [{s[k]['min']:.3f}-{s[k]['max']:.3f}]"
                 for k in ("p50_ms", "p99_ms", "p999_ms", "worst_ms")]
        rs = (f"{ratio['median']:.2f} [{ratio['min']:.2f}-{ratio['max']:.2f}]" if ratio
              else "-")
        print(f"| {c} | " + " | ".join(cells) + f" | {rs} |")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
