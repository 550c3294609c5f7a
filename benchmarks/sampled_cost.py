"""Benchmark: CPU of the sampled read against the full read, per target shape.

    .venv/bin/python -m benchmarks sampled --cost [--shapes maps60k,threads,thp,hugetlb,
                                              interleave,sparse] [--rounds 15]
                                              [--out benchmarks/results/sampled_cost.json]

Each shape is one target process (benchmarks/targets.py, or a hugetlb one here); each round
runs every contender once, in an order shuffled per round (benchmarks/rounds.py), and
records the CPU time of the reading thread (``time.thread_time``: user + system, so the
kernel's page walk and move_pages count; the 1 ms pause between move_pages calls is a sleep
and does not):

  full         the streamed parse of numa_maps (the kernel walks every page table)
  sampled      read_sampled with the compiled extension, maps parsed every read (as when
               maps changed since the last read; the frame cache is off)
  sampled_py   the same on the pure-Python path (same seed: the same estimate)
  capped       the compiled read with the query cap the scan gives a first sampled read
               (model/cadence.py query_budget of the full read's CPU, measured before the
               rounds: what the daemon spends when it samples this shape), and the share of
               the resident bytes its estimate placed on nodes
  maps         the compiled maps parse alone (read + parse, the sampled read's fixed part)
  maps_py      the pure-Python maps parse alone

Reported per shape: CPU ms per read, median [min-max]; the paired per-round ratios
sampled/full, sampled_py/full and sampled/sampled_py; pages queried; and the derived
constants of model/cadence.py: CPU per page query ((sampled - maps) / queries) and CPU per
maps line (maps / lines), compiled and pure. The sampled reads use the default precision
with no query cap, so the per-query cost is measured over a full sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds
from benchmarks.targets import Target, _start, start_target
from numa_exporter.model.cadence import ReadCosts, query_budget
from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.parsers.pid_maps import DEFAULT_HUGETLBFS_MOUNTS
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled import compiled as sampled_compiled
from numa_exporter.readers.sampled.frames import parse_maps_text
from numa_exporter.readers.sampled.reader import (
    SampledRequest,
    SampledSettings,
    read_sampled,
    sampling_available,
)
from numa_exporter.sources.procfs import ProcFS

SHAPES = ("maps60k", "threads", "thp", "hugetlb", "interleave", "sparse")
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")

# A hugetlb target: MIB MiB of MAP_HUGETLB memory (default huge page size), every page
# written, plus a little of the interpreter's own. Lives until stdin closes.
HUGETLB = r"""
import mmap, sys
mib = int(sys.argv[1])
m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40000)
for i in range(0, mib << 20, 4096):
    m[i] = 1
print("ready", flush=True)
sys.stdin.buffer.read()
"""


# The sparse reservation of issue 14: 1 GiB written at the start of a 16 TiB MAP_NORESERVE
# mapping.
SPARSE = r"""
import mmap, sys
m = mmap.mmap(-1, 16 << 40, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)
m.madvise(mmap.MADV_NOHUGEPAGE, 0, 1 << 30)
for i in range(0, 1 << 30, 4096):
    m[i] = 1
