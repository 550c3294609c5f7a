"""Daemon CPU per scan with the tiers collector off and on (issue 17's cost check).

    .venv/bin/python -m benchmarks.tiers_cost [--processes 50] [--scans 10] [--rounds 5]
    .venv/bin/python -m benchmarks.tiers_cost --in-process [--rounds 30]

Black box, with ``benchmarks/daemon.py``'s ``Daemon`` and ``cpu_per_scan``: two daemons watch
the same fleet of processes (``start_fleet``: ~70 MiB each, no hinting faults, no tiers on a
one-node host with balancing off), one with ``--no-collector.tiers`` and one with every
collector on; they run in turns (the other paused with SIGSTOP), in an order that alternates
round by round, and each turn measures psutil's CPU time of the daemon over ``--scans`` scans
divided by the change of ``numa_exporter_scans_total``. With the collector off nothing of
issue 17 runs in a scan (the sched fault block is not parsed, no per-process view, no node
vmstat or demotion read); on, all of it does. Prints each turn and the medians; nothing is
asserted.

``--in-process`` times ``Scanner.scan()`` itself on this machine's /proc (every process,
``--process.min-resident=0``), two scanners side by side (tiers off, on) in alternating order,
with ``time.process_time()``: finer than the daemon's clock-tick CPU time on a busy machine.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import structlog

from benchmarks.daemon import Daemon, cpu_per_scan
from benchmarks.targets import start_fleet
from numa_exporter.collectors.registry import COLLECTORS
from numa_exporter.config import Config
from numa_exporter.scan.scanner import Scanner

VARIANTS = {"off": ("--no-collector.tiers",), "on": ()}


def turns(rounds: int) -> list[tuple[str, ...]]:
    """Return the order of the variants in each round: alternating, so neither always
    runs first."""
    return [tuple(VARIANTS) if r % 2 == 0 else tuple(reversed(VARIANTS)) for r in range(rounds)]


def print_summary(got: dict[str, list[float]], digits: int, unit: str) -> None:
    """Print each variant's median (and range) and the paired differences on - off."""
    for name, values in got.items():
        print(f"tiers={name}: median {statistics.median(values):.{digits}f} {unit} "
              f"[{min(values):.{digits}f}-{max(values):.{digits}f}] over {len(values)} turns")
    diffs = sorted(a - b for a, b in zip(got["on"], got["off"], strict=True))
    print(f"on - off, paired by round: median {statistics.median(diffs):+.{digits}f} ms "
          f"[{diffs[0]:+.{digits}f} to {diffs[-1]:+.{digits}f}] over {len(diffs)} rounds")


def in_process(rounds: int) -> None:
    """Print CPU milliseconds per ``Scanner.scan()`` with the tiers collector off and on."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    every = Config(min_resident=0, top=100_000)
    scanners = {"off": Scanner(Config(min_resident=0, top=100_000, collectors=frozenset(
        c for c in COLLECTORS if c != "tiers"))), "on": Scanner(every)}
    for s in scanners.values():  # the first scan reads every thread in full
        s.scan()
        s.scan()
    got: dict[str, list[float]] = {k: [] for k in scanners}
    processes = 0
    for order in turns(rounds):
        for name in order:
            t0 = time.process_time()
            snap = scanners[name].scan()
            got[name].append((time.process_time() - t0) * 1000)
            processes = len(snap.processes)
    print(f"in process, Scanner.scan() of {processes} processes:")
    print_summary(got, 2, "ms CPU per scan")


def main() -> None:
    """Run the turns and print CPU milliseconds per scan for each variant."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--scans", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--in-process", action="store_true")
    args = ap.parse_args()
    if args.in_process:
        in_process(args.rounds)
        return
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
        for r, order in enumerate(turns(args.rounds)):
            for name in order:
                res = cpu_per_scan(daemons[name], args.scans, args.interval)
                ms = float(res["cpu_seconds_per_scan"]) * 1000
                got[name].append(ms)
                print(f"round {r} tiers={name}: {ms:.1f} ms CPU per scan over "
                      f"{res['scans']:.0f} scans, {res['read_per_scan']:.0f} read per scan, "
                      f"scan {float(res['scan_seconds']) * 1000:.1f} ms median", flush=True)
        print_summary(got, 1, "ms CPU per scan")
    finally:
        for d in daemons.values():
            d.close()
        fleet.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
