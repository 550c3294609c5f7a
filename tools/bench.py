#!/usr/bin/env python3
"""Benchmark: what one process scan costs, beside the raw kernel read and ``numastat -p``.

    .venv/bin/python tools/bench.py [--rounds 15] [--big-mib 1024] [--mappings 12000]

Starts two target processes (one with a large resident anonymous mapping, one with many small
mappings), then times, in one run and side by side (median of N rounds):
  raw      read /proc/<pid>/numa_maps to EOF and discard it (the kernel's page-table walk)
  parse    the exporter's streamed parse of numa_maps
  process  the exporter's full per-process read (numa_maps + status/stat + every task's
           stat/sched) as the daemon does it in a scan
  numastat `numastat -p <pid>` as a subprocess
Timings are wall clock on this machine; ratios are what carries over.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from numa_exporter.config import Config
from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.scanner import Scanner
from numa_exporter.sources.procfs import ProcFS

BIG = """
import mmap, sys, time
size = int(sys.argv[1]) << 20
m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, size, 4096):
    m[i] = 1
print("ready", flush=True)
time.sleep(3600)
"""

MANY = """
import ctypes, mmap, sys, time
n = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
maps = []
for i in range(n):
    # alternate protections so neighbouring mappings never merge into one VMA
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if i % 2 == 0 else 0)
    addr = libc.mmap(None, 8192, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    ctypes.memset(addr, 1, 8192)
    libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(8192), prot)
    maps.append(addr)
print("ready", flush=True)
time.sleep(3600)
"""


def _start(code: str, arg: int) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", code, str(arg)], stdout=subprocess.PIPE)
    assert p.stdout is not None
    if p.stdout.readline().strip() != b"ready":
        raise SystemExit("workload failed to start")
    return p


def _median(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _raw(pid: int) -> None:
    with open(f"/proc/{pid}/numa_maps", "rb", buffering=0) as fh:
        while fh.read(1 << 16):
            pass


def bench(pid: int, rounds: int, scanner: Scanner) -> dict[str, float | int]:
    """Return median seconds per method for one target, plus its mapping count and RSS."""
    files = ProcFS(Path("/proc")).process(pid)
    maps = parse_numa_maps(files.numa_maps())
    res: dict[str, float | int] = {
        "mappings": maps.mappings,
        "resident_bytes": maps.total_bytes,
        "raw_s": _median(lambda: _raw(pid), rounds),
        "parse_s": _median(lambda: parse_numa_maps(files.numa_maps()), rounds),
        "process_s": _median(lambda: scanner.sample_one(pid), rounds),
    }
    numastat = shutil.which("numastat")
    if numastat:
        res["numastat_s"] = _median(
            lambda: subprocess.run([numastat, "-p", str(pid)], capture_output=True, check=True),
            rounds)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--mappings", type=int, default=12000)
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    from numa_exporter import logs

    logs.configure("error", "logfmt")
    scanner = Scanner(Config(min_resident=0))
    big = _start(BIG, ns.big_mib)
    many = _start(MANY, ns.mappings)
    try:
        out = {"big": bench(big.pid, ns.rounds, scanner),
               "many": bench(many.pid, ns.rounds, scanner)}
    finally:
        big.kill()
        many.kill()
    if ns.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{'target':<6} {'mappings':>9} {'resident MiB':>12} {'raw ms':>8} {'parse ms':>9} "
          f"{'process ms':>11} {'numastat ms':>12} {'process/raw':>11} {'process/numastat':>16}")
    for name, r in out.items():
        ns_ms = r.get("numastat_s", float("nan")) * 1000
        print(f"{name:<6} {r['mappings']:>9} {r['resident_bytes'] / 2**20:>12.1f} "
              f"{r['raw_s'] * 1000:>8.2f} {r['parse_s'] * 1000:>9.2f} "
              f"{r['process_s'] * 1000:>11.2f} {ns_ms:>12.2f} "
              f"{r['process_s'] / r['raw_s']:>11.2f} "
              f"{r['process_s'] * 1000 / ns_ms:>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
