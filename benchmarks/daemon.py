"""The real daemon, measured from outside.

``Daemon`` starts ``python -m numa_exporter`` on a loopback port with a JSON log and reads
what it costs the way any operator could: CPU time, RSS, threads and open fds from psutil,
scans from its log and from ``numa_exporter_scans_total`` on ``/metrics``.

Two cases use it:

* the fleet case (:func:`run_fleet_case`): N processes of ~70 MiB each, CPU per scan, RSS and
  scrape latency as the watched processes grow in number;
* the black-box case (:func:`run_blackbox`, ``python -m benchmarks daemon``): one target of a
  known shape watched by the daemon at its default flags (only ``--process.include`` of the
  target, ``--process.min-resident=0`` and ``--scan.interval=1s`` set) and by the same with
  ``--placement.sample-above=0`` (every read in full), against ``numastat -p`` and ``cat
  numa_maps`` of the same target, in interleaved rounds; and the idle daemon (nothing
  selected);
* the scaling case (:func:`run_scaling`, ``python -m benchmarks daemon --scaling 10,50,200``):
  N watched processes of 32 MiB each (one shared 32 MiB pool every process maps and touches:
  each walks 8,192 pages; ``--scaling-memory private,running``: each its own private
  anonymous 32 MiB, asleep, or writing one resident page a second), the daemon at its
  default flags against the kernel's own read of the same numa_maps (one ``cat`` of all N
  files) and ``numastat -p`` run on each, summed, in interleaved rounds;
  with the daemon's RSS and the series it exports.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from benchmarks.rounds import fmt_spread, paired_ratios, spread, timed_rounds
from benchmarks.scan_log import scan_records
from benchmarks.targets import (
    available_bytes,
    ensure_map_count,
    restore_map_count,
    start_fleet,
    start_target,
    thp_available,
)

GiB = 1 << 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample_value(text: str, name: str, **labels: str) -> float | None:
    """Return the value of the first sample ``name{labels...}`` in an exposition, or None."""
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name): len(name) + 1] not in ("{", " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


DAEMON_SRC_ENV = "NUMA_BENCH_DAEMON_SRC"


def daemon_env(env: dict[str, str] | None) -> dict[str, str] | None:
    """Return the environment a daemon runs in: ``env`` (None: this one's), with the source
    tree named by NUMA_BENCH_DAEMON_SRC first on PYTHONPATH where that is set, so that the
    daemon of another checkout (its ``src``, extensions built in place) is measured by this
    checkout's harness - the before/after pairs of benchmarks/README.md."""
    src = os.environ.get(DAEMON_SRC_ENV)
    if not src:
        return env
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (src, out.get("PYTHONPATH", "")) if p)
    return out


