"""Command line: run a parser's fuzz target under atheris for a time or a number of inputs."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fuzz.targets import TARGETS, seeds

PARSER_MODULES = (
    "numa_exporter.parsers._kv", "numa_exporter.parsers.text",
    "numa_exporter.parsers.cpulist", "numa_exporter.parsers.demotion_enabled",
    "numa_exporter.parsers.memory_numa_stat", "numa_exporter.parsers.node_access",
    "numa_exporter.parsers.osrelease",
    "numa_exporter.parsers.memory_stat", "numa_exporter.parsers.node_distance",
    "numa_exporter.parsers.node_meminfo", "numa_exporter.parsers.numa_balancing",
    "numa_exporter.parsers.numa_maps", "numa_exporter.parsers.pid_sched",
    "numa_exporter.parsers.pid_stat", "numa_exporter.parsers.pid_status",
    "numa_exporter.parsers.proc_cgroup", "numa_exporter.parsers.proc_stat",
    "numa_exporter.parsers.vmstat", "numa_exporter.parsers.weighted_interleave",
)
DONE = re.compile(r"Done (\d+) runs in (\d+) second")


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    p.add_argument("target", nargs="?", help="a target name (see --list) or 'all'")
    p.add_argument("--list", action="store_true", help="print the target names and exit")
    p.add_argument("--time", type=int, default=None, help="seconds to run (per target)")
    p.add_argument("--runs", type=int, default=None, help="inputs to run (per target)")
    p.add_argument("--seed", type=int, default=0, help="libFuzzer random seed (0: random)")
    p.add_argument("--corpus", type=Path, default=None,
                   help="corpus directory kept between runs (default: a temporary one)")
    p.add_argument("--artifacts", type=Path, default=Path("fuzz/crashes"),
                   help="where crashing inputs are written (default fuzz/crashes)")
    p.add_argument("--max-len", type=int, default=65536, help="longest input, bytes")
    p.add_argument("--totality-only", action="store_true",
                   help="check only that the parser never raises (invariant failures ignored)")
    p.add_argument("--timeout", type=int, default=10,
                   help="seconds one input may take before it counts as a hang")
    args = p.parse_args(argv)
    if args.list:
        return args
    if args.target is None or (args.target != "all" and args.target not in TARGETS):
        p.error(f"target must be one of: all, {', '.join(TARGETS)}")
    if args.time is None and args.runs is None:
        args.time = 60
    return args


def _libfuzzer_flags(args: argparse.Namespace) -> list[str]:
    args.artifacts.mkdir(parents=True, exist_ok=True)
    flags = [f"-max_len={args.max_len}", f"-timeout={args.timeout}", "-rss_limit_mb=2048",
             f"-artifact_prefix={args.artifacts}{os.sep}", "-print_final_stats=1"]
    if args.time is not None:
        flags.append(f"-max_total_time={args.time}")
    if args.runs is not None:
        flags.append(f"-runs={args.runs}")
    if args.seed:
        flags.append(f"-seed={args.seed}")
    return flags


def _fuzz_one(name: str, args: argparse.Namespace) -> None:
    """Run one target in this process; libFuzzer exits the process when it is done."""
    import importlib

    import atheris

    with atheris.instrument_imports(include=["numa_exporter"]):
        for m in PARSER_MODULES:
            importlib.import_module(m)
    target = TARGETS[name]
    run = target.run
    if args.totality_only:
        def run(data: bytes) -> None:
            with contextlib.suppress(AssertionError):  # invariants: what this mode leaves out
                target.run(data)
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as tmp:
        corpus = args.corpus or Path(tmp)
        corpus.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(seeds(target)):
            (corpus / f"seed-{i:04d}").write_bytes(data)
        argv = [sys.argv[0], *_libfuzzer_flags(args), str(corpus)]
        atheris.Setup(argv, run)
        atheris.Fuzz()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen target(s); return 0 when none found a failing input."""
    args = _args(argv)
    if args.list:
        print("\n".join(TARGETS))
        return 0
    if args.target != "all":
        _fuzz_one(args.target, args)
        return 0  # not reached: libFuzzer exits
    failed = []
    print(f"{'target':<18} {'inputs':>10} {'seconds':>8}  result")
    for name in TARGETS:
        cmd = [sys.executable, "-m", "fuzz", name, *(sys.argv[2:] if argv is None else argv[1:])]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        m = DONE.search(r.stderr)
        runs, secs = (m.group(1), m.group(2)) if m else ("?", "?")
        ok = r.returncode == 0
        if not ok:
            failed.append(name)
            sys.stderr.write(r.stderr[-4000:])
        print(f"{name:<18} {runs:>10} {secs:>8}  {'ok' if ok else 'FAILED'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
