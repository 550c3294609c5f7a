#!/usr/bin/env python3
"""Benchmark: what the exporter costs the process it watches.

    .venv/bin/python -m benchmarks interference [--gib 16] [--rounds 5] [--window 20]
                                            [--out .cache/benchmarks/interference.json]
                                            [--conditions alone,daemon,continuous]

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
  damon       the exporter as ``daemon`` plus ``--collector.damon`` (vaddr on the target:
              DAMON samples it every 5 ms, taking its mmap lock for reading per region);
              root and a kernel with DAMON only, so the 6.12 QEMU guest
              (``python -m benchmarks damon-guest``), never this host

A ``daemon`` window opens 0.5 s after the exporter starts (its first scan inside the
window). With ``--steady`` (for slow guests, where the exporter's start takes seconds) the
``daemon`` and ``damon`` windows open once the exporter serves the target (and, for
``damon``, once its kdamond monitors: ``numa_exporter_damon_up 1``): each window then holds
the exporter's next scan (15 s interval) and, for ``damon``, DAMON's sampling throughout.

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
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.daemon import daemon_env
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


def _serving(port: int, want: str, limit_s: float = 120.0) -> None:
    """Wait until the exporter's /metrics contains ``want`` (at most ``limit_s``)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                if want in r.read().decode():
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the exporter never served {want!r} within {limit_s:.0f} s")


def window(t: Target, cond: str, seconds: float, port: int, min_resident: str = "1GiB",
           run_dir: str = "", steady: bool = False, damon_flags: tuple[str, ...] = ()
           ) -> dict[str, float]:
    """Run one condition for ``seconds``; return the target's latencies and what ran."""
    helper: subprocess.Popen[bytes] | None = None
    if cond in ("daemon", "damon"):
        extra = (["--collector.damon", f"--collector.damon.run-dir={run_dir}", *damon_flags]
                 if cond == "damon" else [])
        helper = subprocess.Popen(
            [sys.executable, "-m", "numa_exporter", f"--web.listen-address=127.0.0.1:{port}",
             f"--process.include=^{COMM}$", f"--process.min-resident={min_resident}",
             "--log.level=warn", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=daemon_env(None),
            preexec_fn=lambda: os.sched_setaffinity(0, _others()))
        if steady:
            _serving(port, f'pid="{t.pid}"')
            if cond == "damon":
                _serving(port, "numa_exporter_damon_up 1.0")
        else:
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
    ap.add_argument("--mib", type=int, default=0, help="target size in MiB (overrides --gib)")
    ap.add_argument("--conditions", default="alone,daemon,continuous",
                    help="comma-separated, of alone, daemon, continuous, damon")
    ap.add_argument("--run-dir", default="/tmp/numa-bench-damon",
                    help="--collector.damon.run-dir of the damon condition")
    ap.add_argument("--damon-flag", action="append", default=[], dest="damon_flags",
                    help="extra exporter flag for the damon condition (repeatable)")
    ap.add_argument("--steady", action="store_true",
                    help="open exporter windows once it serves the target (see above)")
    args = ap.parse_args(argv)
    mib = args.mib or args.gib << 10
    t = start_target("4k", mib, latency=True, cpu=CPUS[0] if len(CPUS) >= 2 else None)
    conds = [c for c in args.conditions.split(",") if c]
    if "alone" not in conds or not set(conds) <= {"alone", "daemon", "continuous", "damon"}:
        ap.error("--conditions: alone and any of daemon, continuous, damon")
    floor = f"{max(mib // 2, 1)}MiB"  # selects the target, nothing else
    try:
        res = timed_rounds({c: functools.partial(window, t, c, args.window, args.port, floor,
                                                 args.run_dir, args.steady,
                                                 tuple(args.damon_flags))
                            for c in conds}, args.rounds, args.seed, warm=False)
    finally:
        t.close()
    recs: list[dict[str, Any]] = [
        {**{c: res.values[c][r] for c in conds}, "order": res.orders[r]}
        for r in range(args.rounds)]
    out: dict[str, Any] = {"mib": mib, "window_s": args.window, "rounds": recs,
                           "summary": {}, "ratios": {}}
    for c in conds:
        out["summary"][c] = {k: spread([x[k] for x in res.values[c]]) for k in LATENCY_KEYS}
    worst = {c: [x["worst_ms"] for x in res.values[c]] for c in conds}
    pairs = [(c, "alone") for c in conds if c != "alone"]
    for c, ratios in paired_ratios(worst, pairs).items():
        out["ratios"][f"{c.split('/')[0]}_worst_over_alone"] = spread(ratios)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\n{mib} MiB target, {args.rounds} rounds of {args.window:.0f} s per condition "
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