class Daemon:
    """A running exporter (``python -m numa_exporter``) with a JSON log in ``workdir``."""

    def __init__(self, args: Sequence[str], workdir: Path, name: str = "daemon",
                 env: dict[str, str] | None = None) -> None:
        self.port = _free_port()
        self.log = workdir / f"{name}.log"
        cmd = [sys.executable, "-m", "numa_exporter",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info",
               "--log.format=json", *args]
        self.args = list(args)
        env = daemon_env(env)
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        self.ps = psutil.Process(self.proc.pid)
        self._seen = 0  # log bytes already parsed
        self._scans: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """Return the daemon's user + system CPU seconds so far from psutil (clock-tick
        resolution: 10 ms at USER_HZ 100)."""
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def cpu_clock_seconds(self) -> float:
        """Return the CPU seconds all the daemon's threads have run so far, in ns resolution:
        its process CPU-time clock (clock_getcpuclockid(3)), the same run time psutil
        reports in clock ticks."""
        return time.clock_gettime_ns(((~self.pid) << 3) | 2) / 1e9

    def usage(self) -> dict[str, int]:
        """Return the daemon's RSS bytes, threads and open fds now."""
        with self.ps.oneshot():
            return {"rss_bytes": int(self.ps.memory_info().rss),
                    "threads": int(self.ps.num_threads()), "fds": int(self.ps.num_fds())}

    def scans(self) -> list[dict[str, Any]]:
        """Return the ``scan`` lines of the log so far, parsed."""
        with open(self.log, "rb") as fh:
            fh.seek(self._seen)
            data = fh.read()
        cut = data.rfind(b"\n") + 1
        self._seen += cut
        self._scans.extend(scan_records(data[:cut]))
        return self._scans

    def wait_scans(self, n: int, timeout: float) -> None:
        """Return once the log holds ``n`` scans; raise RuntimeError on exit or time-out."""
        deadline = time.monotonic() + timeout
        while len(self.scans()) < n:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {n} scans in {timeout}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def scrape(self, timeout: float = 30.0) -> str:
        """Return the text of one ``/metrics`` scrape."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())

    def pause(self) -> None:
        """Stop the daemon (SIGSTOP) so that it neither scans nor competes for the CPU."""
        self.ps.suspend()

    def resume(self) -> None:
        """Let a paused daemon go on (SIGCONT)."""
        self.ps.resume()

    def close(self) -> None:
        """Stop the daemon (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.ps.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_per_scan(d: Daemon, scans: int, interval: float) -> dict[str, Any]:
    """Resume ``d``, let one scan pass, then measure ``scans`` scans; pause it again.

    Returns CPU seconds per scan (the daemon's process CPU clock over the window divided by
    the change of ``numa_exporter_scans_total``; the window holds one ``/metrics`` scrape,
    the one that reads the counter at its start), the same from psutil's ``cpu_times`` (in
    clock ticks, so 2.5 ms steps over a 4-scan window), the scans, per scan the processes
    read and kept (the log's ``processes`` and ``kept``) and the median CPU of each stage
    the log lines show (``cpu_<stage>``).
    """
    settle = 0.1  # after a scan's log line, for its snapshot to be published
    d.resume()
    try:
        timeout = 30 + 4 * interval * (scans + 1)
        d.wait_scans(len(d.scans()) + 1, timeout)
        time.sleep(settle)
        first = len(d.scans())
        cpu0, clk0 = d.cpu_seconds(), d.cpu_clock_seconds()
        s0 = sample_value(d.scrape(), "numa_exporter_scans_total") or 0.0
        d.wait_scans(first + scans, timeout)
        time.sleep(settle)
        cpu1, clk1 = d.cpu_seconds(), d.cpu_clock_seconds()
        text = d.scrape()
    finally:
        d.pause()
    s1 = sample_value(text, "numa_exporter_scans_total") or 0.0
    recs = d.scans()[first: first + scans]
    n = max(s1 - s0, 1.0)
    stages = sorted({k for r in recs for k in r if k.startswith("cpu_")})
    return {"cpu_seconds_per_scan": (clk1 - clk0) / n,
            "psutil_cpu_seconds_per_scan": (cpu1 - cpu0) / n, "scans": s1 - s0,
            "stages": {k[4:]: statistics.median(float(str(r.get(k, 0))) for r in recs)
                       for k in stages},
            "read_per_scan": statistics.mean(int(str(r.get("processes", 0))) for r in recs),
            "kept_per_scan": statistics.mean(int(str(r.get("kept", 0))) for r in recs),
            "scan_seconds": statistics.median(float(str(r.get("seconds", 0))) for r in recs),
            "sampled": sample_value(text, "numa_process_placement_info", method="sampled")
            is not None}


def _child_cpu(cmd: Sequence[str]) -> float:
    """Run ``cmd`` (output dropped); return its user + system CPU seconds (wait4 rusage)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}")
    return float(ru.ru_utime + ru.ru_stime)


@dataclass(frozen=True)
class Shape:
    """A black-box target: its name and how :func:`start_target` makes it."""

    name: str
    kind: str = "4k"
    mib: int = 0
    threads: int = 1
    mappings: int = 0
    map_pages: int = 1
    named: bool = False  # the mappings are memfds of distinct names

    @property
    def memory_bytes(self) -> int:
        return (self.mib << 20) + self.mappings * self.map_pages * 4096


SHAPES = (
    Shape("60k-mappings", mappings=60_000),
    Shape("1GiB-500-threads", mib=1024, threads=500),
    Shape("4GiB", mib=4096),
    Shape("16GiB", mib=16384),
    Shape("4GiB-THP", kind="thp", mib=4096),
    # a sampled process with many mappings: plain ones, and as many distinct memfd paths
    Shape("2GiB-60k-mappings", mib=2048, mappings=60_000),
    Shape("2GiB-60k-memfds", mib=2048, mappings=60_000, named=True),
    # a sparse reservation: 2 GiB dense at the start of 64 TiB (JVM heaps, allocators, UVM)
    Shape("2GiB-in-64TiB", kind="reserve", mib=2048),
)
HEADROOM = 4 * GiB  # memory left to the rest of the machine while a target lives
DEFAULT_FLAGS = ("--process.min-resident=0", "--scan.interval=1s")
CONTENDERS = ("daemon_default", "daemon_full", "numastat", "cat")


def run_shape(shape: Shape, rounds: int, scans: int, seed: int, workdir: Path,
              versus: Sequence[str] = ()) -> dict[str, Any]:
    """Return the black-box measurements of one target shape (see the module docstring).

    ``versus``: flags of one more daemon (``daemon_versus``, default flags plus these),
    paired with the default one (e.g. ``--no-collector.binding``: what the thread audit
    costs)."""
    comm = f"nbt-{os.getpid() % 100000}"
    old = ensure_map_count(shape.mappings + 10_000) if shape.mappings else None
    try:
        target = start_target(shape.kind, shape.mib, shape.threads, shape.mappings,
                              map_pages=shape.map_pages, comm=comm, named=shape.named)
    finally:
        restore_map_count(old)  # the target holds its mappings; the limit goes back
    flags = (f"--process.include=^{comm}$", *DEFAULT_FLAGS)
    daemons: dict[str, Daemon] = {}
    try:
        daemons["daemon_default"] = Daemon(flags, workdir, f"{shape.name}-default")
        daemons["daemon_full"] = Daemon((*flags, "--placement.sample-above=0"), workdir,
                                        f"{shape.name}-full")
        if versus:
            daemons["daemon_versus"] = Daemon((*flags, *versus), workdir,
                                              f"{shape.name}-versus")
        for d in daemons.values():  # the first scan reads every thread in full
            d.wait_scans(2, 120)
            d.pause()
        numastat = shutil.which("numastat")
        cs: dict[str, Callable[[], dict[str, Any]]] = {
            name: functools.partial(cpu_per_scan, d, scans, 1.0)
            for name, d in daemons.items()}
        if numastat:
            cs["numastat"] = lambda: {"cpu_seconds": _child_cpu([numastat, "-p",
                                                                 str(target.pid)])}
        cs["cat"] = lambda: {"cpu_seconds": _child_cpu(["cat", f"/proc/{target.pid}/numa_maps"])}
        res = timed_rounds(cs, rounds, seed)
        usage = {name: d.usage() for name, d in daemons.items()}
        huge = anon_huge_bytes(target.pid)  # after the rounds: smaps walks it all
    finally:
        for d in daemons.values():
            d.close()
        target.close()
    cpu = {name: [float(r.get("cpu_seconds_per_scan", r.get("cpu_seconds", 0.0)))
                  for r in recs] for name, recs in res.values.items()}
    ticks = {name: [float(r["psutil_cpu_seconds_per_scan"]) for r in res.values[name]]
             for name in daemons}
    pairs = [(a, b) for a in ("daemon_default", "daemon_full") for b in ("numastat", "cat")]
    pairs.append(("daemon_default", "daemon_full"))
    if versus:
        pairs.append(("daemon_default", "daemon_versus"))
    return {
        "shape": shape.name, "rounds": rounds, "scans_per_window": scans,
        "orders": res.orders, "records": res.values,
        "cpu": {k: spread(v) for k, v in cpu.items()},
        "psutil_cpu": {k: spread(v) for k, v in ticks.items()},
        "ratios": {k: spread(v) for k, v in paired_ratios(cpu, pairs).items()},
        "sampled_rounds": {k: sum(bool(r["sampled"]) for r in res.values[k])
                           for k in daemons},
        "read_per_scan": {k: spread([float(r["read_per_scan"]) for r in res.values[k]])
                          for k in daemons},
        "usage": usage, "target_anon_huge_bytes": huge,
    }


def anon_huge_bytes(pid: int) -> int:
    """Return a process's transparent huge page bytes (``AnonHugePages`` of its
    ``smaps_rollup``; 0 where the line or the file is missing): whether a THP target got
    huge pages at all."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) << 10
    return 0


