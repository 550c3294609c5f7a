#!/usr/bin/env python3
"""Benchmark: sampled placement (maps + move_pages) against the full numa_maps read.

    .venv/bin/python -m benchmarks sampled [--sizes 4,16] [--rounds 30] [--window 0.25]
                                       [--out benchmarks/results/sampled.json]
                                       [--reader-fifo] [--no-idle] [--batch N]
                                       [--pause-ms MS]
    .venv/bin/python -m benchmarks sampled --cost [...]   CPU per shape: sampled_cost.py

For each size the latency target of benchmarks/targets.py maps that many GiB of anonymous
memory in 4 KiB pages (MADV_NOHUGEPAGE, every page written) and then loops mmap/write/munmap
of a 64 KiB region, recording each iteration's latency; mmap and munmap need the target's
mmap lock for writing, so they stall while a reader holds it. Each round runs three
conditions in an order shuffled per round (benchmarks/rounds.py), each in a window of at
least ``--window`` s (a longer read extends its window):

  alone    nothing reads the target
  sampled  status + maps + move_pages estimate (numa_exporter.readers.sampled)
  full     the exporter's streamed parse of numa_maps (the kernel walks every page table)

and records the read's wall time, the target's worst and 99th-percentile mmap/munmap latency
in the window, and the estimate's error against that round's full read: total bytes, and the
largest difference of any (node, kind) share of the total. Reported: medians and min-max over
rounds, and of the paired per-round ratios (sampled/alone, full/alone worst latency; full /
sampled read time). A size whose memory is not available (``free``'s available minus 2 GiB) is
replaced by the largest of 16, 8, 4 GiB that fits, and the report says so. The target and
the reader are pinned to different CPUs. "net" latencies subtract the target's own run-queue
wait (``/proc/thread-self/schedstat``), leaving lock waits and wake-ups. Run from the
repository root.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import sampled_cost
from benchmarks.rounds import spread, timed_rounds
from benchmarks.targets import Target, available_bytes, start_target
from numa_exporter.parsers.numa_maps import Kind, parse_numa_maps
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled.reader import (
    SampledRequest,
    read_sampled,
    sampling_available,
)
from numa_exporter.sources.move_pages import DEFAULT_PAUSE_S, MAX_BATCH, MovePages
from numa_exporter.sources.procfs import ProcFS

GiB = 1 << 30
FIFO = False  # --reader-fifo
NO_IDLE = False  # --no-idle
CPUS = frozenset(os.sched_getaffinity(0))  # before any pinning, for every size alike
MOVE_PAGES: MovePages | None = None  # --batch / --pause-ms; None: the reader's default

def pick_size(want: int) -> tuple[int, str | None]:
    """Return the size to use and a note when it is not ``want``."""
    room = available_bytes() / GiB - 2
    if want <= room:
        return want, None
    for alt in (16, 8, 4):
        if alt < want and alt <= room:
            return alt, f"{want} GiB asked, {room + 2:.1f} GiB available: ran {alt} GiB"
    return 0, f"{want} GiB asked, {room + 2:.1f} GiB available: skipped"


def share_error(est: dict[tuple[int, Kind], int], full: dict[tuple[int, Kind], int]) -> float:
    """Return the largest |estimated - full| share of any (node, kind), over full's total."""
    tot = sum(full.values()) or 1
    est_tot = sum(est.values()) or 1
    return max(abs(est.get(k, 0) / est_tot - full.get(k, 0) / tot)
               for k in set(est) | set(full))


Record = dict[str, Any]


def _condition(t: Target, window: float, op: Callable[[], None] | None) -> Record:
    """Run ``op`` (None: nothing) in a latency window of at least ``window`` s; return the
    read's wall time and the target's latencies in the window."""
    time.sleep(0.1)
    t.start_window()
    t0 = time.perf_counter()
    if op is not None:
        if FIFO:  # the reader cannot be preempted while it holds the target's lock
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        try:
            op()
        finally:
            if FIFO:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    read_s = time.perf_counter() - t0
    rest = window - (time.perf_counter() - t0)
    if rest > 0:
        time.sleep(rest)
    return {"read_ms": read_s * 1e3 if op else None, **t.stop_window()}


