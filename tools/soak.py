"""Soak: the real daemon under process churn, concurrent scrapes and hostile clients.

    .venv/bin/python -m tools.soak                    # 60 s, table on stdout
    .venv/bin/python -m tools.soak --duration 600 --json soak.json

For ``--duration`` seconds it keeps long-lived workers (each on its own NUMA node where the
host has several and numactl is installed) whose threads start and exit all the time, spawns
and kills short-lived workers, scrapes ``/metrics`` from several threads at once, and runs
hostile clients (idle connections, a slow reader, garbage and HTTP/0.9 requests, clients that
disconnect mid-response, a flood of distinct Accept headers, and a flood of wrong passwords
against a second daemon that has basic auth on), every one with per-connection time-outs so
the soak never hangs, and hostile local rounds (``tools/soak_rounds.py``: a log pipe whose
reader exits, a signal storm, cgroups named alike after cleaning, a zombie leader, a process
renaming itself, FIFOs and device links under the kubelet root, a churned 4 MiB device
checkpoint). Traffic stays on 127.0.0.0/8; worker memory is bounded (at most 2 GiB
in all).

It reports scans, scrapes, failed scrapes, stale series (a worker alive before a scan started
and after the scrape ended, yet missing from it: counted once per worker and scan), processes
the daemon deferred for its scan budget (the daemon's default, two thirds of the interval,
unless ``--scan-budget``; a deferred process keeps its last values in the exposition, so it
still counts as present), counters that went backwards between scans, what the daemon
uses, measured from outside with psutil (RSS and open fds before and after, threads at the
end, CPU time over the run and per scan), and each hostile-client check. Exit status 1 when
failed scrapes, stale series or backward counters are not all 0 (``--strict-hostile``: or a
hostile check failed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families
from tools import soak_rounds
from tools.soak_clients import (
    HOST,
    HOSTILE_ROUND_S,
    SCRAPE_TIMEOUT,
    HostileCheck,
    HostileClients,
)
from tools.soak_floods import scans_in

MAX_WORKER_MEMORY_MIB = 2048
WORKER_PREFIX = "soak-"
# A worker: names itself, touches its memory, then keeps threads starting and exiting.
WORKER = r"""
import ctypes, mmap, random, sys, threading, time
name, mib, threads = sys.argv[1].encode(), int(sys.argv[2]), int(sys.argv[3])
life = float(sys.argv[4])
libc = ctypes.CDLL(None)
libc.prctl(1, 9, 0, 0, 0)                        # PR_SET_PDEATHSIG: SIGKILL with the soak
libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)   # PR_SET_NAME
m = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, len(m), 4096):
    m[i] = 1
print("ready", flush=True)
def work():
    x = 0
    for i in range(0, len(m), 4096 * 16):
        x += m[i]
    time.sleep(random.uniform(0.01, 0.3))
deadline = time.monotonic() + life
while time.monotonic() < deadline:
    if threading.active_count() <= threads:
        threading.Thread(target=work, daemon=True).start()
    time.sleep(0.02)
"""

@dataclass(frozen=True)
class Usage:
    """The daemon's resources at one moment, read from outside (psutil)."""

    cpu_seconds: float = 0.0  # user + system so far
    rss_bytes: int = 0
    threads: int = 0
    fds: int = 0


def _usage(pid: int) -> Usage:
    """Return what the process ``pid`` uses now (all 0 when it cannot be read)."""
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            t = p.cpu_times()
            return Usage(t.user + t.system, p.memory_info().rss, p.num_threads(), p.num_fds())
    except psutil.Error:
        return Usage()


