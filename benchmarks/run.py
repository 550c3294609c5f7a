"""Benchmark runner: interleaved rounds, paired ratios, a table and a JSON file.

    .venv/bin/python -m benchmarks [--quick] [--rounds N] [--json PATH] [--baseline REF]
                                   [--cases a,b] [--no-daemon]
    .venv/bin/python -m benchmarks daemon|interference|sampled ...   (see benchmarks/README.md)

Per target process, each round (benchmarks/rounds.py) runs every contender once in a fresh
random order, and the
ratios are taken within the round (exporter / raw of the same round), so a slow moment of the
machine hits both sides of a ratio. Reported: the median of each contender's times and the
median and min-max of each ratio over the rounds.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import contenders as C
from benchmarks.daemon import run_fleet_case
from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds, wall
from benchmarks.targets import (
    ensure_map_count,
    restore_map_count,
    start_target,
    thp_available,
)
from numa_exporter.parsers.numa_maps import COMPILED


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "4k" or "thp"
    mib: int
    threads: int = 1
    mappings: int = 0


FULL = [
    Case("1GiB-4K", "4k", 1024),
    Case("4GiB-4K", "4k", 4096),
    Case("4GiB-THP", "thp", 4096),
    Case("10k-mappings", "4k", 0, mappings=10_000),
    Case("100k-mappings", "4k", 0, mappings=100_000),
    Case("500-threads-1GiB", "4k", 1024, threads=500),
]
QUICK = [c for c in FULL if not c.name.startswith("4GiB-4K")]
RATIOS = [(a, b) for a in ("exporter", "exporter_python", "baseline")
          for b in ("raw", "numastat")]


def bench_case(case: Case, rounds: int, baseline_mods: object, seed: int) -> dict[str, object]:
    """Return per-contender times and per-round ratios for one target."""
    old_count = None
    if case.mappings:
        old_count = ensure_map_count(case.mappings + 10_000)
    try:
        target = start_target(case.kind, case.mib, case.threads, case.mappings)
    finally:
        restore_map_count(old_count)  # the target holds its mappings; the limit goes back
    try:
        cs = C.contenders(target.pid, case.threads, baseline_mods)  # type: ignore[arg-type]
        times = timed_rounds({k: wall(fn) for k, fn in cs.items()}, rounds, seed).values
        maps = C.exporter(target.pid, threads=False)()
    finally:
        target.close()
    ratios = paired_ratios(times, RATIOS)
    n_threads = case.threads
    out: dict[str, object] = {
        "case": case.name, "threads": n_threads, "rounds": rounds,
        "mappings": getattr(maps, "mappings", None),
        "resident_bytes": sum(getattr(maps, "bytes", {}).values()),
        "times": times,
        "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
        "ratios": {k: spread(v) for k, v in ratios.items()},
    }
    if n_threads > 1:
        out["per_thread_us"] = {
            k: statistics.median(times[k]) * 1e6 / n_threads
            for k in ("threads_warm", "threads_cold") if k in times}
    return out


def synthetic_numa_maps(lines: int, distinct: bool, seed: int = 7) -> bytes:
    """Return numa_maps text: every line alike but for its address, or a realistic mix
    (libraries on two nodes, anonymous heaps, bound pools) with a different count per line."""
    rng = random.Random(seed)
    out = []
    addr = 0x7F0000000000
    for i in range(lines):
        addr += 0x4000
        n = rng.randint(1, 5000) if distinct else 2
        r = rng.random() if distinct else 0.5
        if r < 0.3:
            out.append(b"%x default file=/usr/lib/x86_64-linux-gnu/lib%d.so mapped=%d "
                       b"mapmax=3 N0=%d N1=%d kernelpagesize_kB=4\n"
                       % (addr, i % 300, n, n // 2, n - n // 2))
        elif r < 0.9:
            out.append(b"%x default anon=%d dirty=%d active=0 N0=%d kernelpagesize_kB=4\n"
                       % (addr, n, n, n))
        else:
            out.append(b"%x bind:1 anon=%d dirty=%d N1=%d kernelpagesize_kB=4\n"
                       % (addr, n, n, n))
    return b"".join(out)


# The regex parser numa_maps had before its grammar was made bounded (git log -S _LINE_RE):
# what the pure-Python scanner is held against on distinct lines.
REGEX_PARSER_REF = "780b2be"


def bench_parse(rounds: int, baseline_mods: object, seed: int) -> list[dict[str, object]]:
    """Return the parse alone (no kernel read) of 100,000 lines held in memory."""
    from numa_exporter.parsers.numa_maps import parse_numa_maps

    regex = C.load_module(REGEX_PARSER_REF, "numa_maps")
    results: list[dict[str, object]] = []
    for distinct in (False, True):
        text = synthetic_numa_maps(100_000, distinct)
        chunks = [text[i : i + 4096] for i in range(0, len(text), 4096)]
        lines = text.splitlines(keepends=True)
        cs: dict[str, C.Contender] = {
            "exporter_python": functools.partial(parse_numa_maps, chunks, compiled=False)}
        if COMPILED:
            cs["exporter"] = functools.partial(parse_numa_maps, chunks, compiled=True)
        if baseline_mods is not None:
            cs["baseline"] = functools.partial(
                baseline_mods[0].parse_numa_maps, lines)  # type: ignore[index]
        if regex is not None:
            cs["regex"] = functools.partial(regex.parse_numa_maps, lines)
        times = timed_rounds({k: wall(fn) for k, fn in cs.items()}, rounds, seed).values
        results.append({
            "case": f"parse-100k-{'distinct' if distinct else 'alike'}-lines",
            "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
            "ratios": {k: spread(v) for k, v in paired_ratios(
                times, [("exporter_python", "regex"), ("exporter_python", "baseline")]).items()},
            "times": times,
        })
    return results


def print_table(results: list[dict[str, object]], daemon: list[dict[str, object]],
                parse: list[dict[str, object]]) -> None:
    """Print the results as Markdown tables."""
    cols = ["raw", "numastat", "exporter", "exporter_python", "baseline"]
    print("\n| case | mappings | resident MiB | " + " | ".join(f"{c} ms" for c in cols)
          + " | " + " | ".join(f"{a}/{b}" for a, b in RATIOS) + " |")
    print("|" + "---|" * (3 + len(cols) + len(RATIOS)))
    for r in results:
        med = r["median_ms"]
        rat = r["ratios"]
        assert isinstance(med, dict) and isinstance(rat, dict)
        cells = [f"{med[c]:.1f}" if c in med else "-" for c in cols]
        rcells = [fmt_spread(rat.get(f"{a}/{b}")) for a, b in RATIOS]
        res = int(str(r["resident_bytes"])) / 2**20
        print(f"| {r['case']} | {r['mappings']} | {res:.0f} | " + " | ".join(cells) + " | "
              + " | ".join(rcells) + " |")
    for r in results:
        if "per_thread_us" in r:
            pt = r["per_thread_us"]
            assert isinstance(pt, dict)
            print(f"\n{r['case']}: per thread {pt.get('threads_warm', 0):.1f} us (steady state),"
                  f" {pt.get('threads_cold', 0):.1f} us (first scan)")
    if parse:
        print("\n| parse only, in memory | exporter ms | exporter_python ms | baseline ms | "
              f"regex ms ({REGEX_PARSER_REF}) | exporter_python/regex |")
        print("|---|---|---|---|---|---|")
        for r in parse:
            med, rat = r["median_ms"], r["ratios"]
            assert isinstance(med, dict) and isinstance(rat, dict)
            cells = [f"{med[c]:.1f}" if c in med else "-"
                     for c in ("exporter", "exporter_python", "baseline", "regex")]
            print(f"| {r['case']} | " + " | ".join(cells) + " | "
                  + fmt_spread(rat.get("exporter_python/regex")) + " |")
    if daemon:
        print("\n| processes | scanned | CPU s/scan | scan s | RSS MiB | threads | fds | "
              "scrape ms median | scrape ms p99 | series |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for d in daemon:
            cpu = float(str(d["cpu_seconds_per_scan"]))
            print(f"| {d['processes']} | {d['scanned']} | {cpu:.3f}"
                  f" | {float(str(d['scan_seconds_median'])):.3f}"
                  f" | {int(str(d['rss_bytes'])) / 2**20:.0f} | {d['threads']} | {d['fds']}"
                  f" | {float(str(d['scrape_seconds_median'])) * 1e3:.1f}"
                  f" | {float(str(d['scrape_seconds_p99'])) * 1e3:.1f} | {d['series']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds, no 4 GiB 4K-page target, daemon at 10 and 50 processes")
    ap.add_argument("--rounds", type=int, help="rounds per target (default 21, quick 15)")
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/results.json"))
    ap.add_argument("--baseline", default="main",
                    help="git ref whose numa_maps/pid_sched parsers are timed as 'baseline'")
    ap.add_argument("--cases", help="comma-separated case names (default: all of the run)")
    ap.add_argument("--no-daemon", action="store_true", help="skip the daemon case")
    ap.add_argument("--no-parse", action="store_true", help="skip the in-memory parse case")
    ap.add_argument("--daemon-sizes", help="comma-separated process counts (10,50,200)")
    ap.add_argument("--daemon-flag", action="append", default=[], metavar="FLAG",
                    help="extra exporter flag for the daemon case (repeatable), e.g. "
                         "--daemon-flag=--placement.hold-budget=0.000001 to sample every "
                         "process")
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    rounds = ns.rounds or (15 if ns.quick else 21)
    cases = QUICK if ns.quick else FULL
    if ns.cases:
        wanted = set(ns.cases.split(","))
        cases = [c for c in FULL if c.name in wanted]
    if not thp_available():
        print("transparent huge pages are off: skipping THP targets", file=sys.stderr)
        cases = [c for c in cases if c.kind != "thp"]
    mods = C.load_baseline(ns.baseline) if ns.baseline else None
    if ns.baseline and mods is None:
        print(f"no git ref {ns.baseline!r}: no baseline column", file=sys.stderr)
    results = []
    for i, case in enumerate(cases):
        print(f"case {case.name} ({rounds} rounds)...", file=sys.stderr, flush=True)
        results.append(bench_case(case, rounds, mods, ns.seed + i))
    parse = []
    if not ns.no_parse:
        print("parse of 100,000 lines in memory...", file=sys.stderr, flush=True)
        parse = bench_parse(min(rounds, 9), mods, ns.seed)
    daemon = []
    if not ns.no_daemon:
        sizes = [int(x) for x in (ns.daemon_sizes or ("10,50" if ns.quick else "10,50,200"))
                 .split(",")]
        for n in sizes:
            print(f"daemon with {n} processes...", file=sys.stderr, flush=True)
            daemon.append(run_fleet_case(n, 70, interval=2.0, scans=4 if ns.quick else 8,
                                          scrapes=30 if ns.quick else 100,
                                          flags=ns.daemon_flag))
    meta = {"python": sys.version.split()[0], "kernel": platform.release(),
            "machine": platform.machine(), "compiled_scanner": COMPILED,
            "baseline": ns.baseline if mods else None, "rounds": rounds,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps({"meta": meta, "cases": results, "parse": parse,
                                   "daemon": daemon}, indent=1))
    print_table(results, daemon, parse)
    print(f"\nJSON: {ns.json}")
    return 0
