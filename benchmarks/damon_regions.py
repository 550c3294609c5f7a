"""What reading a kdamond's tried regions costs the DAMON worker
(``python -m benchmarks damon-regions``): the exporter's own CPU per worker round at 20,
1,000 and 10,000 regions, against a fake sysfs tree of regular files laid out as the kernel's
``tried_regions/<i>/{start,end,nr_accesses,age,sz_filter_passed}`` (mm/damon/sysfs-schemes.c),
half of the regions hot. Never the host's DAMON.

One round is what the worker does per watched process each period: the region read(s) and
the placement of the hot regions (``place_hot_regions``; move_pages answered in-process, so
the kernel's page walk is not in it). Each contender is a child process (this tree's
``src``, or another tree's with ``--baseline-src DIR``, e.g. a ``git worktree`` of main) that
runs a batch of rounds when asked; its CPU (user + system, psutil, from outside) over the
batch divided by the rounds is the cost per round. Rounds: every contender once per round
in a shuffled order (benchmarks/rounds.py); ratios paired within a round.

Share of a core at the default intervals: CPU per round / the round's wall period, which is
``--collector.damon``'s 1 s worker period plus one aggregation interval (100 ms) per region
read, in which the kernel works and the exporter waits (the baseline read three times:
1.3 s; this tree once: 1.1 s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psutil

from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds

SRC = Path(__file__).resolve().parents[1] / "src"
SIZES = (20, 1_000, 10_000)
PERIOD_S, AGGR_S = 1.0, 0.1

CHILD = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from numa_exporter.sources.damon import DamonSettings, DamonSysfs
    from numa_exporter.readers.hot_memory import place_hot_regions
    tree, n = Path(sys.argv[1]), int(sys.argv[2])
    d = DamonSysfs(tree, tree / "run", DamonSettings(max_regions=max(n, 1000)), "boot")
    d.slots, d.ops = [0], "vaddr"
    state = d.kdamonds / "0" / "state"
    new = hasattr(d, "read_regions")
    if not new:
        from numa_exporter.scan.damon import READS_PER_ROUND, hottest
    query = lambda addrs: [0] * len(addrs)

    def one_round():
        state.write_text("on")  # the fake's kdamond runs again (the request overwrote it)
        if new:
            r = d.read_regions(0)
            place_hot_regions(1, 0.0, r.regions, 20, 0.05, query, 0.0, refused=r.refused)
        else:
            reads = []
            for _ in range(READS_PER_ROUND):
                state.write_text("on")
                reads.append(d.regions(0))
            place_hot_regions(1, 0.0, hottest(reads), 20, 0.05, query, 0.0)

    for line in sys.stdin:
        for _ in range(int(line)):
            one_round()
        print("done", 3 if not new else 1, flush=True)
''')


def build_tree(root: Path, n: int) -> None:
    """Write the fake sysfs tree: kdamond 0 on, its stat scheme's ``n`` tried regions of
    64 KiB, every other one hot (20 of 20 samples)."""
    kd = root / "kernel" / "mm" / "damon" / "admin" / "kdamonds"
    base = kd / "0" / "contexts" / "0" / "schemes" / "0" / "tried_regions"
    base.mkdir(parents=True)
    (kd / "nr_kdamonds").write_text("1\n")
    (kd / "0" / "state").write_text("on\n")
    (kd / "0" / "pid").write_text("4242\n")
    start = 0x7F0000000000
    for i in range(n):
        r = base / str(i)
        r.mkdir()
        for name, v in (("start", start + i * 65536), ("end", start + (i + 1) * 65536),
                        ("nr_accesses", 20 if i % 2 == 0 else 0), ("age", 7),
                        ("sz_filter_passed", 0)):
            (r / name).write_text(f"{v}\n")
    (base / "total_bytes").write_text(f"{n * 65536}\n")


class Child:
    """One contender: a child process reading one tree with one source tree's code."""

    def __init__(self, src: Path, tree: Path, n: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(src))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tree), str(n)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True)
        self.ps = psutil.Process(self.proc.pid)
        self.reads = 1

    def cpu_per_round(self, rounds: int) -> float:
        """Return the child's CPU seconds per round over a batch of ``rounds``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        t0 = self.ps.cpu_times()
        self.proc.stdin.write(f"{rounds}\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().split()
        t1 = self.ps.cpu_times()
        self.reads = int(reply[1])
        return ((t1.user - t0.user) + (t1.system - t0.system)) / rounds

    def close(self) -> None:
        """End the child."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def main(argv: list[str]) -> int:
    """Measure and print the table; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks damon-regions")
    ap.add_argument("--baseline-src", type=Path, help="another tree's src (e.g. main's)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    print("| regions | contender | region reads a round | CPU ms a round | share of a core "
          "(1 s period + 100 ms a read) | this/baseline |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            tree = Path(tmp) / f"sys{n}"
            build_tree(tree, n)
            kids = {"this": Child(SRC, tree, n)}
            if args.baseline_src:
                kids["baseline"] = Child(args.baseline_src, tree, n)
            batch = max(2, 20_000 // n)  # 0.2-4 s of CPU a batch: far above the clock tick
            try:
                got = timed_rounds({k: (lambda c=c, b=batch: c.cpu_per_round(b))
                                    for k, c in kids.items()}, args.rounds, seed=n)
            finally:
                for c in kids.values():
                    c.close()
            ratios = paired_ratios(got.values, [("this", "baseline")])
            for name, c in kids.items():
                sp = spread(got.values[name])
                wall = PERIOD_S + c.reads * AGGR_S
                share = {k: v / wall for k, v in sp.items()}
                ratio = fmt_spread(spread(ratios["this/baseline"])) if (
                    name == "this" and "this/baseline" in ratios) else "-"
                print(f"| {n:,} | {name} | {c.reads} | {fmt_spread(sp, 1e3)} | "
                      f"{fmt_spread(share, 100, 1)} % | {ratio} |")
    return 0
