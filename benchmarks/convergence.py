"""``python -m benchmarks convergence``: how fast the sampled reader's per-node bytes of a live
process converge, read after read, on any host (one node is enough).

The nodes are made up: ``move_pages`` is asked as usual, and each resident page is then
said to be on node ``hash(its 2 MiB block) % 2`` (a subclass of ``MovePages``; the
pure-Python sampler). The truth is every page of the process asked the same way. Each
trial starts the target, reads it ``--reads`` times with one carried ``SampleMemory``
(the host's migration counter held still), and prints the per-node error after each read
as % of the process's resident bytes: ``max over nodes |estimate - truth| / size``.

Targets: ``thin`` (a 16 GiB ``MAP_NORESERVE`` mapping with one page touched in 256: present
pages spread thinly) and ``grow`` (128 MiB, then 2 MiB more in a new mapping before each
read). Modes (``--mode``): ``scan`` (PAGEMAP_SCAN, 6.7+), ``read`` (as a kernel without it:
the ``pagemap`` entries read), ``none`` (as a kernel without it, pagemap not read: the
reader before issue 33). ``NUMA_BENCH_DAEMON_SRC`` is not used: run another tree's reader
with its ``src`` first on ``PYTHONPATH`` (its ``SampledReader`` API: issue 33 on)."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from numa_exporter.model.process_state import ProcessKey
from numa_exporter.model.sample_memory import SampleMemory
from numa_exporter.parsers.pid_maps import parse_pid_maps
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled.reader import SampledReader, SampledRequest, SampledSettings
from numa_exporter.sources.move_pages import MovePages
from numa_exporter.sources.procfs import ProcFS

PAGE = 4096
TARGETS = {
    "thin": """
import mmap, sys
size = 16 << 30
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)
for off in range(0, size, 1 << 20):
    m[off] = 1
print("ready", flush=True)
for line in sys.stdin:
    print("grown", flush=True)
""",
    "grow": """
import mmap, sys
keep = []
def add(mib):
    m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for off in range(0, mib << 20, 4096):
        m[off] = 1
    keep.append(m)
add(128)
print("ready", flush=True)
for line in sys.stdin:
    add(2)
    print("grown", flush=True)
""",
}


def node_of(addr: int) -> int:
    """Return the made-up node of the page at ``addr``: its 2 MiB block hashed."""
    return ((addr >> 21) * 2654435761 >> 13) & 1


class MadeUpNodes(MovePages):
    """``move_pages`` whose resident pages are on :func:`node_of`'s node."""

    def query(self, pid: int, addresses: Sequence[int]) -> list[int]:
        got = super().query(pid, addresses)
        return [node_of(a) if s >= 0 else s for a, s in zip(addresses, got, strict=True)]


def truth(mp: MovePages, pid: int) -> dict[int, int]:
    """Return the resident bytes per made-up node of every page of process ``pid``."""
    pf = ProcFS(Path("/proc")).process(pid)
    out: dict[int, int] = {}
    for e in parse_pid_maps(b"".join(pf.maps()).splitlines(keepends=True)).entries:
        addrs = range(e.start, e.end, PAGE)
        for i in range(0, len(addrs), 4096):
            batch = list(addrs[i:i + 4096])
            for s in mp.query(pid, batch):
                if s >= 0:
                    out[s] = out.get(s, 0) + PAGE
    return out


def trial(target: str, mode: str, reads: int, queries: int, seed: int) -> list[float]:
    """Return the per-node error (% of size) after each of ``reads`` carried reads."""
    p = subprocess.Popen([sys.executable, "-c", TARGETS[target]], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline() == "ready\n"
        mp = MadeUpNodes(pause_s=0)
        try:
            settings = SampledSettings(pagemap_read=mode == "read")
        except TypeError:  # a tree before the pagemap read (PYTHONPATH): mode none only
            settings = SampledSettings()
        reader = SampledReader(settings, move_pages=mp)
        if mode != "scan":
            reader.scans.usable = False
        pf = ProcFS(Path("/proc")).process(p.pid)
        mem = SampleMemory()
        key = ProcessKey(p.pid, 1)
        errs: list[float] = []
        real: dict[int, int] = {}
        for i in range(reads):
            if i and target == "grow":
                p.stdin.write("grow\n")
                p.stdin.flush()
                assert p.stdout.readline() == "grown\n"
            est = reader.read(pf, parse_pid_status(pf.status()), SampledRequest(
                key=key, memory=mem, host_migrated=0, max_queries=queries,
                rng=random.Random(seed * 1000 + i)))
            if not real or target == "grow":
                real = truth(mp, p.pid)
            size = sum(real.values())
            got = est.node_bytes()
            errs.append(100 * max(abs(got.get(n, 0) - real.get(n, 0))
                                  for n in set(real) | set(got)) / size)
        return errs
    finally:
        p.kill()
        p.wait()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks convergence", description=__doc__)
    ap.add_argument("--target", choices=sorted(TARGETS), default="thin")
    ap.add_argument("--mode", choices=("scan", "read", "none"), default="scan")
    ap.add_argument("--reads", type=int, default=18)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--queries", type=int, default=5000, help="query budget of a read")
    ap.add_argument("--json", type=Path, default=None)
    ns = ap.parse_args(argv)
    runs = [trial(ns.target, ns.mode, ns.reads, ns.queries, t + 1) for t in range(ns.trials)]
    print(f"{ns.target}, mode {ns.mode}, {ns.trials} trials, {ns.queries} queries a read: "
          "per-node error, % of size, mean [max] over trials")
    for i in sorted({0, 5, 11, ns.reads - 1} & set(range(ns.reads))):
        col = [r[i] for r in runs]
        print(f"  after read {i + 1}: {statistics.mean(col):.2f} [{max(col):.2f}]")
    if ns.json is not None:
        out: dict[str, Any] = {"target": ns.target, "mode": ns.mode, "errors_pct": runs}
        ns.json.write_text(json.dumps(out, indent=1))
    return 0
