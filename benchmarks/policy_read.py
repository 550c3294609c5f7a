"""``python -m benchmarks policy``: what the memory-policy reads of sampled processes cost at
default flags (issue 23 #1), against another source tree (e.g. ``main``) in interleaved
rounds.

Per round and contender a fresh daemon (default flags, ``--scan.interval=1s``, only the
target selected) watches one target from its discovery: the daemon's process CPU clock over
its first ``--scans`` scans, the process-stage CPU of its first scan and of the later ones
(its log), and what it exports of the target (reader, reason, both readers' last CPU, the
estimated hold, bytes exported as ``bind``). ``--baseline-src DIR`` runs the other contender
with ``PYTHONPATH=DIR`` (a tree's ``src``, e.g. from ``git archive main``; the compiled
extensions must be built there).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.daemon import DEFAULT_FLAGS, Daemon, sample_value
from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds
from benchmarks.targets import start_target

SHAPES = {"1GiB": 1024, "4GiB": 4096}


def _window(args: list[str], env: dict[str, str] | None, scans: int, workdir: Path,
            name: str) -> dict[str, Any]:
    """Return one fresh daemon's measurements over its first ``scans`` scans."""
    d = Daemon(args, workdir, name, env)
    try:
        d.wait_scans(scans, 60 + 4 * scans)
        cpu = d.cpu_clock_seconds()
        text = d.scrape()
        recs = d.scans()[:scans]
    finally:
        d.close()
    stage = [float(str(r.get("cpu_processes", 0))) for r in recs]
    reasons = [line.split('reason="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith("numa_process_placement_reason_info{")]
    return {"cpu_seconds": cpu, "first_scan_processes": stage[0],
            "later_scan_processes": statistics.median(stage[1:]) if len(stage) > 1 else 0.0,
            "full_read_cpu": sample_value(text, "numa_process_read_cpu_seconds", reader="full"),
            "sampled_read_cpu": sample_value(text, "numa_process_read_cpu_seconds",
                                             reader="sampled"),
            "hold": sample_value(text, "numa_process_placement_hold_seconds"),
            "reason": reasons[0] if reasons else None,
            "bind_bytes": sample_value(text, "numa_process_policy_memory_bytes", policy="bind")}


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the medians [min-max]; return 0."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks policy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    ap.add_argument("--scans", type=int, default=6, help="scans per daemon (6)")
    ap.add_argument("--shapes", default="1GiB,4GiB", help="comma-separated: 1GiB,4GiB")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="the other contender's source directory (PYTHONPATH)")
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    comm = f"nbp-{os.getpid() % 100000}"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for shape in ns.shapes.split(","):
            target = start_target("4k", SHAPES[shape], comm=comm)
            try:
                args = [f"--process.include=^{comm}$", *DEFAULT_FLAGS]
                cs = {"branch": functools.partial(_window, args, None, ns.scans, workdir,
                                                  "branch")}
                if ns.baseline_src is not None:
                    env = {**os.environ, "PYTHONPATH": str(ns.baseline_src)}
                    cs["baseline"] = functools.partial(_window, args, env, ns.scans, workdir,
                                                       "base")
                res = timed_rounds(cs, ns.rounds, ns.seed, warm=False)
            finally:
                target.close()
            print(f"\n{shape} (4 KiB pages), {ns.rounds} rounds, first {ns.scans} scans "
                  "of a fresh daemon; medians [min-max]:")
            for name, recs in res.values.items():
                print(f"  {name}: reason {sorted({str(r['reason']) for r in recs})}")
                for key in ("cpu_seconds", "first_scan_processes", "later_scan_processes",
                            "full_read_cpu", "sampled_read_cpu", "hold"):
                    vals = [float(r[key]) for r in recs if r[key] is not None]
                    print(f"    {key:22s} ms {fmt_spread(spread(vals), 1e3)}")
            if "baseline" in res.values:
                cpu = {k: [float(r["cpu_seconds"]) for r in v] for k, v in res.values.items()}
                ratio = paired_ratios(cpu, [("branch", "baseline")])["branch/baseline"]
                print(f"  daemon CPU over the window, branch/baseline: "
                      f"{fmt_spread(spread(ratio))}")
    return 0
