"""``python -m benchmarks damon-guest``: what ``--collector.damon`` costs the watched process,
measured in the 2-node QEMU guest on Debian's 6.12 (DAMON runs only in a guest; the host
that runs the benchmarks has a kdamond of its own, never touched).

Boots the guest once and runs the interference case inside it (``benchmarks/interference.py``
with ``--steady``): a latency target of ``--mib`` MiB of 4 KiB pages on CPU 0 loops
mmap/write/munmap of 64 KiB; each round runs, in an order shuffled per round, ``alone``,
``daemon`` (the exporter at its defaults: 15 s interval, sampled placement), ``damon`` (the
same plus ``--collector.damon``: DAMON samples the target every sampling interval, taking
its mmap lock for reading per region) and ``continuous`` (full numa_maps reads back to back),
and reports each condition's worst latency against ``alone`` of the same round. Under TCG
absolute times mean little (a page walk is ~10x slower than on hardware); the paired
ratios are the result. ``--damon-flag`` passes DAMON settings to the ``damon`` condition's
exporter (e.g. a shorter sampling interval, to see how the cost moves with it).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from tests.realkernel import guest as harness

REPO = Path(__file__).resolve().parents[1]
KERNEL = "6.12"


def script(mib: int, rounds: int, window: float, conditions: str, flags: list[str]) -> str:
    """Return the guest job: the interference case, its table and JSON under /tmp/rkio/out."""
    cmd = [sys.executable, "-m", "benchmarks", "interference", f"--mib={mib}",
           f"--rounds={rounds}", f"--window={window:g}", f"--conditions={conditions}",
           "--steady", "--run-dir=/tmp/numa-bench-damon",
           "--out=/tmp/rkio/out/interference.json"]
    cmd += [f"--damon-flag={f}" for f in flags]
    return f"""set -u
mkdir -p /tmp/rkio/out
cd {shlex.quote(str(REPO))}
echo 0 > /proc/sys/kernel/numa_balancing
{' '.join(shlex.quote(c) for c in cmd)} > /tmp/rkio/out/table.md 2> /tmp/rkio/out/err.log
echo $? > /tmp/rkio/out/rc
"""


def main(argv: list[str] | None = None) -> int:
    """Run the case in the guest and print its table; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks damon-guest",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="target size in MiB (512)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=20.0, help="seconds per condition (20)")
    ap.add_argument("--conditions", default="alone,daemon,damon,continuous")
    ap.add_argument("--damon-flag", action="append", default=[], dest="flags",
                    help="extra exporter flag for the damon condition (repeatable)")
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/damon-guest.json"))
    ns = ap.parse_args(argv)
    try:
        assets = harness.ensure_assets(KERNEL)
    except harness.RealKernelUnavailable as exc:
        print(f"damon-guest case not run: {exc}", file=sys.stderr)
        return 1
    n = len(ns.conditions.split(","))
    budget = 300 + ns.rounds * n * (ns.window + 60)
    with tempfile.TemporaryDirectory(prefix="numa-bench-damon-") as tmp:
        harness.boot("2node", script(ns.mib, ns.rounds, ns.window, ns.conditions, ns.flags),
                     timeout=budget, results=Path(tmp), assets=assets)
        out = Path(tmp) / "out"
        rc = (out / "rc").read_text().strip() if (out / "rc").exists() else "none"
        if rc != "0":
            err = (out / "err.log").read_text()[-3000:] if (out / "err.log").exists() else ""
            print(f"damon-guest case failed in the guest (rc {rc}): {err}", file=sys.stderr)
            return 1
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text((out / "interference.json").read_text())
        print(f"Debian {KERNEL}, 2-node QEMU/TCG guest (2 vCPUs)")
        print((out / "table.md").read_text().replace("/tmp/rkio/out/interference.json",
                                                     str(ns.json)))
    return 0
