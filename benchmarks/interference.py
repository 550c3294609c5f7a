#!/usr/bin/env python3
"""Benchmark: what the exporter costs the process it watches.

    .venv/bin/python -m benchmarks interference [--gib 16] [--rounds 5] [--window 20]
                                            [--out .cache/benchmarks/interference.json]

The latency target of benchmarks/targets.py maps ``--gib`` GiB of anonymous 4 KiB pages
(every page written), then loops mmap/write/munmap of a 64 KiB region and records each
iteration's latency: mmap and munmap take its mmap lock for writing, so they stall while
anyone walks its page tables. Each round (benchmarks/rounds.py)
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
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.rounds import paired_ratios, spread, timed_rounds
from benchmarks.targets import COMM, LATENCY_KEYS, Target, start_target

CPUS = sorted(os.sched_getaffinity(0))

READER = r"""
import sys, time
pid, end = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    with open(f"/proc/{pid}/numa_maps", "rb", buffering=0) as fh:
        while fh.read(65536):
            pass
"""


def _others() -> set[int]:
    return set(CPUS[1:]) or set(CPUS)


def window(t: Target, cond: str, seconds: float, port: int) -> dict[str, float]:
    """Run one condition for ``seconds``; return the target's latencies and what ran."""
    helper: subprocess.Popen[bytes] | None = None
    if cond == "daemon":
        helper = subprocess.Popen(
            [sys.executable, "-m", "numa_exporter", f"--web.listen-address=127.0.0.1:{port}",
             f"--process.include=^{COMM}$", "--process.min-resident=1GiB",
             "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, _others()))
        time.sleep(0.5)  # imports; its first scan starts once it listens
    elif cond == "continuous":
        helper = subprocess.Popen([sys.executable, "-c", READER, str(t.pid), str(seconds + 5)],
                                  preexec_fn=lambda: os.sched_setaffinity(0, _others()))
    t.start_window()
    time.sleep(seconds)
    rec = t.stop_window()
    if helper is not None:
        helper.send_signal(signal.SIGTERM)
        helper.wait(timeout=30)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks interference",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=int, default=16, help="target size in GiB (16)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=20.0, help="seconds per condition (20)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=19861)
    ap.add_argument("--out", default=".cache/benchmarks/interference.json")
    args = ap.parse_args(argv)
    t = start_target("4k", args.gib << 10, latency=True, cpu=CPUS[0] if len(CPUS) >= 2 else None)
    conds = ["alone", "daemon", "continuous"]
    try:
        res = timed_rounds({c: functools.partial(window, t, c, args.window, args.port)
                            for c in conds}, args.rounds, args.seed, warm=False)
    finally:
        t.close()
    recs: list[dict[str, Any]] = [
        {**{c: res.values[c][r] for c in conds}, "order": res.orders[r]}
        for r in range(args.rounds)]
    out: dict[str, Any] = {"gib": args.gib, "window_s": args.window, "rounds": recs,
                           "summary": {}, "ratios": {}}
    for c in conds:
        out["summary"][c] = {k: spread([x[k] for x in res.values[c]]) for k in LATENCY_KEYS}
    worst = {c: [x["worst_ms"] for x in res.values[c]] for c in conds}
    for c, ratios in paired_ratios(worst, [("daemon", "alone"), ("continuous", "alone")]).items():
        out["ratios"][f"{c.split('/')[0]}_worst_over_alone"] = spread(ratios)
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