@dataclass
class Worker:
    """A worker process the soak started: its name, when it was ready and when it was killed."""

    name: str
    proc: subprocess.Popen[bytes]
    ready: float | None = None  # wall time its memory was touched
    killed: float | None = None  # wall time the soak began killing it

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class Report:
    """What a soak measured."""

    duration_seconds: float = 0.0
    nodes: int = 1
    numactl: bool = False
    scans: int = 0
    scrapes: int = 0
    failed_scrapes: int = 0
    stale_series: int = 0
    budget_skipped: int = 0  # processes the daemon deferred to a later scan (its budget)
    counters_backwards: int = 0
    counter_series: int = 0  # distinct counter series followed across scrapes
    workers_started: int = 0
    workers_killed: int = 0
    rss_before_bytes: int = 0
    rss_after_bytes: int = 0
    fds_before: int = 0
    fds_after: int = 0
    threads_after: int = 0
    cpu_seconds: float = 0.0  # the daemon's CPU time from its first scan to the end
    scrape_seconds_p50: float = 0.0
    scrape_seconds_max: float = 0.0
    daemon_alive: bool = True
    hostile: list[HostileCheck] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # first few, for diagnosis

    @property
    def ok(self) -> bool:
        """Return True when no scrape failed, no series was stale and no counter fell."""
        return (self.daemon_alive and self.failed_scrapes == 0 and self.stale_series == 0
                and self.counters_backwards == 0 and self.scrapes > 0 and self.scans > 0)

    def to_json(self) -> dict[str, Any]:
        """Return the report as JSON-able data."""
        d = asdict(self)
        d["ok"] = self.ok
        return d

    def table(self) -> str:
        """Return the report as a plain-text table."""
        rows = [
            ("duration (s)", f"{self.duration_seconds:.1f}"),
            ("nodes / numactl", f"{self.nodes} / {'yes' if self.numactl else 'no'}"),
            ("scans", str(self.scans)),
            ("scrapes", str(self.scrapes)),
            ("failed scrapes", str(self.failed_scrapes)),
            ("stale series", str(self.stale_series)),
            ("deferred by scan budget", str(self.budget_skipped)),
            ("counters backwards", str(self.counters_backwards)),
            ("counter series followed", str(self.counter_series)),
            ("workers started / killed", f"{self.workers_started} / {self.workers_killed}"),
            ("daemon RSS before (MiB)", f"{self.rss_before_bytes / 2**20:.1f}"),
            ("daemon RSS after (MiB)", f"{self.rss_after_bytes / 2**20:.1f}"),
            ("daemon fds before / after", f"{self.fds_before} / {self.fds_after}"),
            ("daemon threads at end", str(self.threads_after)),
            ("daemon CPU s (per scan)", f"{self.cpu_seconds:.2f} "
                                        f"({self.cpu_seconds / max(self.scans, 1):.4f})"),
            ("scrape p50 / max (s)", f"{self.scrape_seconds_p50:.3f} / "
                                     f"{self.scrape_seconds_max:.3f}"),
            ("daemon alive at end", "yes" if self.daemon_alive else "NO"),
        ]
        rows += [(f"hostile: {h.name}", ("pass" if h.passed else "FAIL") + f"  {h.detail}")
                 for h in self.hostile]
        w = max(len(k) for k, _ in rows)
        lines = [f"{k:<{w}}  {v}" for k, v in rows]
        lines += [f"failure: {f}" for f in self.failures]
        return "\n".join(lines)


