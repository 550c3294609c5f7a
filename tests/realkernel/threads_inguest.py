"""In-guest runner of the thread-binding scenarios (run by test_threads_guest.py in QEMU).

    /usr/bin/python3 threads_inguest.py PLAN.json

One exporter (1 s interval, ``--process.min-resident=64MiB``, every process at full detail)
watches ``rkthreads`` workloads started one after the other, each killed before the next:

* ``grow``: ``rkthreads sparse`` holds 8 MiB of a 264 MiB mapping and sleeps (below the
  minimum); this runner writes 256 MiB into the rest with process_vm_writev and polls until
  the process is served;
* ``taskset``: ``rkthreads sleeper`` (80 MiB, three threads) under ``numactl
  --cpunodebind=0 --membind=0`` sleeps; ``taskset -a -p`` moves every thread to node 1's
  CPUs and this polls until the home names node 1;
* ``cgroup``: the same sleeper, moved into a cgroup v2 group whose ``cpuset.cpus`` are node
  1's: polls until the home names node 1;
* ``latebind``: ``rkthreads latebind`` (two threads created before the main thread bound
  itself to node 0, each 32 MiB bound to node 1; two created after, 48 MiB each on node 0);
* ``cross``: balancing on, ``rkthreads cross`` (a thread on each node reading 40 MiB bound
  to the other); polls until the per-thread fault share is served, then captures.

Per capture it saves the scrape (``NAME.prom``) and, read beside it, the workload's
numa_maps and every thread's ``status``, ``stat`` and ``sched`` (``NAME.kernel/``). A
``changed`` poll records the scan counter when the change was made and when the first scrape
showed it. ``summary.json`` says what happened. Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

MiB = 1 << 20
_SAMPLE = re.compile(r'^(numa_[a-z_]+)\{([^}]*)\} ([0-9.e+-]+|NaN)$', re.M)
_LABEL = re.compile(r'([a-z_]+)="([^"]*)"')


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def samples(text: str, name: str, pid: int) -> list[tuple[dict[str, str], float]]:
    """Return (labels, value) of family ``name`` for ``pid`` in an exposition."""
    got = []
    for n, labels, value in _SAMPLE.findall(text):
        lab = dict(_LABEL.findall(labels))
        if n == name and lab.get("pid") == str(pid):
            got.append((lab, float(value)))
    return got


class Exporter:
    """The exporter under test and its scrapes."""

    def __init__(self, plan: dict[str, Any], out: Path) -> None:
        port = plan["port"]
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.argv = [*plan["exporter"], f"--web.listen-address=127.0.0.1:{port}",
                     "--scan.interval=1s", "--process.min-resident=64MiB",
                     "--process.detail-above=0", "--process.include=^rkthreads",
                     "--log.format=json"]
        with open(out / "exporter.log", "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def scrape(self) -> str | None:
        try:
            with urllib.request.urlopen(self.url, timeout=30) as resp:
                return str(resp.read().decode("utf-8", "replace"))
        except OSError:
            return None

    @staticmethod
    def scans(text: str | None) -> int:
        m = re.search(r"^numa_exporter_scans_total(?:\{\})? ([0-9.e+]+)$", text or "", re.M)
        return int(float(m.group(1))) if m else -1

    def next_scan(self, after: int, timeout: float = 120) -> tuple[int, str]:
        """Return (scans, text) of the first scrape after ``after`` scans completed."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.scrape()
            n = self.scans(text)
            if n > after and text is not None:
                return n, text
            time.sleep(0.1)
        raise RuntimeError(f"no scan after {after} within {timeout} s")

    def now(self) -> int:
        """Return the scans counter now."""
        return self.next_scan(-1)[0]

    def until(self, ok: Callable[[str], bool], max_scans: int, timeout: float
              ) -> tuple[int, str, bool]:
        """Scrape after every scan until ``ok`` holds, at most ``max_scans`` scans or
        ``timeout`` seconds; return (scans, text, whether it held)."""
        n, text = self.next_scan(-1)
        first, end = n, time.monotonic() + timeout
        while not ok(text) and n - first < max_scans and time.monotonic() < end:
            n, text = self.next_scan(n)
        return n, text, ok(text)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=15)


def start(argv: list[str], name: str, out: Path, procs: list[subprocess.Popen[bytes]]
          ) -> dict[str, str]:
    """Start an rkthreads workload; return its ready file's key=values (the ready file is
    the argument under /tmp/rk-thr-)."""
    ready = Path(next(a for a in argv if a.startswith("/tmp/rk-thr-")))
    ready.unlink(missing_ok=True)
    with open(out / f"{name}.out", "wb") as fh:
        procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    end = time.monotonic() + 180
    while not ready.exists() and procs[-1].poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    if not ready.exists():
        raise RuntimeError(f"{name} never became ready (rc={procs[-1].poll()})")
    return dict(line.split("=", 1) for line in ready.read_text().splitlines() if "=" in line)


