"""Daemon CPU per scan with the tiers collector off and on (issue 17's cost check).

    .venv/bin/python -m benchmarks.tiers_cost [--processes 50] [--scans 10] [--rounds 5]

Black box, with ``benchmarks/daemon.py``'s ``Daemon`` and ``cpu_per_scan``: two daemons watch
the same fleet of processes (``start_fleet``: ~70 MiB each, no hinting faults, no tiers on a
one-node host with balancing off), one with ``--no-collector.tiers`` and one with every
collector on; they run in turns (the other paused with SIGSTOP), in an order that alternates
round by round, and each turn measures psutil's CPU time of the daemon over ``--scans`` scans
divided by the change of ``numa_exporter_scans_total``. With the collector off nothing of
issue 17 runs in a scan (the sched fault block is not parsed, no per-process view, no node
vmstat or demotion read); on, all of it does. Prints each turn and the medians; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.daemon import Daemon, cpu_per_scan
from benchmarks.targets import start_fleet

VARIANTS = {"off": ("--no-collector.tiers",), "on": ()}


def main() -> None:
    """Run the turns and print CPU milliseconds per scan for each variant."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--scans", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    fleet = start_fleet(args.processes, 70)
    workdir = Path(tempfile.mkdtemp(prefix="numa-bench-tiers-"))
    daemons: dict[str, Daemon] = {}
    try:
        for name, extra in VARIANTS.items():
            d = Daemon(("--process.min-resident=64MiB", "--process.include=^numa-bench-d$",
                        f"--scan.interval={args.interval}s", *extra), workdir, name)
            d.wait_scans(2, 120)  # the first scan reads every thread in full
            d.pause()
            daemons[name] = d
        got: dict[str, list[float]] = {k: [] for k in VARIANTS}
        for r in range(args.rounds):
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                res = cpu_per_scan(daemons[name], args.scans, args.interval)
                ms = float(res["cpu_seconds_per_scan"]) * 1000
                got[name].append(ms)
                print(f"round {r} tiers={name}: {ms:.1f} ms CPU per scan over "
                      f"{res['scans']:.0f} scans, {res['read_per_scan']:.0f} read per scan, "
                      f"scan {float(res['scan_seconds']) * 1000:.1f} ms median", flush=True)
        for name, values in got.items():
            print(f"tiers={name}: median {statistics.median(values):.1f} ms CPU per scan "
                  f"[{min(values):.1f}-{max(values):.1f}] over {len(values)} turns")
    finally:
        for d in daemons.values():
            d.close()
        fleet.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