def run_idle(rounds: int, scans: int, workdir: Path) -> dict[str, Any]:
    """Return the CPU per scan of a daemon that selects nothing (its fixed cost per scan)."""
    d = Daemon(("--process.include=^numa-bench-nothing-matches$", *DEFAULT_FLAGS), workdir,
               "idle")
    try:
        d.wait_scans(2, 120)
        d.pause()
        recs = [cpu_per_scan(d, scans, 1.0) for _ in range(rounds)]
        usage = d.usage()
    finally:
        d.close()
    procs = len(psutil.pids())
    return {"rounds": rounds, "scans_per_window": scans, "host_processes": procs,
            "records": recs, "usage": usage,
            "cpu": spread([float(r["cpu_seconds_per_scan"]) for r in recs]),
            "psutil_cpu": spread([float(r["psutil_cpu_seconds_per_scan"]) for r in recs]),
            "stages": {k: spread([float(r["stages"][k]) for r in recs if k in r["stages"]])
                       for k in sorted({k for r in recs for k in r["stages"]})}}


SCALING_MIB = 32


def _raw_read(pids: Sequence[int]) -> dict[str, Any]:
    """Return the CPU seconds of one ``cat`` of every process's numa_maps (the kernel's walk
    of their page tables, plus one cat's start-up)."""
    return {"cpu_seconds": _child_cpu(["cat", *(f"/proc/{p}/numa_maps" for p in pids)])}