def kernel_files(pid: int, dest: Path) -> None:
    """Save the process's numa_maps and each thread's status, stat and sched under dest."""
    dest.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        (dest / "numa_maps").write_text(Path(f"/proc/{pid}/numa_maps").read_text())
    for task in Path(f"/proc/{pid}/task").iterdir():
        for f in ("status", "stat", "sched"):
            with contextlib.suppress(OSError):
                (dest / f"{task.name}.{f}").write_text((task / f).read_text())


def capture(exp: Exporter, pid: int, name: str, out: Path, stop: bool = False) -> int:
    """Save a scrape from a scan begun after this call and the kernel's files beside it;
    with ``stop`` the workload is SIGSTOPped meanwhile (its decayed fault counts hold
    still) and the scrape comes from a scan whose previous reading was taken stopped too:
    no CPU time moved between them, so the threads rule counts every thread once (its home
    is the union of the threads' nodes, not the nodes that got CPU time in the last
    interval). Return the scans counter of the scrape."""
    if stop:
        os.kill(pid, signal.SIGSTOP)
    try:
        kernel_files(pid, out / f"{name}.kernel")
        n, text = exp.next_scan(exp.now() + (2 if stop else 1))
        (out / f"{name}.prom").write_text(text)
    finally:
        if stop:
            os.kill(pid, signal.SIGCONT)
    return n


def write_into(pid: int, addr: int, size: int) -> None:
    """Write ``size`` bytes into process ``pid`` at ``addr`` with process_vm_writev."""
    libc = ctypes.CDLL(None, use_errno=True)
    chunk = 16 * MiB
    src = ctypes.create_string_buffer(b"\x5a" * chunk, chunk)
    for off in range(0, size, chunk):
        local = IoVec(ctypes.cast(src, ctypes.c_void_p), chunk)
        remote = IoVec(addr + off, chunk)
        n = libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n != chunk:
            raise OSError(ctypes.get_errno(), "process_vm_writev")


def node_cpus(node: int) -> str:
    """Return node's cpulist."""
    return Path(f"/sys/devices/system/node/node{node}/cpulist").read_text().strip()


def grow(exp: Exporter, plan: dict[str, Any], out: Path, res: dict[str, Any],
         procs: list[subprocess.Popen[bytes]]) -> None:
    """A sleeping process below the minimum, grown by another one."""
    info = start([plan["rkthreads"], "sparse", "/tmp/rk-thr-grow", "8", "264"], "grow", out,
                 procs)
    pid = int(info["pid"])
    res["grow"] = {"pid": pid}
    exp.next_scan(exp.now() + 1)
    res["grow"]["before"] = capture(exp, pid, "grow-before", out)
    at = exp.now()
    write_into(pid, int(info["addr"]), 256 * MiB)
    res["grow"]["written_at"] = at
    res["grow"]["written_done"] = exp.now()
    n, text, ok = exp.until(lambda t: bool(samples(t, "numa_process_info", pid)), 10, 120)
    (out / "grow-shown.prom").write_text(text)
    res["grow"].update(shown=ok, shown_at=n)
    # the bytes: from a scan begun after the write was done (the first scrape to show the
    # process may come from a scan that read it halfway through the write)
    res["grow"]["after"] = capture(exp, pid, "grow-after", out)


def taskset(exp: Exporter, plan: dict[str, Any], out: Path, res: dict[str, Any],
            procs: list[subprocess.Popen[bytes]]) -> None:
    """``taskset -a -p`` on a sleeping process."""
    info = start(["numactl", "--cpunodebind=0", "--membind=0", plan["rkthreads"], "sleeper",
                  "/tmp/rk-thr-taskset", "80", "3"], "taskset", out, procs)
    pid = int(info["pid"])
    res["taskset"] = {"pid": pid, "tids": info["tids"]}
    exp.next_scan(exp.now() + 1)
    res["taskset"]["before"] = capture(exp, pid, "taskset-before", out)
    at = exp.now()
    r = subprocess.run(["taskset", "-a", "-p", "-c", node_cpus(1), str(pid)],
                       capture_output=True, text=True, timeout=60, check=False)
    res["taskset"].update(changed_at=at, taskset_rc=r.returncode,
                          taskset_out=(r.stdout + r.stderr)[-800:])

    def home1(text: str) -> bool:
        return any(lab.get("nodes") == "1"
                   for lab, _ in samples(text, "numa_process_home_nodes_info", pid))

    n, text, ok = exp.until(home1, 10, 120)
    (out / "taskset-after.prom").write_text(text)
    kernel_files(pid, out / "taskset-after.kernel")
    res["taskset"].update(shown=ok, shown_at=n)


