"""``python -m benchmarks paired-fleet --base-src DIR``: the daemon fleet (``run_fleet_case``:
N processes of ~70 MiB) watched by this tree's daemon and by the daemon of another source
tree (DIR: another checkout's ``src/`` with its extensions built in place, as
``NUMA_BENCH_DAEMON_SRC`` takes it), in interleaved rounds of shuffled order, with the same
extra flags (default: ``--placement.hold-budget=0.000001``, every process sampled). Prints
CPU seconds per scan of each (psutil, black box) and per process read (the scan budget
leaves some processes for the next scan, more on a loaded machine), median [min-max], and
the medians of the paired per-round ratios this / base, with min-max."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from benchmarks.daemon import DAEMON_SRC_ENV, run_fleet_case
from benchmarks.rounds import fmt_spread, spread


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks paired-fleet",
                                 description=__doc__)
    ap.add_argument("--base-src", required=True, type=Path)
    ap.add_argument("--this-src", type=Path, default=None,
                    help="run 'this' from that tree too (default: the installed package)")
    ap.add_argument("--processes", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scans", type=int, default=8)
    ap.add_argument("--flag", action="append", default=None, metavar="FLAG",
                    help="extra daemon flag (repeatable; default: "
                         "--placement.hold-budget=0.000001)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/paired_fleet.json"))
    ns = ap.parse_args(argv)
    flags = ns.flag if ns.flag is not None else ["--placement.hold-budget=0.000001"]
    rng = random.Random(ns.seed)
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
    old = os.environ.pop(DAEMON_SRC_ENV, None)
    try:
        for r in range(ns.rounds):
            order = ["this", "base"]
            rng.shuffle(order)
            for who in order:
                src = ns.base_src if who == "base" else ns.this_src
                if src is not None:
                    os.environ[DAEMON_SRC_ENV] = str(src)
                else:
                    os.environ.pop(DAEMON_SRC_ENV, None)
                got = run_fleet_case(ns.processes, 70, interval=2.0, scans=ns.scans,
                                     scrapes=10, flags=flags)
                runs[who].append(got)
                print(f"round {r + 1} {who}: {got['cpu_seconds_per_scan'] * 1e3:.1f} ms/scan, "
                      f"{got['sampled']} sampled, {got['scanned']} read a scan",
                      file=sys.stderr, flush=True)
    finally:
        os.environ.pop(DAEMON_SRC_ENV, None)
        if old is not None:
            os.environ[DAEMON_SRC_ENV] = old
    cpu = {k: [float(x["cpu_seconds_per_scan"]) for x in v] for k, v in runs.items()}
    per = {k: [float(x["cpu_seconds_per_scan"]) / max(float(x["scanned"]), 1.0) for x in v]
           for k, v in runs.items()}
    ratios = [a / b for a, b in zip(cpu["this"], cpu["base"], strict=True) if b]
    per_ratios = [a / b for a, b in zip(per["this"], per["base"], strict=True) if b]
    print(f"{ns.processes} processes, flags {flags}, {ns.rounds} rounds")
    for k in ("base", "this"):
        print(f"  {k}: CPU ms per scan {fmt_spread(spread(cpu[k]), 1e3, 1)}, per process "
              f"read {fmt_spread(spread(per[k]), 1e3, 2)}; read a scan "
              f"{[x['scanned'] for x in runs[k]]}, sampled {[x['sampled'] for x in runs[k]]}")
    print(f"  this / base (paired per round): per scan {fmt_spread(spread(ratios), 1.0, 3)}, "
          f"per process read {fmt_spread(spread(per_ratios), 1.0, 3)}")
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps({"flags": flags, "runs": runs, "ratios": ratios,
                                   "per_read_ratios": per_ratios}, indent=1))
    return 0
