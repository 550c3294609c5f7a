"""``python -m benchmarks guest``: the daemon at default flags in the 4-node QEMU guest.

The real-kernel cadence scenario (``tests/realkernel/test_cadence_guest.py``, whose workloads
and move this uses): five processes of 100-160 MiB bound to nodes, the exporter at its
default flags with a 2 s interval, scraped after every scan for 70 s, and one process moved
from node 2 to node 3 with ``migratepages`` halfway. Under TCG a page walk is ~10x slower
than on hardware, which is what makes this the slow host of issue 14.

Reports, measured (nothing asserted): scan seconds (the log's ``seconds``), processes read,
kept and left pending per scan after the first two, the age of the served data (per scrape,
the oldest ``numa_process_last_scan_timestamp_seconds`` of the five against the scrape's wall
time), and how long after ``migratepages`` returned the first scrape showed the move (90% of
the process on the new node).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.realkernel import guest as harness
from tests.realkernel.test_cadence_guest import INTERVAL_S, MOVE, WORKLOADS

from benchmarks.scan_log import scan_records

MiB = 1 << 20
HERE = Path(__file__).resolve().parent
INGUEST = HERE.parent / "tests" / "realkernel" / "cadence_inguest.py"


def run_guest(run_s: int, results: Path) -> dict[str, Any]:
    """Boot the 4-node guest, run the scenario for ``run_s`` seconds; return its record
    (``cadence.json`` plus the log's scan lines under ``scans``). Raises RuntimeError when
    the guest cannot be prepared or fails."""
    try:
        assets = harness.ensure_assets()
    except harness.RealKernelUnavailable as exc:
        raise RuntimeError(f"cannot prepare the QEMU guest: {exc}") from exc
    plan = {"out": "/tmp/rkio/cadence", "workload": str(assets.workload),
            "workloads": WORKLOADS, "interval": f"{INTERVAL_S:g}s", "run_s": run_s,
            "move_after_s": run_s // 2, "move": MOVE}
    script = f"set -e\ncd /\nexec {sys.executable} {INGUEST} /tmp/rkio/plan.json\n"
    boot = harness.boot("4node", script, timeout=run_s + 530, results=results, assets=assets,
                        files={"plan.json": json.dumps(plan)})
    if not boot.ok:
        raise RuntimeError(f"guest job failed (rc={boot.rc}): {boot.job_log[-2000:]}")
    out = results / "cadence"
    rec: dict[str, Any] = json.loads((out / "cadence.json").read_text())
    scans = scan_records((out / "exporter.log").read_text(errors="replace"))
    rec["scans"] = scans
    return rec


def summarize(rec: dict[str, Any]) -> dict[str, Any]:
    """Return the measurements of one guest run (see the module docstring)."""
    scans = rec["scans"][2:]
    pids = [str(p) for p in rec["pids"]]
    ages = []
    for s in rec["scrapes"][3:]:
        last = [s["pids"][p].get("last_scan") for p in pids]
        if all(t is not None for t in last):
            ages.append(s["wall"] - min(last))
    moved = str(rec["pids"][MOVE["workload"]])
    size = WORKLOADS[MOVE["workload"]]["size_mib"] * MiB
    shown = None
    for s in rec["scrapes"]:
        if s["wall"] < rec.get("move_done", float("inf")):
            continue
        nodes = {int(n): b for n, b in s["pids"][moved]["nodes"].items()}
        if nodes.get(MOVE["to"], 0) >= 0.9 * size:
            shown = s["wall"] - rec["move_done"]
            break
    secs = [float(s["seconds"]) for s in scans]
    return {
        "scans": len(scans),
        "scan_seconds": {"median": statistics.median(secs), "min": min(secs),
                         "max": max(secs)} if secs else None,
        "read_per_scan_min": min((int(s["processes"]) for s in scans), default=0),
        "kept_max": max((int(s["kept"]) for s in scans), default=0),
        "pending_max": max((int(s["pending"]) for s in scans), default=0),
        "served_age_seconds": {"median": statistics.median(ages), "max": max(ages)}
        if ages else None,
        "move_shown_after_seconds": shown,
        "sampled_scrapes": sum(1 for s in rec["scrapes"] for p in pids
                               if s["pids"][p].get("method") == "sampled"),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the guest case and print its summary; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks guest",
                                 description="The daemon at default flags in the 4-node "
                                             "guest: scan time and the age of served data.")
    ap.add_argument("--run", type=int, default=70, help="seconds the scenario runs (70)")
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/guest.json"))
    ns = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="numa-bench-guest-") as tmp:
        try:
            rec = run_guest(ns.run, Path(tmp))
        except RuntimeError as exc:
            print(f"guest case not run: {exc}", file=sys.stderr)
            return 1
    summary = summarize(rec)
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps({"summary": summary, "record": rec}, indent=1))
    s = summary
    print(f"\n4-node guest (TCG), default flags, {INTERVAL_S:g} s interval, "
          f"{len(WORKLOADS)} processes of 100-160 MiB, {s['scans']} scans after warm-up")
    sec = s["scan_seconds"]
    if sec:
        print(f"scan seconds: median {sec['median']:.2f} [{sec['min']:.2f}-{sec['max']:.2f}]")
    print(f"processes read per scan (fewest): {s['read_per_scan_min']} of {len(WORKLOADS)}; "
          f"kept at most {s['kept_max']}, pending at most {s['pending_max']}")
    age = s["served_age_seconds"]
    if age:
        print(f"age of the served data at scrape time: median {age['median']:.2f} s, "
              f"max {age['max']:.2f} s (interval {INTERVAL_S:g} s)")
    shown = s["move_shown_after_seconds"]
    print("migratepages move shown " + (f"{shown:.2f} s after it returned" if shown is not None
                                        else "in no scrape"))
    print(f"process-scrapes with the sampled reader: {s['sampled_scrapes']}")
    print(f"JSON: {ns.json}")
    return 0