def cgroup(exp: Exporter, plan: dict[str, Any], out: Path, res: dict[str, Any],
           procs: list[subprocess.Popen[bytes]]) -> None:
    """A sleeping process moved into a cgroup v2 cpuset of node 1's CPUs."""
    info = start(["numactl", "--cpunodebind=0", "--membind=0", plan["rkthreads"], "sleeper",
                  "/tmp/rk-thr-cgroup", "80", "3"], "cgroup", out, procs)
    pid = int(info["pid"])
    res["cgroup"] = {"pid": pid, "tids": info["tids"]}
    root = Path("/sys/fs/cgroup")
    (root / "cgroup.subtree_control").write_text("+cpuset")
    group = root / "rk-threads"
    group.mkdir(exist_ok=True)
    (group / "cpuset.cpus").write_text(node_cpus(1))
    exp.next_scan(exp.now() + 1)
    res["cgroup"]["before"] = capture(exp, pid, "cgroup-before", out)
    at = exp.now()
    (group / "cgroup.procs").write_text(str(pid))  # every thread of it
    res["cgroup"]["changed_at"] = at

    def home1(text: str) -> bool:
        return any(lab.get("nodes") == "1"
                   for lab, _ in samples(text, "numa_process_home_nodes_info", pid))

    n, text, ok = exp.until(home1, 10, 120)
    (out / "cgroup-after.prom").write_text(text)
    kernel_files(pid, out / "cgroup-after.kernel")
    (out / "cgroup-after.kernel" / "cgroup").write_text(Path(f"/proc/{pid}/cgroup").read_text())
    res["cgroup"].update(shown=ok, shown_at=n)


def latebind(exp: Exporter, plan: dict[str, Any], out: Path, res: dict[str, Any],
             procs: list[subprocess.Popen[bytes]]) -> None:
    """Threads created before the main thread bound itself."""
    info = start([plan["rkthreads"], "latebind", "/tmp/rk-thr-late", "2", "32", "2", "48"],
                 "latebind", out, procs)
    pid = int(info["pid"])
    res["latebind"] = {"pid": pid, "tids": info["tids"], "captures": []}
    exp.next_scan(exp.now() + 1)
    for i in range(3):
        res["latebind"]["captures"].append(capture(exp, pid, f"latebind-{i}", out))


def cross(exp: Exporter, plan: dict[str, Any], out: Path, res: dict[str, Any],
          procs: list[subprocess.Popen[bytes]]) -> None:
    """Threads reading memory bound to the other node, balancing on."""
    # the balancer's scan period is counted in the task's CPU time: scan often, in this
    # test bed only (as test_tiers_guest does), so that hinting faults come within minutes
    d = Path("/sys/kernel/debug/sched/numa_balancing")
    if not d.is_dir():
        subprocess.run(["mount", "-t", "debugfs", "none", "/sys/kernel/debug"], check=False)
    if d.is_dir():
        for f, v in (("scan_delay_ms", "0"), ("scan_period_min_ms", "100"),
                     ("scan_period_max_ms", "400")):
            (d / f).write_text(v)
    Path("/proc/sys/kernel/numa_balancing").write_text("1")
    t0 = time.monotonic()
    info = start([plan["rkthreads"], "cross", "/tmp/rk-thr-cross", "40"], "cross", out, procs)
    pid = int(info["pid"])
    res["cross"] = {"pid": pid, "tids": info["tids"], "captures": [],
                    "numa_balancing_flag": info["numa_balancing_flag"]}

    def faults(text: str) -> bool:
        return (bool(samples(text, "numa_process_thread_fault_remote_ratio", pid))
                and sum(v for _, v in samples(text, "numa_process_hint_faults", pid)) >= 50)

    n, _, ok = exp.until(faults, 10_000, 150)
    res["cross"].update(faults_seen=ok, faults_at=n,
                        faults_after_s=round(time.monotonic() - t0, 1))
    for i in range(3):
        time.sleep(2)
        res["cross"]["captures"].append(capture(exp, pid, f"cross-{i}", out, stop=True))
    Path("/proc/sys/kernel/numa_balancing").write_text("0")
    (out / "vmstat").write_text(Path("/proc/vmstat").read_text())


def main() -> int:
    """Run the plan in argv[1]; return 0 (errors are in summary.json)."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    Path("/proc/sys/kernel/numa_balancing").write_text("0")
    (out / "uname.txt").write_text(os.uname().release)
    res: dict[str, Any] = {"errors": [], "elapsed": {}}
    t0 = time.monotonic()
    exp: Exporter | None = None
    try:
        exp = Exporter(plan, out)
        res["exporter_argv"] = exp.argv
        exp.next_scan(1, timeout=240)
        res["elapsed"]["exporter_ready"] = round(time.monotonic() - t0, 1)
        for step in (grow, taskset, cgroup, latebind, cross):
            procs: list[subprocess.Popen[bytes]] = []
            t = time.monotonic()
            try:
                step(exp, plan, out, res, procs)
            except Exception as exc:
                res["errors"].append(f"{step.__name__}: {type(exc).__name__}: {exc}")
                res.setdefault("traceback", []).append(traceback.format_exc())
            finally:
                for p in procs:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
            res["elapsed"][step.__name__] = round(time.monotonic() - t, 1)
    except Exception as exc:
        res["errors"].append(f"{type(exc).__name__}: {exc}")
        res.setdefault("traceback", []).append(traceback.format_exc())
    finally:
        if exp is not None:
            exp.stop()
        res["elapsed"]["total"] = round(time.monotonic() - t0, 1)
        (out / "summary.json").write_text(json.dumps(res, indent=1))
    print(f"== threads: {res['elapsed']} errors={res['errors']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