def _numastat_summed(numastat: str, pids: Sequence[int]) -> dict[str, Any]:
    """Return the CPU seconds of ``numastat -p`` run on each process, summed."""
    return {"cpu_seconds": sum(_child_cpu([numastat, "-p", str(p)]) for p in pids)}


def run_scaling_one(n: int, rounds: int, scans: int, seed: int, workdir: Path,
                    memory: str = "shared") -> dict[str, Any]:
    """Return the scaling measurements with ``n`` watched processes whose memory is
    ``memory`` (``targets.FLEET_MODES``: one shared pool, or private and asleep, or private
    and running; see the module docstring)."""
    fleet = start_fleet(n, SCALING_MIB, memory)
    d: Daemon | None = None
    try:
        pids = sorted(c.pid for c in psutil.Process(fleet.proc.pid).children())
        d = Daemon(("--process.include=^numa-bench-d$", *DEFAULT_FLAGS), workdir,
                    f"scaling-{n}")
        d.wait_scans(2, 300)  # the first scan reads every thread in full
        d.pause()
        cs: dict[str, Callable[[], dict[str, Any]]] = {
            "daemon": functools.partial(cpu_per_scan, d, scans, 1.0),
            "raw": functools.partial(_raw_read, pids)}
        numastat = shutil.which("numastat")
        if numastat:
            cs["numastat"] = functools.partial(_numastat_summed, numastat, pids)
        res = timed_rounds(cs, rounds, seed)
        d.resume()
        text = d.scrape()
        d.pause()
        usage = d.usage()
    finally:
        if d is not None:
            d.close()
        fleet.close()
    cpu = {name: [float(r.get("cpu_seconds_per_scan", r.get("cpu_seconds", 0.0)))
                  for r in recs] for name, recs in res.values.items()}
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {"processes": n, "memory": memory, "watched": len(pids), "rounds": rounds,
            "scans_per_window": scans,
            "orders": res.orders, "records": res.values,
            "cpu": {k: spread(v) for k, v in cpu.items()},
            "ratios": {k: spread(v) for k, v in paired_ratios(
                cpu, [("daemon", "raw"), ("daemon", "numastat")]).items()},
            "read_per_scan": spread([float(r["read_per_scan"]) for r in res.values["daemon"]]),
            "stages": {k: spread([float(r["stages"][k]) for r in res.values["daemon"]
                                  if k in r["stages"]])
                       for k in sorted({k for r in res.values["daemon"] for k in r["stages"]})},
            "series": series, **usage}


