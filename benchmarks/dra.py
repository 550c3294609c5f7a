"""DRA devices: what reading the DRA checkpoint, the CDI specs and the devices' nodes costs
the daemon per scan (``python -m benchmarks dra``).

The daemon watches the ``kubernetes_dra`` fixture root (``tests/fixtures/roots/
kubernetes_dra``: three processes in two Guaranteed pods, each pod with a DRA GPU, one JSON
and one YAML CDI spec, ``/sys/dev/char`` links to the GPUs' PCI devices), copied to a
temporary directory. Two daemons at default flags (``--scan.interval=1s`` and
``--process.min-resident=0`` as in ``benchmarks daemon``):

* ``dra``: the root as built;
* ``no-dra``: the same root without ``dra_manager_state`` (no CDI spec is read then).

Both are measured in interleaved rounds by ``daemon.cpu_per_scan`` (the daemon's CPU clock
over a window of scans); reported: CPU per scan of each and the paired ratio dra / no-dra.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.daemon import DEFAULT_FLAGS, Daemon, cpu_per_scan
from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "roots" / "kubernetes_dra"
CHECKPOINT = Path("var/lib/kubelet/dra_manager_state")


def run(rounds: int, scans: int, seed: int, workdir: Path) -> dict[str, Any]:
    """Return the CPU per scan of the two daemons (see the module docstring)."""
    common = (f"--path.procfs={ROOT / 'proc'}", f"--path.sysfs={ROOT / 'sys'}",
              *DEFAULT_FLAGS)
    roots = {}
    for name in ("dra", "no-dra"):
        roots[name] = workdir / name
        shutil.copytree(ROOT / "rootfs", roots[name], symlinks=True)
    (roots["no-dra"] / CHECKPOINT).unlink()
    daemons = {k: Daemon((*common, f"--path.rootfs={r}"), workdir, k) for k, r in roots.items()}
    try:
        for d in daemons.values():
            d.wait_scans(2, 120)
            d.pause()
        res = timed_rounds({k: functools.partial(cpu_per_scan, d, scans, 1.0)
                            for k, d in daemons.items()}, rounds, seed)
    finally:
        for d in daemons.values():
            d.close()
    cpu = {k: [float(r["cpu_seconds_per_scan"]) for r in v] for k, v in res.values.items()}
    return {"rounds": rounds, "scans_per_window": scans, "records": res.values,
            "orders": res.orders, "cpu": {k: spread(v) for k, v in cpu.items()},
            "ratios": {k: spread(v) for k, v in
                       paired_ratios(cpu, [("dra", "no-dra")]).items()}}


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks dra``; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks dra",
                                 description="The daemon's CPU per scan with and without "
                                             "DRA devices to place.")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (7)")
    ap.add_argument("--scans", type=int, default=4, help="daemon scans per window (4)")
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/dra.json"))
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="numa-bench-"))
    try:
        print(f"dra ({ns.rounds} rounds)...", file=sys.stderr, flush=True)
        result = run(ns.rounds, ns.scans, ns.seed, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["meta"] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                      "loadavg": os.getloadavg(), "flags": DEFAULT_FLAGS,
                      "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps(result, indent=1))
    c, q = result["cpu"], result["ratios"]
    print("\nCPU ms per scan, median [min-max] over rounds\n")
    print("| daemon | CPU per scan |")
    print("|---|---|")
    for k in ("dra", "no-dra"):
        print(f"| {k} | {fmt_spread(c[k], 1e3, 2)} |")
    print(f"\ndra / no-dra: {fmt_spread(q.get('dra/no-dra'))}")
    print(f"\nJSON: {ns.json}")
    return 0
