"""A churned device checkpoint: what a 4 MiB ``kubelet_internal_checkpoint`` rewritten
every second costs the daemon per scan (``python -m benchmarks kubelet-churn``).

Device plugins answer ``Allocate`` with large ``AllocResp`` blobs (environment, mounts,
device nodes), so a node's device checkpoint can reach the parser's 4 MiB bound, and the
kubelet rewrites it (a new file renamed over the old one) whenever a pod starts or ends.
Each new version has to be parsed and its checksum verified.

The daemon watches the ``kubernetes`` fixture root (``tests/fixtures/roots/kubernetes``:
five processes, four of them in pod cgroups, so the kubelet's files are read), copied to a
temporary directory whose device checkpoint is replaced by a 4 MiB one: the fixture's real
entries plus filler entries whose ``AllocResp`` are random bytes, checksummed as the kubelet
does (so the whole verification runs). Two daemons at default flags (``--scan.interval=1s``
and ``--process.min-resident=0`` as in ``benchmarks daemon``):

* ``churn``: its checkpoint is replaced every second by one of two versions in turn;
* ``static``: the same 4 MiB checkpoint, never replaced (the scan's cost without churn).

Both are measured in interleaved rounds by ``daemon.cpu_per_scan`` (the daemon's CPU clock
over a window of scans). ``--pythonpath DIR`` runs the daemons from another source tree (a
checkout of an earlier commit's ``src``), for a before/after pair.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.daemon import DEFAULT_FLAGS, Daemon, cpu_per_scan
from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds
from numa_exporter.parsers.kubelet import go_json as gj
from numa_exporter.parsers.kubelet import kubelet_internal_checkpoint as kic

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "roots" / "kubernetes"
CHECKPOINT = Path("var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
SIZE = 4 << 20
BLOB = 3000  # AllocResp bytes per filler entry (about 4 KiB of base64)


def device_checkpoint(seed: int, size: int = SIZE) -> bytes:
    """Return a device checkpoint of just under ``size`` bytes with a valid checksum: the
    fixture's entries, then filler entries with random ``AllocResp`` blobs."""
    rng = random.Random(seed)
    top = json.loads((ROOT / "rootfs" / CHECKPOINT).read_bytes())
    data = top["Data"]
    entries = data["PodDeviceEntries"]
    length = len(json.dumps(top))  # kept as entries are added: dumping 4 MiB each time is slow
    i = 0
    while True:
        blob = base64.b64encode(rng.randbytes(BLOB)).decode()
        entry = {"PodUID": f"{seed:08x}-{i:04x}-4000-8000-000000000000",
                 "ContainerName": "filler", "ResourceName": "example.com/dev",
                 "DeviceIDs": {"-1": [f"dev-{i}"]}, "AllocResp": blob}
        one = len(json.dumps(entry))
        if length + one + 32 > size:
            break
        length += one + (2 if entries else 0)  # ", " before all but the first
        entries.append(entry)
        i += 1
    value, _ = gj.decode(kic.DATA_V2, gj.loads(json.dumps(data)))
    top["Checksum"] = gj.checksum_of(gj.spew(kic.DATA_V2, value))
    out = json.dumps(top).encode()
    assert kic.parse_kubelet_internal_checkpoint(out).checksum == "verified"
    return out


def _replace(path: Path, data: bytes) -> None:
    new = path.with_name(".kubelet_internal_checkpoint.tmp")
    new.write_bytes(data)
    os.replace(new, path)


class Churn:
    """Replace a checkpoint every ``interval`` seconds with each of ``versions`` in turn."""

    def __init__(self, path: Path, versions: list[bytes], interval: float = 1.0) -> None:
        self.path, self.versions, self.interval = path, versions, interval
        self.done = threading.Event()
        self.writes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(self.interval):
            _replace(self.path, self.versions[self.writes % len(self.versions)])
            self.writes += 1

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def _root(workdir: Path, name: str, checkpoint: bytes) -> Path:
    rootfs = workdir / name
    shutil.copytree(ROOT / "rootfs", rootfs)
    _replace(rootfs / CHECKPOINT, checkpoint)
    return rootfs


def run(rounds: int, scans: int, seed: int, workdir: Path) -> dict[str, Any]:
    """Return the CPU per scan of the churn and static daemons (see the module docstring)."""
    versions = [device_checkpoint(seed), device_checkpoint(seed + 1)]
    common = (f"--path.procfs={ROOT / 'proc'}", f"--path.sysfs={ROOT / 'sys'}",
              *DEFAULT_FLAGS)
    churn_root = _root(workdir, "churn", versions[0])
    static_root = _root(workdir, "static", versions[0])
    daemons = {"churn": Daemon((*common, f"--path.rootfs={churn_root}"), workdir, "churn"),
               "static": Daemon((*common, f"--path.rootfs={static_root}"), workdir, "static")}
    churn = Churn(churn_root / CHECKPOINT, versions)
    try:
        for d in daemons.values():
            d.wait_scans(2, 120)
            d.pause()
        res = timed_rounds({k: functools.partial(cpu_per_scan, d, scans, 1.0)
                            for k, d in daemons.items()}, rounds, seed)
    finally:
        churn.stop()
        for d in daemons.values():
            d.close()
    cpu = {k: [float(r["cpu_seconds_per_scan"]) for r in v] for k, v in res.values.items()}
    stages = {k: spread([float(r["stages"].get("processes", 0.0)) for r in v])
              for k, v in res.values.items()}
    return {"rounds": rounds, "scans_per_window": scans, "checkpoint_bytes": len(versions[0]),
            "writes": churn.writes, "records": res.values, "orders": res.orders,
            "cpu": {k: spread(v) for k, v in cpu.items()},
            "processes_stage_cpu": stages,
            "ratios": {k: spread(v) for k, v in
                       paired_ratios(cpu, [("churn", "static")]).items()}}


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks kubelet-churn``; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks kubelet-churn",
                                 description="A 4 MiB device checkpoint rewritten every "
                                             "second: the daemon's CPU per scan.")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    ap.add_argument("--scans", type=int, default=4, help="daemon scans per window (4)")
    ap.add_argument("--pythonpath", help="run the daemons from this source tree")
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/kubelet_churn.json"))
    ap.add_argument("--seed", type=int, default=1)
    ns = ap.parse_args(argv)
    if ns.pythonpath:
        os.environ["PYTHONPATH"] = ns.pythonpath  # the daemons' only: this process has run
    workdir = Path(tempfile.mkdtemp(prefix="numa-bench-"))
    try:
        print(f"kubelet-churn ({ns.rounds} rounds)...", file=sys.stderr, flush=True)
        result = run(ns.rounds, ns.scans, ns.seed, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["meta"] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                      "loadavg": os.getloadavg(), "pythonpath": ns.pythonpath,
                      "flags": DEFAULT_FLAGS,
                      "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps(result, indent=1))
    c, q, s = result["cpu"], result["ratios"], result["processes_stage_cpu"]
    print(f"\n{result['checkpoint_bytes']} byte device checkpoint, replaced every second "
          f"({result['writes']} times); CPU ms per scan, median [min-max] over rounds\n")
    print("| daemon | CPU per scan | processes stage (scan thread) |")
    print("|---|---|---|")
    for k in ("churn", "static"):
        print(f"| {k} | {fmt_spread(c[k], 1e3, 1)} | {fmt_spread(s[k], 1e3, 1)} |")
    print(f"\nchurn / static: {fmt_spread(q.get('churn/static'))}")
    print(f"\nJSON: {ns.json}")
    return 0