def print_scaling(rows: list[dict[str, Any]]) -> None:
    """Print the scaling results as a Markdown table."""
    print(f"\nScaling: N watched processes of {SCALING_MIB} MiB, daemon at default flags; CPU ms "
          "per scan (daemon: its process CPU clock / scans_total change; raw: one cat of the "
          "N numa_maps; numastat -p run on each, summed), median [min-max] over rounds\n")
    print("| N | memory | read per scan | daemon | raw numa_maps | numastat -p summed | "
          "daemon / raw | daemon / numastat | daemon per process | RSS MiB | series |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        c, q = r["cpu"], r["ratios"]
        per = {k: v / r["processes"] for k, v in c["daemon"].items()}
        print(f"| {r['processes']} | {r.get('memory', 'shared')} | "
              f"{r['read_per_scan']['median']:.0f} | "
              f"{fmt_spread(c.get('daemon'), 1e3, 1)} | {fmt_spread(c.get('raw'), 1e3, 1)} | "
              f"{fmt_spread(c.get('numastat'), 1e3, 1)} | "
              f"{fmt_spread(q.get('daemon/raw'))} | {fmt_spread(q.get('daemon/numastat'))} | "
              f"{fmt_spread(per, 1e3, 2)} | {r['rss_bytes'] / (1 << 20):.0f} | "
              f"{r['series']} |")
    for r in rows:
        stages = ", ".join(f"{k} {v['median'] * 1e3:.1f}" for k, v in r["stages"].items())
        print(f"  N={r['processes']} {r.get('memory', 'shared')}: scan thread CPU by stage "
              f"(ms, median): {stages}")


def print_blackbox(shapes: list[dict[str, Any]], idle: dict[str, Any] | None,
                   notes: list[str]) -> None:
    """Print the black-box results as Markdown tables."""
    print("\nCPU ms per scan (daemon: its process CPU clock over the window / scans_total "
          "change, psutil's clock-tick figure beside it; numastat -p and cat numa_maps: CPU "
          "of one run from wait4), median [min-max] over rounds\n")
    print("| target | daemon, defaults | (psutil) | chosen at defaults | daemon, "
          "sample-above=0 | (psutil) | numastat -p | cat numa_maps | defaults / numastat | "
          "full / numastat | defaults / full |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in shapes:
        c, q = r["cpu"], r["ratios"]
        sampled = r["sampled_rounds"]["daemon_default"]
        chosen = ("sampled" if sampled == r["rounds"] else "full" if not sampled
                  else f"sampled {sampled}/{r['rounds']}")
        if r["shape"].endswith("THP"):
            chosen += f", {r['target_anon_huge_bytes'] / GiB:.1f} GiB THP"
        t = r["psutil_cpu"]
        print(f"| {r['shape']} | {fmt_spread(c.get('daemon_default'), 1e3, 1)} | "
              f"{fmt_spread(t.get('daemon_default'), 1e3, 1)} | {chosen} | "
              f"{fmt_spread(c.get('daemon_full'), 1e3, 1)} | "
              f"{fmt_spread(t.get('daemon_full'), 1e3, 1)} | "
              f"{fmt_spread(c.get('numastat'), 1e3, 1)} | {fmt_spread(c.get('cat'), 1e3, 1)} | "
              f"{fmt_spread(q.get('daemon_default/numastat'))} | "
              f"{fmt_spread(q.get('daemon_full/numastat'))} | "
              f"{fmt_spread(q.get('daemon_default/daemon_full'))} |")
    if idle is not None:
        print(f"\nIdle scan (nothing selected; {idle['host_processes']} processes on the host): "
              f"{fmt_spread(idle['cpu'], 1e3, 2)} ms CPU per scan, black-box (psutil: "
              f"{fmt_spread(idle['psutil_cpu'], 1e3, 1)}); by stage, the scan thread's CPU "
              "from the log lines, median per window [min-max over rounds]:")
        for stage, v in idle["stages"].items():
            print(f"  {stage}: {fmt_spread(v, 1e3, 2)} ms")
    for n in notes:
        print(f"note: {n}")


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks daemon``: the black-box case; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks daemon",
                                 description="The daemon at default flags, from outside, "
                                             "against numastat -p and cat numa_maps.")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    ap.add_argument("--scans", type=int, default=4, help="daemon scans per window (4)")
    ap.add_argument("--shapes", help="comma-separated: " + ",".join(s.name for s in SHAPES))
    ap.add_argument("--no-idle", action="store_true", help="skip the idle daemon")
    ap.add_argument("--scaling", metavar="N,N,...",
                    help="also the scaling case with these process counts (e.g. 10,50,200)")
    ap.add_argument("--scaling-memory", default="shared", metavar="KIND,KIND,...",
                    help="the scaling case's memory, comma-separated: shared (one shared "
                         "32 MiB pool, the default), private (each process its own private "
                         "anonymous 32 MiB, asleep), running (private, each writing one "
                         "resident page a second)")
    ap.add_argument("--json", type=Path, default=Path(".cache/benchmarks/daemon.json"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--versus", action="append", default=[], metavar="FLAG",
                    help="one more daemon with the default flags plus FLAG (repeatable), "
                         "paired with the default one: --versus=--no-collector.binding")
    ns = ap.parse_args(argv)
    shapes = list(SHAPES)
    if ns.shapes:
        wanted = set(ns.shapes.split(","))
        shapes = [s for s in SHAPES if s.name in wanted]
    notes: list[str] = []
    if shutil.which("numastat") is None:
        notes.append("numastat not found (Debian: numactl): no numastat column")
    workdir = Path(tempfile.mkdtemp(prefix="numa-bench-"))
    results: list[dict[str, Any]] = []
    try:
        for i, shape in enumerate(shapes):
            if shape.kind == "thp" and not thp_available():
                notes.append(f"{shape.name}: transparent huge pages are off: skipped")
                continue
            avail = available_bytes()
            if shape.memory_bytes + HEADROOM > avail:
                notes.append(f"{shape.name}: needs {shape.memory_bytes / GiB:.1f} GiB + "
                             f"{HEADROOM / GiB:.0f} GiB headroom, {avail / GiB:.1f} GiB "
                             "available: skipped")
                continue
            print(f"{shape.name} ({ns.rounds} rounds)...", file=sys.stderr, flush=True)
            results.append(run_shape(shape, ns.rounds, ns.scans, ns.seed + i, workdir,
                                     ns.versus))
        idle = None
        if not ns.no_idle:
            print("idle daemon...", file=sys.stderr, flush=True)
            idle = run_idle(ns.rounds, 2 * ns.scans, workdir)
        scaling: list[dict[str, Any]] = []
        kinds = [k for k in ns.scaling_memory.split(",") if k]
        for i, n in enumerate(int(x) for x in (ns.scaling or "").split(",") if x):
            for j, kind in enumerate(kinds):
                print(f"scaling, {n} processes, {kind} memory ({ns.rounds} rounds)...",
                      file=sys.stderr, flush=True)
                scaling.append(run_scaling_one(n, ns.rounds, ns.scans,
                                               ns.seed + 100 + i * len(kinds) + j, workdir,
                                               kind))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    meta = {"python": sys.version.split()[0], "kernel": platform.release(),
            "cpus": os.cpu_count(), "loadavg": os.getloadavg(), "rounds": ns.rounds,
            "scans_per_window": ns.scans, "flags": DEFAULT_FLAGS, "notes": notes,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps({"meta": meta, "shapes": results, "idle": idle,
                                   "scaling": scaling}, indent=1))
    print_blackbox(results, idle, notes)
    if scaling:
        print_scaling(scaling)
    print(f"\nJSON: {ns.json}")
    return 0


# --- the fleet case --------------------------------------------------------------------------


def run_fleet_case(n: int, mib: int, interval: float, scans: int, scrapes: int,
                   flags: Sequence[str] = ()) -> dict[str, object]:
    """Return CPU per scan, RSS, threads, fds, scrape latency and series count of the daemon
    watching ``n`` processes of ``mib`` MiB (:func:`start_fleet`), with extra ``flags``."""
    fleet = start_fleet(n, mib)
    workdir = Path(tempfile.mkdtemp(prefix="numa-bench-"))
    d: Daemon | None = None
    try:
        d = Daemon(("--process.min-resident=64MiB", "--process.include=^numa-bench-d$",
                    f"--scan.interval={interval}s", *flags), workdir)
        warm = 2  # the first scan reads every thread in full; the second is steady state
        d.wait_scans(warm, 60 + interval * warm * 4)
        cpu0 = d.cpu_seconds()
        d.wait_scans(warm + scans, 60 + interval * scans * 4)
        cpu1 = d.cpu_seconds()
        recs = d.scans()[warm: warm + scans]
        lat: list[float] = []
        first = ""
        for _ in range(scrapes):  # back to back: later scans share the CPU with them
            t0 = time.perf_counter()
            text = d.scrape()
            lat.append(time.perf_counter() - t0)
            first = first or text
        lat.sort()
        series = sum(1 for line in first.splitlines() if line and not line.startswith("#"))
        usage = d.usage()
        return {
            "processes": n,
            "flags": list(flags),
            "sampled": sum(1 for line in first.splitlines()
                           if line.startswith("numa_process_placement_info{")
                           and 'method="sampled"' in line),
            "scanned": statistics.median(int(str(r["processes"])) for r in recs),
            "left_for_next_scan": max(int(str(r.get("pending", 0))) for r in recs),
            "cpu_seconds_per_scan": (cpu1 - cpu0) / scans,
            "scan_seconds_median": statistics.median(float(str(r["seconds"])) for r in recs),
            **usage,
            "scrape_seconds_median": statistics.median(lat),
            "scrape_seconds_p99": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))],
            "series": series,
            "scans_measured": scans,
            "scrapes": scrapes,
        }
    finally:
        if d is not None:
            d.close()
        fleet.close()
        shutil.rmtree(workdir, ignore_errors=True)