print("ready", flush=True)
sys.stdin.buffer.read()
"""


def cpu(fn: Callable[[], object]) -> Callable[[], float]:
    """Return a contender that runs ``fn`` and returns the thread CPU seconds it took."""

    def run() -> float:
        t0 = time.thread_time()
        fn()
        return time.thread_time() - t0

    return run


def _hugetlb_target(mib: int) -> tuple[Target, int | None]:
    """Start the hugetlb target, raising nr_hugepages if needed; return it and the old value
    to restore (None: unchanged)."""
    want = mib // 2 + 8  # 2 MiB pages
    old = int(NR_HUGEPAGES.read_text())
    changed = None
    if old < want:
        NR_HUGEPAGES.write_text(str(want))
        changed = old
        if int(NR_HUGEPAGES.read_text()) < mib // 2:
            NR_HUGEPAGES.write_text(str(old))
            raise RuntimeError("could not reserve the huge pages")
    try:
        return _start(HUGETLB, mib), changed
    except RuntimeError:
        if changed is not None:
            NR_HUGEPAGES.write_text(str(changed))
        raise


def _interleave_target(mib: int) -> Target:
    """Start a 4 KiB target under ``numactl --interleave=all``."""
    if shutil.which("numactl") is None:
        raise RuntimeError("numactl is not installed")
    from benchmarks.targets import COMM, TARGET
    proc = subprocess.Popen(["numactl", "--interleave=all", sys.executable, "-c", TARGET,
                             "4k", str(mib), "1", "0", "2", "0", COMM],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    t = Target(proc)
    if t._line(900) != b"ready":
        t.close()
        raise RuntimeError("interleaved target did not start")
    return t


def start_shape(shape: str) -> tuple[Target, str, int | None]:
    """Return the started target of a shape, its description and an nr_hugepages value to
    restore afterwards (None: none)."""
    if shape == "maps60k":
        return start_target("4k", 0, mappings=60_000, map_pages=1), \
            "60,000 one-page anonymous mappings", None
    if shape == "threads":
        return start_target("4k", 1024, threads=500), "1 GiB (4 KiB pages) + 500 threads", None
    if shape == "thp":
        return start_target("thp", 4096), "4 GiB THP", None
    if shape == "hugetlb":
        t, old = _hugetlb_target(1024)
        return t, "1 GiB MAP_HUGETLB (2 MiB pages)", old
    if shape == "interleave":
        nodes = len(list(Path("/sys/devices/system/node").glob("node[0-9]*")))
        return _interleave_target(1024), f"1 GiB interleaved over all {nodes} node(s)", None
    if shape == "sparse":
        return _start(SPARSE), "1 GiB in a 16 TiB MAP_NORESERVE mapping", None
    raise ValueError(shape)


def bench_shape(shape: str, rounds: int, seed: int) -> dict[str, Any]:
    """Run the rounds on one shape; return its summary and raw values."""
    t, what, restore = start_shape(shape)
    try:
        pf = ProcFS(Path("/proc")).process(t.pid)
        st = parse_pid_status(pf.status())
        page = os.sysconf("SC_PAGE_SIZE")
        mounts = DEFAULT_HUGETLBFS_MOUNTS
        queried: dict[bool | None, list[int]] = {True: [], False: [], None: []}
        placed: list[float] = []
        lines = parse_maps_text(pf.maps(), page, mounts, False).mappings
        full_cpu = statistics.median(cpu(lambda: parse_numa_maps(pf.numa_maps()))()
                                     for _ in range(5))
        cap = query_budget(full_cpu, ReadCosts(mappings=lines))

        def sampled(compiled: bool | None) -> None:
            got = queried[compiled]
            est = read_sampled(pf, st, SampledRequest(
                rng=random.Random(seed + len(got)),
                max_queries=cap if compiled is None else None),
                SampledSettings(keep_frames=False, compiled=compiled is not False))
            got.append(est.samples)
            if compiled is None:
                placed.append(est.total_bytes / max(est.total_bytes + est.unsampled_bytes, 1))

        contenders = {
            "full": cpu(lambda: parse_numa_maps(pf.numa_maps())),
            "sampled": cpu(lambda: sampled(True)),
            "sampled_py": cpu(lambda: sampled(False)),
            "capped": cpu(lambda: sampled(None)),
            "maps": cpu(lambda: parse_maps_text(pf.maps(), page, mounts, True)),
            "maps_py": cpu(lambda: parse_maps_text(pf.maps(), page, mounts, False)),
        }
        res = timed_rounds(contenders, rounds, seed)
    finally:
        t.close()
        if restore is not None:
            NR_HUGEPAGES.write_text(str(restore))
    v = res.values
    ratios = paired_ratios(v, [("sampled", "full"), ("sampled_py", "full"),
                               ("sampled", "sampled_py"), ("maps", "full"),
                               ("capped", "full")])
    qc, qp = queried[True][1:], queried[False][1:]  # after the warm-up read
    q = spread([float(x) for x in qc])
    per_query = [(s - m) / max(qq, 1)
                 for s, m, qq in zip(v["sampled"], v["maps"], qc, strict=True)]
    per_query_py = [(s - m) / max(qq, 1)
                    for s, m, qq in zip(v["sampled_py"], v["maps_py"], qp, strict=True)]
    return {
        "shape": shape, "what": what, "maps_lines": lines, "cap": cap,
        "capped_queries": spread([float(x) for x in queried[None][1:]]),
        "capped_placed": spread(placed[1:]),
        "cpu_s": {k: spread(x) for k, x in v.items()},
        "ratios": {k: spread(x) for k, x in ratios.items()},
        "queries": q,
        "per_query_s": spread(per_query), "per_query_py_s": spread(per_query_py),
        "per_line_s": spread([m / max(lines, 1) for m in v["maps"]]),
        "per_line_py_s": spread([m / max(lines, 1) for m in v["maps_py"]]),
        "values": v, "orders": res.orders,
    }


def table(results: list[dict[str, Any]]) -> str:
    """Return the printed report."""
    out = []
    for r in results:
        c, ra = r["cpu_s"], r["ratios"]
        out.append(f"== {r['what']} ({r['maps_lines']} maps lines); CPU ms per read, "
                   "median [min-max] ==")
        for k in ("full", "sampled", "sampled_py", "capped", "maps", "maps_py"):
            out.append(f"  {k:11} {fmt_spread(c[k], 1e3)}")
        out.append(f"  capped/full {fmt_spread(ra['capped/full'])} (cap {r['cap']} pages, "
                   f"queried {fmt_spread(r['capped_queries'], digits=0)}, placed "
                   f"{fmt_spread(r['capped_placed'], digits=3)} of the resident bytes)")
        out.append(f"  sampled/full {fmt_spread(ra['sampled/full'])}   sampled_py/full "
                   f"{fmt_spread(ra['sampled_py/full'])}   sampled/sampled_py "
                   f"{fmt_spread(ra['sampled/sampled_py'], digits=3)}")
        out.append(f"  pages queried {fmt_spread(r['queries'], digits=0)}; per query us: "
                   f"compiled {fmt_spread(r['per_query_s'], 1e6)}, pure "
                   f"{fmt_spread(r['per_query_py_s'], 1e6)}; per maps line us: compiled "
                   f"{fmt_spread(r['per_line_s'], 1e6, 3)}, pure "
                   f"{fmt_spread(r['per_line_py_s'], 1e6)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks sampled --cost",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/sampled_cost.json")
    ns = ap.parse_args(argv)
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        print(f"sampling unavailable: {why}", file=sys.stderr)
        return 1
    if not sampled_compiled.COMPILED:
        print("note: the compiled extension is not built; 'sampled' is the pure path too",
              file=sys.stderr)
    results, notes = [], []
    for shape in ns.shapes.split(","):
        print(f"running {shape} ...", file=sys.stderr, flush=True)
        try:
            results.append(bench_shape(shape, ns.rounds, ns.seed))
        except (RuntimeError, OSError) as exc:
            notes.append(f"{shape}: skipped ({exc})")
            print(notes[-1], file=sys.stderr)
    print(table(results))
    for note in notes:
        print("note:", note)
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "rounds": ns.rounds, "notes": notes, "compiled": sampled_compiled.COMPILED,
            "loadavg": Path("/proc/loadavg").read_text().split()[:3],
            "command": " ".join(sys.argv)}
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {out}")
    return 0
