"""Daemon CPU per scan with the tiers collector off and on (issue 17's cost check).

    .venv/bin/python -m benchmarks.tiers_cost [--processes 50] [--scans 15] [--rounds 3]

Black box: the daemon's own utime + stime from /proc/<pid>/stat over ``--scans`` scans after
two warm-up scans (``benchmarks/daemon.py``), for the same fleet of processes, alternating
``--no-collector.tiers`` and the default (on) round by round so that a busy moment of the
machine falls on both. On a host without faults or tiers (one node, balancing off) this is
the cost the issue asks about: the sched fault block parsed in the read that already happens,
the per-process views, the node vmstat and demotion reads. Prints one line per round and the
medians; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.daemon import run_daemon_case

VARIANTS = {"off": ("--no-collector.tiers",), "on": ()}


def main() -> None:
    """Run the rounds and print CPU seconds per scan for each variant."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--scans", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    got: dict[str, list[float]] = {k: [] for k in VARIANTS}
    series: dict[str, int] = {}
    for r in range(args.rounds):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            res = run_daemon_case(args.processes, 70, args.interval, args.scans, 1,
                                  VARIANTS[name])
            cpu = float(str(res["cpu_seconds_per_scan"]))
            got[name].append(cpu)
            series[name] = int(str(res["series"]))
            scan_ms = float(str(res["scan_seconds_median"])) * 1000
            print(f"round {r} tiers={name}: {cpu * 1000:.1f} ms CPU per scan, "
                  f"scanned {res['scanned']}, scan {scan_ms:.1f} ms median, "
                  f"{res['series']} series", flush=True)
    for name, values in got.items():
        print(f"tiers={name}: median {statistics.median(values) * 1000:.1f} ms CPU per scan "
              f"[{min(values) * 1000:.1f}-{max(values) * 1000:.1f}] over {len(values)} rounds, "
              f"{series[name]} series")


if __name__ == "__main__":
    main()