def _online_nodes() -> list[int]:
    try:
        text = Path("/sys/devices/system/node/online").read_text().strip()
    except OSError:
        return [0]
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isascii() and lo.isdigit() and (not hi or (hi.isascii() and hi.isdigit())):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out[:64] or [0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Soak(HostileClients):
    """One soak run against a daemon it starts itself (its hostile-client checks:
    ``tools/soak_clients.py``)."""

    def __init__(self, duration: float, exporter: Sequence[str], long_workers: int = 4,
                 short_workers: int = 4, worker_mib: int = 24, scrapers: int = 4,
                 threads_per_worker: int = 6, scan_interval: float = 1.0,
                 scan_budget: float | None = None) -> None:
        if (long_workers + short_workers) * worker_mib > MAX_WORKER_MEMORY_MIB:
            raise ValueError(f"workers would use more than {MAX_WORKER_MEMORY_MIB} MiB")
        self.duration = duration
        self.exporter = list(exporter)
        self.long_workers = long_workers
        self.short_workers = short_workers
        self.worker_mib = worker_mib
        self.scrapers = scrapers
        self.threads_per_worker = threads_per_worker
        self.scan_interval = scan_interval
        self.scan_budget = scan_budget  # None: the daemon's default (2/3 of the interval)
        self.port = _free_port()
        self.url = f"http://{HOST}:{self.port}/metrics"
        self.nodes = _online_nodes()
        self.numactl = shutil.which("numactl") if len(self.nodes) > 1 else None
        self.report = Report(nodes=len(self.nodes), numactl=self.numactl is not None)
        self.lock = threading.Lock()
        self.workers: list[Worker] = []
        self.counters: dict[tuple[Any, ...], tuple[float, float]] = {}
        # pids of programs that exec() in place (a local round): their counters restart
        self.restarting_pids: set[str] = set()
        self.latencies: list[float] = []
        self.stale: set[tuple[int, float]] = set()
        self.stop = threading.Event()
        self.daemon: subprocess.Popen[bytes] | None = None
        self.hostile_checks: tuple[str, ...] = ("_idle", "_http09", "_garbage",
                                                "_slow_reader", "_disconnects",
                                                "_accept_flood", "_auth_flood")
        # what a hostile local user can do (tools/soak_rounds.py): log sink, signals, names
        self.local_rounds: tuple[str, ...] = tuple(soak_rounds.ROUNDS)
        # the auth flood's daemon: basic auth on, a fresh user for each round's right password
        self.auth_port = _free_port()
        self.auth_daemon: subprocess.Popen[bytes] | None = None
        self.probes = [f"probe{i}" for i in range(min(64, int(duration / 10) + 2))]
        self._flooding = threading.Lock()
        self._seq = 0

    # --- workers -------------------------------------------------------------------------
    def _spawn(self, kind: str, node: int | None, life: float) -> Worker | None:
        self._seq += 1
        name = f"{WORKER_PREFIX}{kind}{self._seq}"[:15]
        cmd = [sys.executable, "-c", WORKER, name, str(self.worker_mib),
               str(self.threads_per_worker), str(life)]
        if node is not None and self.numactl:
            cmd = [self.numactl, f"--membind={node}", f"--cpunodebind={node}", *cmd]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        w = Worker(name, proc)
        with self.lock:
            self.workers.append(w)
            self.report.workers_started += 1
        threading.Thread(target=self._await_ready, args=(w,), daemon=True).start()
        return w

    @staticmethod
    def _await_ready(w: Worker) -> None:
        assert w.proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            if w.proc.stdout.readline().strip() == b"ready":
                w.ready = time.time()

    def _kill(self, w: Worker) -> None:
        with self.lock:
            w.killed = time.time()
            self.report.workers_killed += 1
        with contextlib.suppress(OSError):
            w.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(5)

    def _churn(self, deadline: float) -> None:
        life = self.duration + 30  # workers end themselves even if the soak dies
        for i in range(self.long_workers):
            self._spawn("l", self.nodes[i % len(self.nodes)], life)
        short: list[Worker] = []
        rng = random.Random(1)
        while time.monotonic() < deadline and not self.stop.is_set():
            if len(short) < self.short_workers:
                w = self._spawn("s", rng.choice(self.nodes), life)
                if w:
                    short.append(w)
            elif short:
                self._kill(short.pop(rng.randrange(len(short))))
            self.stop.wait(rng.uniform(0.2, 1.0))

    # --- scrapes -------------------------------------------------------------------------
    def _scrape(self) -> tuple[float, str]:
        t0 = time.monotonic()
        with urllib.request.urlopen(self.url, timeout=SCRAPE_TIMEOUT) as resp:
            if resp.status != 200:
                raise OSError(f"status {resp.status}")
            body = resp.read().decode("utf-8")  # strict: invalid UTF-8 is a failure
        return time.monotonic() - t0, body

    def _fail(self, what: str) -> None:
        with self.lock:
            self.report.failed_scrapes += 1
            if len(self.report.failures) < 10:
                self.report.failures.append(what[:300])

    def _check(self, body: str, ended: float) -> None:
        """Count stale series and backward counters in one scrape's body."""
        scans = ts = duration = 0.0
        starts: dict[str, float] = {}
        counters: list[tuple[str, dict[str, str], float]] = []
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                if s.name == "numa_exporter_scans_total":
                    scans = s.value
                elif s.name == "numa_exporter_last_scan_timestamp_seconds":
                    ts = s.value
                elif s.name == "numa_exporter_scan_duration_seconds":
                    duration = s.value
                elif s.name == "numa_process_start_time_seconds":
                    starts[s.labels["pid"]] = s.value
                if fam.type == "counter" and s.name.endswith("_total"):
                    counters.append((s.name, s.labels, s.value))
        scan_start = ts - duration
        with self.lock:
            for name, labels, v in counters:
                if labels.get("pid") in self.restarting_pids:
                    continue  # a new program under the same pid and start time
                ident: tuple[Any, ...] = (name, tuple(sorted(
                    (k, x) for k, x in labels.items() if k != "comm")))
                if "pid" in labels:  # a pid may be reused: the start time tells them apart
                    ident += (starts.get(labels["pid"]),)
                prev = self.counters.get(ident)
                if prev is not None and scans > prev[0] and v < prev[1]:
                    self.report.counters_backwards += 1
                    if len(self.report.failures) < 10:
                        self.report.failures.append(
                            f"counter {name} {labels} fell {prev[1]} -> {v}")
                if prev is None or scans >= prev[0]:
                    self.counters[ident] = (scans, v)
            self.report.counter_series = len(self.counters)
            if ts <= 0:
                return
            for w in self.workers:
                # alive from before the scan started until after the scrape ended
                alive = (w.proc.poll() is None) if w.killed is None else w.killed > ended
                if (w.ready is not None and w.ready < scan_start - 0.2 and alive
                        and str(w.pid) not in starts and (w.pid, scans) not in self.stale):
                    self.stale.add((w.pid, scans))  # once per process and scan
                    self.report.stale_series += 1
                    if len(self.report.failures) < 10:
                        self.report.failures.append(
                            f"worker {w.name} pid {w.pid} ready {w.ready:.2f} missing from "
                            f"scan started {scan_start:.2f}")

    def _scraper(self, deadline: float) -> None:
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                secs, body = self._scrape()
                self._check(body, time.time())
            except Exception as exc:  # any failure of a scrape is counted, never raised
                self._fail(f"{type(exc).__name__}: {exc}")
            else:
                with self.lock:
                    self.report.scrapes += 1
                    self.latencies.append(secs)
            self.stop.wait(0.05)

    def _local_rounds(self, deadline: float) -> None:
        """Run the local rounds (tools/soak_rounds.py) in turn, in rounds until the deadline,
        and report each as a hostile check (the worst of its rounds)."""
        results: dict[str, list[HostileCheck]] = {r: [] for r in self.local_rounds}
        while not self.stop.is_set():
            for name in self.local_rounds:
                try:
                    got = soak_rounds.ROUNDS[name](self)
                except Exception as exc:  # a round's own error is its failure
                    got = HostileCheck(name, False, f"{type(exc).__name__}: {exc}")
                results[name].append(got)
            if time.monotonic() >= deadline - HOSTILE_ROUND_S * len(self.local_rounds) / 2:
                break
            self.stop.wait(0.5)
        for name, got in results.items():
            if not got:
                continue
            failed = [g for g in got if not g.passed]
            last = failed[-1] if failed else got[-1]
            with self.lock:
                self.report.hostile.append(HostileCheck(
                    name, not failed, f"{len(got) - len(failed)}/{len(got)} rounds passed; "
                    f"{'last failure' if failed else 'last'}: {last.detail}"))

    # --- the run -------------------------------------------------------------------------
    def _start_daemon(self, log_path: Path, port: int | None = None,
                      *extra: str) -> subprocess.Popen[bytes]:
        cmd = [*self.exporter, f"--web.listen-address={HOST}:{port or self.port}",
               "--path.procfs=/proc", f"--scan.interval={int(self.scan_interval * 1000)}ms",
               f"--process.include=^{WORKER_PREFIX}", "--process.min-resident=16MiB",
               "--log.format=json", "--log.level=info", "--no-collector.accelerator",
               # time-outs shorter than the hostile checks wait (the defaults are 10s/2m/30s)
               "--web.read-header-timeout=2s", "--web.idle-timeout=5s",
               "--web.write-timeout=10s"]
        if self.scan_budget is not None:
            cmd.append(f"--scan.budget={int(self.scan_budget * 1000)}ms")
        cmd += extra
        with open(log_path, "wb") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)

    def _wait_first_scan(self, timeout: float = 30.0,
                         daemon: subprocess.Popen[bytes] | None = None,
                         scrape: Callable[[], str] | None = None) -> float:
        end = time.monotonic() + timeout
        daemon = daemon or self.daemon
        scrape = scrape or (lambda: self._scrape()[1])
        while time.monotonic() < end:
            assert daemon is not None
            if daemon.poll() is not None:
                raise RuntimeError(f"daemon exited with {daemon.returncode}")
            with contextlib.suppress(Exception):
                scans = scans_in(scrape())
                if scans >= 1:
                    return scans
            time.sleep(0.2)
        raise RuntimeError("the daemon did not complete a scan")

    def _stop(self, daemon: subprocess.Popen[bytes]) -> None:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()

    def run(self, log_path: Path) -> Report:
        """Run the soak for its duration; return the report (the daemon is stopped)."""
        t0 = time.monotonic()
        self.daemon = self._start_daemon(log_path)
        threads: list[threading.Thread] = []
        try:
            first = self._wait_first_scan()
            if "_auth_flood" in self.hostile_checks:
                self._start_auth_daemon(log_path)
            before = _usage(self.daemon.pid)
            self.report.rss_before_bytes = before.rss_bytes
            self.report.fds_before = before.fds
            deadline = time.monotonic() + self.duration
            threads.append(threading.Thread(target=self._churn, args=(deadline,)))
            threads += [threading.Thread(target=self._scraper, args=(deadline,))
                        for _ in range(self.scrapers)]
            for t in threads:
                t.start()
            self.stop.wait(min(3.0, self.duration / 4))  # workers up before the clients
            hostile = [threading.Thread(target=self._hostile, args=(getattr(self, c), deadline))
                       for c in self.hostile_checks]
            if self.local_rounds:  # one after another: each starts processes of its own
                hostile.append(threading.Thread(target=self._local_rounds, args=(deadline,)))
            for t in hostile:
                t.start()
            for t in hostile:
                t.join(max(1.0, deadline - time.monotonic()) + 2 * HOSTILE_ROUND_S)
            for t in threads:
                t.join(max(1.0, deadline - time.monotonic() + SCRAPE_TIMEOUT + 5))
            last = 0.0
            with contextlib.suppress(Exception):
                _, body = self._scrape()
                for line in body.splitlines():
                    if line.startswith("numa_exporter_scans_total "):
                        last = float(line.split()[1])
                    if line.startswith("numa_exporter_budget_skipped_processes_total "):
                        self.report.budget_skipped = int(float(line.split()[1]))
            self.report.scans = int(last - first)
            after = _usage(self.daemon.pid)
            self.report.rss_after_bytes = after.rss_bytes
            self.report.fds_after = after.fds
            self.report.threads_after = after.threads
            self.report.cpu_seconds = after.cpu_seconds - before.cpu_seconds
            self.report.daemon_alive = self.daemon.poll() is None
        finally:
            self.stop.set()
            for w in list(self.workers):
                if w.proc.poll() is None:
                    self._kill(w)
            self._stop(self.daemon)
            if self.auth_daemon is not None:
                self._stop(self.auth_daemon)
        lat = sorted(self.latencies)
        if lat:
            self.report.scrape_seconds_p50 = lat[len(lat) // 2]
            self.report.scrape_seconds_max = lat[-1]
        self.report.duration_seconds = time.monotonic() - t0
        self.report.hostile.sort(key=lambda h: h.name)
        return self.report


def default_exporter() -> list[str]:
    """Return the command that starts the exporter from this environment."""
    script = shutil.which("numa-exporter", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "numa_exporter"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run a soak and print its table (and JSON); return 0 when it found no failure."""
    p = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of churn (60)")
    p.add_argument("--long-workers", type=int, default=4)
    p.add_argument("--short-workers", type=int, default=4)
    p.add_argument("--worker-mib", type=int, default=24)
    p.add_argument("--scrapers", type=int, default=4)
    p.add_argument("--scan-interval", type=float, default=1.0, help="seconds (1)")
    p.add_argument("--scan-budget", type=float, default=0.0,
                   help="seconds, at most the interval (0: the daemon's default, 2/3 of the "
                        "interval; processes it defers keep their last values)")
    p.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    p.add_argument("--log", type=Path, default=None, help="daemon log (default: a temp file)")
    p.add_argument("--strict-hostile", action="store_true",
                   help="exit 1 when a hostile-client check fails too")
    args = p.parse_args(argv)
    soak = Soak(args.duration, default_exporter(), args.long_workers, args.short_workers,
                args.worker_mib, args.scrapers, scan_interval=args.scan_interval,
                scan_budget=args.scan_budget or None)
    log = args.log or Path(os.environ.get("TMPDIR", "/tmp")) / f"soak-daemon-{os.getpid()}.log"
    report = soak.run(log)
    print(report.table())
    print(f"daemon log: {log}")
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    bad = not report.ok or (args.strict_hostile and not all(h.passed for h in report.hostile))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