def run_rounds(t: Target, window: float, rounds: int, seed: int) -> list[Record]:
    """Run the three conditions once per round in an order shuffled per round (one unrecorded
    warm-up round first); return per round the records of each condition, the sampled
    estimate's error against the same round's full read, and the order."""
    pf = ProcFS(Path("/proc")).process(t.pid)
    full_bytes: list[dict[tuple[int, Kind], int]] = []
    est_bytes: list[dict[tuple[int, Kind], int]] = []
    extra: list[dict[str, int]] = []

    def sampled() -> None:
        st = parse_pid_status(pf.status())
        est = read_sampled(pf, st, SampledRequest(rng=random.Random(seed + len(est_bytes))),
                           move_pages=MOVE_PAGES)
        est_bytes.append(dict(est.bytes))
        extra.append({"samples": est.samples, "resident_samples": est.resident_samples})

    def full() -> None:
        full_bytes.append(dict(parse_numa_maps(pf.numa_maps()).bytes))

    ops: dict[str, Callable[[], None] | None] = {"alone": None, "sampled": sampled,
                                                  "full": full}
    res = timed_rounds({name: functools.partial(_condition, t, window, op)
                        for name, op in ops.items()}, rounds, seed)
    recs = []
    for r in range(rounds):  # the warm-up run of each is element 0 of the byte lists
        rec: Record = {name: res.values[name][r] for name in ops}
        full_r, est_r = full_bytes[r + 1], est_bytes[r + 1]
        tot_full = sum(full_r.values())
        rec["sampled"].update(extra[r + 1])
        rec["sampled"]["total_error"] = (sum(est_r.values()) - tot_full) / tot_full
        rec["sampled"]["share_error"] = share_error(est_r, full_r)
        rec["order"] = {"order": res.orders[r]}
        recs.append(rec)
    return recs


def bench_size(gib: int, rounds: int, window: float, seed: int) -> dict[str, Any]:
    """Run every round on one target of ``gib`` GiB; return the records and summaries."""
    t0 = time.perf_counter()
    cpus = sorted(CPUS)
    pin = len(cpus) >= 2
    t = start_target("4k", gib << 10, latency=True, cpu=cpus[0] if pin else None)
    spinner = None
    if NO_IDLE and pin:  # keep the target's CPU from idling (see --no-idle)
        spinner = subprocess.Popen([sys.executable, "-c", "import os\n"
                                    "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))"
                                    "\nwhile True: pass"])
        os.sched_setaffinity(spinner.pid, {cpus[0]})
    if pin:  # the reader on another CPU than the target
        os.sched_setaffinity(0, set(cpus[1:]))
    setup = time.perf_counter() - t0
    try:
        recs = run_rounds(t, window, rounds, seed)
    finally:
        t.close()
        if spinner is not None:
            spinner.kill()
            spinner.wait()
        os.sched_setaffinity(0, CPUS)

    def col(cond: str, key: str) -> list[float]:
        return [float(rec[cond][key]) for rec in recs]

    s: dict[str, Any] = {}
    keys = ("worst_ms", "p99_ms", "net_worst_ms", "net_p99_ms")
    for cond in ("alone", "sampled", "full"):
        s[cond] = {k: spread(col(cond, k)) for k in keys}
        if cond != "alone":
            s[cond]["read_ms"] = spread(col(cond, "read_ms"))
    s["sampled"]["total_error"] = spread([abs(x) for x in col("sampled", "total_error")])
    s["sampled"]["share_error"] = spread(col("sampled", "share_error"))
    s["sampled"]["samples"] = spread(col("sampled", "samples"))

    def paired(a: str, b: str, key: str) -> dict[str, float]:
        return spread([rec[a][key] / max(rec[b][key], 1e-6) for rec in recs])

    s["ratios"] = {
        "sampled_worst_over_alone": paired("sampled", "alone", "worst_ms"),
        "full_worst_over_alone": paired("full", "alone", "worst_ms"),
        "sampled_net_worst_over_alone": paired("sampled", "alone", "net_worst_ms"),
        "full_net_worst_over_alone": paired("full", "alone", "net_worst_ms"),
        "full_read_over_sampled": paired("full", "sampled", "read_ms"),
    }
    return {"gib": gib, "setup_s": setup, "summary": s, "rounds": recs}


def fmt(d: dict[str, float], unit: str = "", digits: int = 2) -> str:
    """Return 'median (min-max)'."""
    return (f"{d['median']:.{digits}f}{unit} ({d['min']:.{digits}f}-"
            f"{d['max']:.{digits}f})")


def table(results: list[dict[str, Any]]) -> str:
    """Return the printed report."""
    lines = []
    for r in results:
        s = r["summary"]
        lines.append(f"== {r['gib']} GiB target, 4 KiB pages, {len(r['rounds'])} rounds; "
                     "median (min-max); 'net' = minus the target's run-queue wait ==")
        lines.append(f"{'condition':9} {'read ms':>22} {'worst mmap/munmap ms':>22} "
                     f"{'net worst ms':>22} {'net p99 ms':>20}")
        for cond in ("alone", "sampled", "full"):
            c = s[cond]
            read = fmt(c["read_ms"], digits=1) if "read_ms" in c else "-"
            lines.append(f"{cond:9} {read:>22} {fmt(c['worst_ms']):>22} "
                         f"{fmt(c['net_worst_ms']):>22} {fmt(c['net_p99_ms'], digits=3):>20}")
        ra = s["ratios"]
        lines.append("paired ratios of worst latency, wall: sampled/alone "
                     f"{fmt(ra['sampled_worst_over_alone'])}, full/alone "
                     f"{fmt(ra['full_worst_over_alone'])}")
        lines.append("paired ratios of worst latency, net:  sampled/alone "
                     f"{fmt(ra['sampled_net_worst_over_alone'])}, full/alone "
                     f"{fmt(ra['full_net_worst_over_alone'])}")
        lines.append(f"read time full/sampled {fmt(ra['full_read_over_sampled'], digits=1)}")
        sm = s["sampled"]
        lines.append(f"sampled estimate: |total error| {fmt(sm['total_error'], digits=4)}, "
                     f"worst (node, kind) share error {fmt(sm['share_error'], digits=4)}, "
                     f"pages queried {fmt(sm['samples'], digits=0)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--cost" in args:  # CPU per shape: benchmarks/sampled_cost.py
        return sampled_cost.main([a for a in args if a != "--cost"])
    ap = argparse.ArgumentParser(prog="python -m benchmarks sampled",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4,16", help="target sizes in GiB, comma-separated")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--window", type=float, default=0.25,
                    help="least seconds per condition (a longer read extends it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/sampled.json")
    ap.add_argument("--reader-fifo", action="store_true",
                    help="run each read at SCHED_FIFO priority 1 (root): takes the reader's "
                         "own preemption, while it holds the target's mmap lock, out of the "
                         "measurement")
    ap.add_argument("--no-idle", action="store_true",
                    help="run a SCHED_IDLE spinner on the target's CPU so that it never idles: "
                         "in a VM, waking a task on an idle (halted) vCPU waits for the host "
                         "to run that vCPU, which would count as lock wait")
    ap.add_argument("--batch", type=int, default=MAX_BATCH, help="pages per move_pages call")
    ap.add_argument("--pause-ms", type=float, default=DEFAULT_PAUSE_S * 1e3,
                    help="least gap between two move_pages calls")
    ns = ap.parse_args(argv)
    global FIFO, MOVE_PAGES, NO_IDLE
    FIFO = ns.reader_fifo
    NO_IDLE = ns.no_idle
    MOVE_PAGES = MovePages(batch=ns.batch, pause_s=ns.pause_ms / 1e3)
    if ns.rounds < 15:
        print("note: fewer than 15 rounds", file=sys.stderr)
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        print(f"sampling unavailable: {why}", file=sys.stderr)
        return 1
    results, notes = [], []
    for want in (int(x) for x in ns.sizes.split(",")):
        gib, note = pick_size(want)
        if note:
            notes.append(note)
            print(note, file=sys.stderr)
        if not gib:
            continue
        print(f"running {gib} GiB ...", file=sys.stderr, flush=True)
        results.append(bench_size(gib, ns.rounds, ns.window, ns.seed))
    text = table(results)
    print(text)
    for n in notes:
        print("note:", n)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "rounds": ns.rounds, "window_s": ns.window, "notes": notes,
            "reader_fifo": ns.reader_fifo, "batch": ns.batch, "pause_ms": ns.pause_ms,
            "no_idle": ns.no_idle,
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            "command": " ".join(sys.argv)}
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
