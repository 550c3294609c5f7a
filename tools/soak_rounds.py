"""Hostile rounds of the soak that a local user (not a network client) can play (issue 15).

Each round is a function of the running :class:`tools.soak.Soak` that returns a
``HostileCheck``; the soak runs it in rounds until its end, like the client checks, and
reports the worst. Every round bounds its own time and cleans up what it started.

* ``log_write_failure`` - a second daemon logs to a pipe whose reader exits: it must keep
  scanning, count the lost lines and exit 0 on SIGTERM;
* ``signal_storm`` - 300 SIGHUPs ~1 ms apart and the signals without a handler (SIGUSR1,
  SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGPWR) to the soak's daemon: it must stay
  alive, answer and keep scanning;
* ``colliding_cgroups`` - workers in cgroups named ``soak-rt\\x01dup``, ``\\x02``, ``\\x7f``
  (names that cleaning once merged): three distinct label values, and the OpenMetrics scrape
  parses;
* ``zombie_leader`` - a C program whose main thread calls pthread_exit(): exported with its
  memory;
* ``renaming_process`` - a worker renaming itself every 100 ms: only numa_process_info
  carries its name, one sample per scrape;
* ``rootfs_special_files`` - a second daemon on the ``kubernetes`` fixture root whose CPU
  Manager checkpoint and a container's ``config.json`` are FIFOs and whose Memory Manager
  checkpoint links to ``/dev/zero`` (issue 23 #4): it must keep scanning, count the refused
  files, name the pod from its log directory and exit 0 on SIGTERM;
* ``checkpoint_churn`` - a second daemon on the same root whose 4 MiB device checkpoint is
  replaced every second (issue 23 #5): it must keep scanning and export the device
  assignments; its CPU per scan is reported;
* ``exec_in_place`` - a program that grows, then exec()s a smaller one under the same pid
  and start time (issue 23): the new program's arrived-bytes counters start from zero (the
  soak's counter check leaves its pid out: its counters restart, as a new program's do);
* ``damon_foreign_run_dir`` - --collector.damon with a run directory another user owns:
  refused, counted, nothing written;
* ``damon_restarting_target`` - --collector.damon (the fake kernel's DAMON sysfs in the
  exporter's process) whose watched process exits and is replaced, three times:
  ``damon_up`` stays 1 and each new process is watched within a few seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as om_families,
)
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from tools.soak import Soak
    from tools.soak_clients import HostileCheck

IGNORED_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU",
                   "SIGPWR")
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
CGROUP_NAMES = (b"soak-rt\x01dup", b"soak-rt\x02dup", b"soak-rt\x7fdup")

# Moves itself into the cgroup folder given (hex) as its 5th argument, then runs WORKER.
CGROUP_PREFIX = r"""
import os, sys
with open(bytes.fromhex(sys.argv[5]) + b"/cgroup.procs", "w") as f:
    f.write(str(os.getpid()))
"""

RENAMER = r"""
import ctypes, mmap, sys, time
libc = ctypes.CDLL(None)
libc.prctl(1, 9, 0, 0, 0)                        # PR_SET_PDEATHSIG
m = mmap.mmap(-1, int(sys.argv[1]) << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, len(m), 4096):
    m[i] = 1
libc.prctl(15, b"soak-rn", 0, 0, 0)
print("ready", flush=True)
n = 0
while True:
    libc.prctl(15, ctypes.c_char_p(b"soak-rn%d" % (n % 100000)), 0, 0, 0)   # PR_SET_NAME
    n += 1
    time.sleep(0.1)
"""

ZOMBIE_LEADER_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>
static size_t mib;
static void *worker(void *arg) {
    (void)arg;
    size_t n = mib << 20;
    volatile char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(1);
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
    return NULL;
}
int main(int argc, char **argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 32;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL)) return 1;
    pthread_exit(NULL);
}
"""


def _check(name: str, passed: bool, detail: str) -> HostileCheck:
    from tools.soak_clients import HostileCheck

    return HostileCheck(name, passed, detail)


def _scan_count(soak: Soak, url: str | None = None) -> float:
    """Return numa_exporter_scans_total of one scrape (-1 when the scrape fails)."""
    try:
        with urllib.request.urlopen(url or soak.url, timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return -1.0
    for line in body.splitlines():
        if line.startswith("numa_exporter_scans_total "):
            return float(line.split()[1])
    return -1.0


def _wait_scans(soak: Soak, n: float, timeout: float, url: str | None = None) -> float:
    """Return the scan count once it reaches ``n`` (the last one seen at the time-out)."""
    end = time.monotonic() + timeout
    got = _scan_count(soak, url)
    while got < n and time.monotonic() < end and not soak.stop.is_set():
        time.sleep(0.2)
        got = _scan_count(soak, url)
    return got


def _samples(body: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            yield s.name, s.labels, s.value


@contextlib.contextmanager
def _started(cmd: list[str], **kw: object) -> Iterator[subprocess.Popen[bytes]]:
    kw.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen(cmd, **kw)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def _ready(proc: subprocess.Popen[bytes]) -> bool:
    assert proc.stdout is not None
    return proc.stdout.readline().strip() == b"ready"


def log_write_failure(soak: Soak) -> HostileCheck:
    """A daemon whose log pipe's reader exits keeps scanning and exits 0 on SIGTERM."""
    from tools.soak import HOST, WORKER_PREFIX, _free_port

    port = _free_port()
    url = f"http://{HOST}:{port}/metrics"
    r, w = os.pipe()
    cmd = [*soak.exporter, f"--web.listen-address={HOST}:{port}", "--path.procfs=/proc",
           "--scan.interval=500ms", f"--process.include=^{WORKER_PREFIX}",
           "--process.min-resident=16MiB", "--no-collector.accelerator", "--log.level=debug"]
    try:
        proc = subprocess.Popen(cmd, stdout=w, stderr=w, stdin=subprocess.DEVNULL)
    finally:
        os.close(w)
    lost = 0.0
    try:
        with os.fdopen(r, "rb") as reader:
            for _ in range(3):  # `| head -n 3`
                reader.readline()
        before = _wait_scans(soak, 1, 20, url)
        after = _wait_scans(soak, before + 4, 20, url)
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
            for name, labels, v in _samples(resp.read().decode()):
                if name == "numa_exporter_log_write_errors_total" and labels.get(
                        "reason") == "write":
                    lost = v
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    passed = before >= 1 and after >= before + 4 and lost > 0 and rc == 0
    return _check("log_write_failure", passed,
                  f"reader gone after 3 lines: scans {before:.0f} -> {after:.0f}, "
                  f"{lost:.0f} lines lost and counted, SIGTERM exit {rc}")


def signal_storm(soak: Soak, sighups: int = 300) -> HostileCheck:
    """SIGHUPs ~1 ms apart and the signals without a handler leave the daemon serving."""
    daemon = soak.daemon
    if daemon is None or daemon.poll() is not None:
        return _check("signal_storm", False, "daemon not running")
    before = _scan_count(soak)
    sent = 0
    with contextlib.suppress(ProcessLookupError):
        for _ in range(sighups):
            os.kill(daemon.pid, signal.SIGHUP)
            sent += 1
            time.sleep(0.001)
        for name in IGNORED_SIGNALS:
            os.kill(daemon.pid, getattr(signal, name))
            sent += 1
    alive = daemon.poll() is None
    after = _wait_scans(soak, before + 2, 15) if alive else -1.0
    passed = alive and before >= 0 and after >= before + 2
    return _check("signal_storm", passed,
                  f"{sent} signals ({sighups} SIGHUP ~1 ms apart, then "
                  f"{', '.join(IGNORED_SIGNALS)}): daemon {'alive' if alive else 'DIED'}, "
                  f"scans {before:.0f} -> {after:.0f}")


def _own_memory_cgroup() -> Path | None:
    """Return the folder of this process's memory cgroup (v2, else v1), or None."""
    lines = Path("/proc/self/cgroup").read_bytes().splitlines()
    base = Path("/sys/fs/cgroup")
    for line in lines:
        _hid, _, rest = line.partition(b":")
        ctrls, _, path = rest.partition(b":")
        if b"memory" in ctrls.split(b",") and (base / "memory").is_dir():
            return Path(os.fsdecode(os.fsencode(base / "memory") + path))
    for line in lines:
        if line.startswith(b"0::"):
            root = base if (base / "cgroup.controllers").exists() else base / "unified"
            d = Path(os.fsdecode(os.fsencode(root) + line[3:]))
            if (d / "memory.numa_stat").exists() or (root / "cgroup.controllers").exists():
                return d
    return None


def colliding_cgroups(soak: Soak) -> HostileCheck:
    """Workers in cgroups whose names cleaning once merged get distinct label values."""
    from tools.soak import WORKER

    parent = _own_memory_cgroup()
    made: list[Path] = []
    try:
        if parent is None:
            raise OSError("no memory cgroup found")
        for name in CGROUP_NAMES:
            d = Path(os.fsdecode(os.fsencode(parent) + b"/" + name))
            d.mkdir(exist_ok=True)
            made.append(d)
    except OSError as exc:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        return _check("colliding_cgroups", True, f"not run: cannot create cgroups ({exc})")
    procs: list[subprocess.Popen[bytes]] = []
    distinct, parsed, detail = 0, False, ""
    try:
        for i, d in enumerate(made):
            procs.append(subprocess.Popen(
                [sys.executable, "-c", CGROUP_PREFIX + WORKER, f"soak-cg{i}", "24", "1",
                 str(soak.duration + 30), os.fsencode(d).hex()],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL))
        if not all(_ready(p) for p in procs):
            return _check("colliding_cgroups", False, "a worker did not start")
        end = time.monotonic() + 20  # until all three are read (a busy scan defers some)
        while time.monotonic() < end and not soak.stop.is_set():
            req = urllib.request.Request(soak.url, headers={"Accept": OPENMETRICS})
            with urllib.request.urlopen(req, timeout=10) as resp:
                body = resp.read().decode("utf-8")
            try:
                fams = list(om_families(body))  # "Invalid metric grouping" on merged labels
                parsed, detail = True, ""
            except ValueError as exc:
                fams, parsed, detail = [], False, f"; OpenMetrics parse failed: {exc}"
            values = {s.labels["cgroup"] for f in fams
                      if f.name == "numa_cgroup_memory_bytes" for s in f.samples
                      if "soak-rt" in s.labels.get("cgroup", "")}
            distinct = len(values)
            if distinct >= len(CGROUP_NAMES) or not parsed:
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            with contextlib.suppress(OSError):
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
        for d in made:
            for _ in range(20):  # v1 lets a cgroup go once its last task has exited
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    passed = parsed and distinct == len(CGROUP_NAMES)
    return _check("colliding_cgroups", passed,
                  f"{len(CGROUP_NAMES)} cgroups named alike after cleaning: {distinct} "
                  f"distinct cgroup labels; OpenMetrics scrape "
                  f"{'parsed' if parsed else 'rejected'}{detail}")


def _zombie_leader_exe(soak: Soak) -> Path | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    exe: Path | None = getattr(soak, "_zombie_exe", None)
    if exe is not None and exe.exists():
        return exe
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"soak-zl-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    (tmp / "zl.c").write_text(ZOMBIE_LEADER_C)
    exe = tmp / "soak-zombie"  # the file name is its comm: selected by ^soak-
    subprocess.run([gcc, "-O2", "-pthread", "-o", str(exe), str(tmp / "zl.c")], check=True,
                   capture_output=True)
    soak._zombie_exe = exe  # type: ignore[attr-defined]
    return exe


def _pid_bytes(soak: Soak, pid: int) -> float:
    try:
        with urllib.request.urlopen(soak.url, timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return -1.0
    # local + remote: served for every process (the per-node breakdown only above
    # --process.detail-above)
    return sum(v for n, lab, v in _samples(body)
               if n in ("numa_process_local_memory_bytes", "numa_process_remote_memory_bytes")
               and lab.get("pid") == str(pid))


def zombie_leader(soak: Soak, mib: int = 32) -> HostileCheck:
    """A process whose main thread called pthread_exit() is exported with its memory."""
    exe = _zombie_leader_exe(soak)
    if exe is None:
        return _check("zombie_leader", True, "not run: gcc not found")
    with _started([str(exe), str(mib)], stdout=subprocess.PIPE) as proc:
        if not _ready(proc):
            return _check("zombie_leader", False, "the program did not start")
        status = Path(f"/proc/{proc.pid}/status")
        end = time.monotonic() + 5
        while b"Z (zombie)" not in status.read_bytes() and time.monotonic() < end:
            time.sleep(0.02)
        zombie = b"Z (zombie)" in status.read_bytes()
        got = -1.0
        end = time.monotonic() + 15
        while time.monotonic() < end and not soak.stop.is_set():
            got = _pid_bytes(soak, proc.pid)
            if got >= mib << 20:
                break
            time.sleep(0.3)
    passed = zombie and got >= mib << 20
    return _check("zombie_leader", passed,
                  f"leader {'a zombie' if zombie else 'NOT a zombie'}, "
                  f"{max(got, 0) / 2**20:.1f} MiB of {mib} MiB exported")


def renaming_process(soak: Soak, scrapes: int = 6) -> HostileCheck:
    """A process renaming itself every 100 ms: only numa_process_info names it."""
    with _started([sys.executable, "-c", RENAMER, "24"], stdout=subprocess.PIPE) as proc:
        if not _ready(proc):
            return _check("renaming_process", False, "the renamer did not start")
        pid = str(proc.pid)
        names: set[str] = set()
        with_comm: set[str] = set()
        series: set[int] = set()
        bad_info = seen = 0
        end = time.monotonic() + 20
        while seen < scrapes and time.monotonic() < end and not soak.stop.is_set():
            try:
                with urllib.request.urlopen(soak.url, timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                continue
            mine = [(n, lab) for n, lab, _ in _samples(body) if lab.get("pid") == pid]
            if not mine:
                time.sleep(0.3)
                continue
            seen += 1
            info = [lab["comm"] for n, lab in mine if n == "numa_process_info"]
            bad_info += len(info) != 1
            names.update(info)
            with_comm |= {n for n, lab in mine if "comm" in lab and n != "numa_process_info"}
            series.add(len(mine))
            time.sleep(0.4)
    passed = (seen == scrapes and not bad_info and not with_comm and len(names) >= 2
              and len(series) == 1)
    return _check("renaming_process", passed,
                  f"{seen} scrapes, {len(names)} names seen, series of its pid per scrape "
                  f"{sorted(series)}, other families with comm: {sorted(with_comm) or 'none'}"
                  + (f", {bad_info} scrapes without exactly one numa_process_info"
                     if bad_info else ""))


KUBE_ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "roots" / "kubernetes"
KUBE_SPEC = ("run/containerd/io.containerd.runtime.v2.task/k8s.io/" + "c0a1" * 16
             + "/config.json")


@contextlib.contextmanager
def _kube_daemon(soak: Soak, rootfs: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run a daemon on the kubernetes fixture root with ``rootfs``; yield it and its URL.
    SIGTERM at the end (killed after 15 s)."""
    from tools.soak import HOST, _free_port

    port = _free_port()
    cmd = [*soak.exporter, f"--web.listen-address={HOST}:{port}",
           f"--path.procfs={KUBE_ROOT / 'proc'}", f"--path.sysfs={KUBE_ROOT / 'sys'}",
           f"--path.rootfs={rootfs}", "--process.min-resident=0", "--scan.interval=1s",
           "--no-collector.accelerator"]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        yield proc, f"http://{HOST}:{port}/metrics"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Return every sample of one scrape by (name, sorted labels); {} when it fails."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return {}
    return {(n, tuple(sorted(lab.items()))): v for n, lab, v in _samples(body)}


def rootfs_special_files(soak: Soak) -> HostileCheck:
    """FIFOs and a device link where the kubelet's and the runtime's files belong: the
    daemon keeps scanning, counts each, names the pod, exits 0 on SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="soak-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        shutil.copytree(KUBE_ROOT / "rootfs", rootfs)
        kubelet = rootfs / "var" / "lib" / "kubelet"
        for fifo in (kubelet / "cpu_manager_state", rootfs / KUBE_SPEC):
            fifo.unlink()
            os.mkfifo(fifo)
        (kubelet / "memory_manager_state").unlink()
        os.symlink("/dev/zero", kubelet / "memory_manager_state")
        (rootfs / "dev").mkdir()
        with contextlib.suppress(OSError):  # without CAP_MKNOD the link dangles (absent)
            os.mknod(rootfs / "dev" / "zero", 0o20666, os.makedev(1, 5))
        with _kube_daemon(soak, rootfs) as (proc, url):
            before = _wait_scans(soak, 2, 30, url)
            after = _wait_scans(soak, before + 3, 30, url)
            got = _scrape(url)
        rc = proc.returncode
    refused = {dict(k[1]).get("source", ""): v for k, v in got.items()
               if k[0] == "numa_exporter_read_errors_total"}
    named = any(k[0] == "numa_process_kubernetes_info" and ("pod", "gpu-infer-0") in k[1]
                and ("pid", "600") in k[1] for k in got)
    passed = (before >= 2 and after >= before + 3 and rc == 0 and named
              and refused.get("cpu_manager_state", 0) >= after - 1
              and refused.get("containerd_spec", 0) >= 1)
    return _check("rootfs_special_files", passed,
                  f"scans {before:.0f} -> {after:.0f}, refused and counted "
                  f"{ {k: v for k, v in refused.items() if v} }, pod named from its log "
                  f"directory: {named}, SIGTERM exit {rc}")


def checkpoint_churn(soak: Soak, seconds: float = 10.0) -> HostileCheck:
    """A 4 MiB device checkpoint replaced every second: scans go on, the assignments stay
    exported; the daemon's CPU per scan is reported (issue 23 asks at most 0.25 s)."""
    import psutil
    from benchmarks.kubelet_churn import CHECKPOINT, Churn, device_checkpoint

    versions = [device_checkpoint(1), device_checkpoint(2)]
    with tempfile.TemporaryDirectory(prefix="soak-churn-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        shutil.copytree(KUBE_ROOT / "rootfs", rootfs)
        (rootfs / CHECKPOINT).write_bytes(versions[0])
        churn = Churn(rootfs / CHECKPOINT, versions)
        try:
            with _kube_daemon(soak, rootfs) as (proc, url):
                before = _wait_scans(soak, 2, 30, url)
                cpu0 = sum(psutil.Process(proc.pid).cpu_times()[:2])
                end = time.monotonic() + seconds
                while time.monotonic() < end and not soak.stop.is_set():
                    time.sleep(0.2)
                cpu1 = sum(psutil.Process(proc.pid).cpu_times()[:2])
                after = _scan_count(soak, url)
                got = _scrape(url)
        finally:
            churn.stop()
    gpus = sum(1 for k in got if k[0] == "numa_kubernetes_container_assigned_nodes_info"
               and ("resource", "nvidia.com/gpu") in k[1])
    late = sum(v for k, v in got.items() if k[0] == "numa_exporter_parse_errors_total"
               and ("source", "kubelet_internal_checkpoint") in k[1])
    scans = max(after - before, 0.0)
    per_scan = (cpu1 - cpu0) / scans if scans else float("nan")
    passed = scans >= 3 and gpus == 2
    return _check("checkpoint_churn", passed,
                  f"{len(versions[0])} B checkpoint replaced {churn.writes} times: scans "
                  f"{before:.0f} -> {after:.0f}, {per_scan * 1e3:.0f} ms CPU per scan, "
                  f"GPU assignments exported {gpus}, not verified in time {late:.0f}")


EXEC_SECOND = r"""
import sys, time
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])  # exec() named it after the interpreter: selected by ^soak-
buf = b"\x02" * (24 << 20)
print("ready", flush=True)
time.sleep(60)
"""

EXEC_FIRST = r"""
import os, sys
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])  # selected by ^soak-
buf = [b"\x01" * (32 << 20)]
print("ready", flush=True)
sys.stdin.readline()
buf.append(b"\x01" * (48 << 20))  # grows, then holds still: it warms up
print("grown", flush=True)
sys.stdin.readline()
os.execv(sys.executable, [sys.executable, "-c", SECOND, sys.argv[1]])
"""


def _pid_counter(url: str, pid: int, *names: str) -> float:
    """Return the sum of ``names`` over the pid's series in one scrape (-1: it failed)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return -1.0
    return sum(v for n, lab, v in _samples(body) if n in names and lab.get("pid") == str(pid))


def _until(soak: Soak, test: Callable[[], bool], timeout: float) -> bool:
    """Return whether ``test`` held before ``timeout`` seconds (polled)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and not soak.stop.is_set():
        if test():
            return True
        time.sleep(0.2)
    return False


@contextlib.contextmanager
def _detail_daemon(soak: Soak, include: str, *flags: str) -> Iterator[str]:
    """Run a second daemon that serves every process in full (the per-node counters are
    left out below ``--process.detail-above`` otherwise); yield its URL. SIGTERM at the end
    (killed after 15 s)."""
    from tools.soak import HOST, _free_port

    port = _free_port()
    cmd = [*soak.exporter, f"--web.listen-address={HOST}:{port}", "--path.procfs=/proc",
           "--scan.interval=500ms", f"--process.include={include}",
           "--process.min-resident=16MiB", "--process.detail-above=0",
           "--no-collector.accelerator", *flags]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        yield f"http://{HOST}:{port}/metrics"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pid_has(url: str, pid: int, name: str) -> bool | None:
    """Return whether one scrape has a ``name`` series of the pid (None: it failed)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return None
    return any(n == name and lab.get("pid") == str(pid) for n, lab, _ in _samples(body))


def exec_in_place(soak: Soak) -> HostileCheck:
    """A program that warms up (a drift baseline), then exec()s a smaller one in place (same
    pid and start time): the new program has no baseline until its own warm-up, which
    counts from its first read (5 s here), instead of inheriting the old program's."""
    code = EXEC_FIRST.replace("SECOND", repr(EXEC_SECOND))
    baseline = "numa_process_baseline_remote_memory_ratio"
    placed = ("numa_process_local_memory_bytes", "numa_process_remote_memory_bytes")
    with _detail_daemon(soak, "^soak-exec$", "--drift.warmup-age=5s",
                        "--drift.warmup-scans=2") as url, \
            _started([sys.executable, "-c", code, "soak-exec"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        if not _ready(proc):
            return _check("exec_in_place", False, "the program did not start")
        pid = proc.pid
        # its counters restart at the exec, as a new program's: not a counter going back
        soak.restarting_pids.add(str(pid))
        if not _until(soak, lambda: _pid_counter(url, pid, *placed) >= 30 << 20, 20):
            return _check("exec_in_place", False, "the first program was never exported")
        proc.stdin.write(b"grow\n")
        proc.stdin.flush()
        proc.stdout.readline()
        if not _until(soak, lambda: _pid_has(url, pid, baseline) is True, 30):
            return _check("exec_in_place", False, "the first program never warmed up")
        proc.stdin.write(b"exec\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != b"ready":
            return _check("exec_in_place", False, "the second program did not start")
        small = _until(soak, lambda: 0 < _pid_counter(url, pid, *placed) <= 40 << 20, 15)
        # the first scrapes of the new program, well inside its 5 s warm-up
        kept = _pid_has(url, pid, baseline)
    passed = small and kept is False
    return _check("exec_in_place", passed,
                  f"the new program {'seen' if small else 'NOT seen'}; the old program's "
                  f"drift baseline {'kept' if kept else 'gone' if kept is False else '?'}")


def damon_foreign_run_dir(soak: Soak) -> HostileCheck:
    """--collector.damon with a run directory another user owns (a shared hostPath): DAMON
    stays off (reason run_dir, counted), nothing is written to the DAMON sysfs (a fake tree
    under --path.sysfs, never the host's) nor to the directory, scans go on, SIGTERM exits
    0. Needs root (the exporter's kdamonds do, and chown)."""
    from tools.soak import HOST, _free_port

    if os.geteuid() != 0:
        return _check("damon_foreign_run_dir", True, "skipped: not root")
    with tempfile.TemporaryDirectory(prefix="soak-damon-") as tmp:
        sysfs = Path(tmp) / "sys"
        shutil.copytree(KUBE_ROOT / "sys", sysfs)
        kd = sysfs / "kernel" / "mm" / "damon" / "admin" / "kdamonds"
        kd.mkdir(parents=True)
        (kd / "nr_kdamonds").write_text("0\n")
        run = Path(tmp) / "run"
        run.mkdir(mode=0o700)
        os.chown(run, 65534, 65534)  # nobody's
        port = _free_port()
        url = f"http://{HOST}:{port}/metrics"
        cmd = [*soak.exporter, f"--web.listen-address={HOST}:{port}",
               f"--path.procfs={KUBE_ROOT / 'proc'}", f"--path.sysfs={sysfs}",
               f"--path.rootfs={KUBE_ROOT / 'rootfs'}", "--process.min-resident=0",
               "--scan.interval=1s", "--no-collector.accelerator", "--collector.damon",
               f"--collector.damon.run-dir={run}"]
        with _started(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
            before = _wait_scans(soak, 2, 30, url)
            after = _wait_scans(soak, before + 3, 30, url)
            got = _scrape(url)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(15)
        untouched = ((kd / "nr_kdamonds").read_text() == "0\n"
                     and sorted(p.name for p in kd.iterdir()) == ["nr_kdamonds"]
                     and not any(run.iterdir()))
    up = got.get(("numa_exporter_damon_up", ()), -1)
    refused = got.get(("numa_exporter_damon_unavailable_total", (("reason", "run_dir"),)), 0)
    passed = (before >= 2 and after >= before + 3 and rc == 0 and up == 0 and refused >= 1
              and untouched)
    return _check("damon_foreign_run_dir", passed,
                  f"scans {before:.0f} -> {after:.0f}, damon_up {up:.0f}, run_dir refusals "
                  f"{refused:.0f}, DAMON sysfs and run dir untouched: {untouched}, SIGTERM "
                  f"exit {rc}")


DAMON_TARGET = r"""
import ctypes, mmap, sys, time
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])  # selected by the daemon's --process.include
m = mmap.mmap(-1, 48 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, len(m), 4096):
    m[i] = 1
print("ready", flush=True)
time.sleep(120)
"""
DAMON_RESTARTS = 3
# a restarted target is watched within this: the worker (1 s rounds) finds the exit, the
# next scan (3 s: slower than the worker, so that the exit is met in a region update, not
# first seen as a process the scan no longer names) names the new process
DAMON_REPLACED_S = 10.0


def _damon_view(url: str) -> tuple[float, set[str], float]:
    """Return numa_exporter_damon_up (-1: the scrape failed), the pids with hot memory and
    the target_exited events of one scrape."""
    try:
        got = _scrape(url)
    except OSError:
        return -1.0, set(), 0.0
    pids = {dict(k[1]).get("pid", "") for k in got if k[0] == "numa_process_hot_memory_bytes"}
    return (got.get(("numa_exporter_damon_up", ()), -1.0), pids,
            got.get(("numa_exporter_damon_events_total", (("event", "target_exited"),)), 0.0))


def damon_restarting_target(soak: Soak) -> HostileCheck:
    """--collector.damon whose watched process, the largest selected, exits and is replaced
    by a new one, DAMON_RESTARTS times, against the fake kernel's DAMON sysfs (in the
    exporter's process: tools/soak_damon_kernel.py; never the host's): damon_up stays 1 in
    every scrape, and each new process has hot memory (and is the kdamond's target) within
    DAMON_REPLACED_S of the old one's exit. Needs root (the exporter's kdamonds do)."""
    from tools.soak import HOST, _free_port

    name = "damon_restarting_target"
    if os.geteuid() != 0:
        return _check(name, True, "skipped: not root")
    repo = Path(__file__).resolve().parents[1]
    waits: list[float] = []
    downs = 0
    with tempfile.TemporaryDirectory(prefix="soak-damon-") as tmp:
        sysfs = Path(tmp) / "sys"
        shutil.copytree(KUBE_ROOT / "sys", sysfs)
        target = sysfs / "kernel/mm/damon/admin/kdamonds/0/contexts/0/targets/0/pid_target"
        run = Path(tmp) / "run"
        run.mkdir(mode=0o700)
        port = _free_port()
        url = f"http://{HOST}:{port}/metrics"
        cmd = [sys.executable, "-m", "tools.soak_damon_kernel", str(sysfs),
               f"--web.listen-address={HOST}:{port}", "--path.procfs=/proc",
               f"--path.sysfs={sysfs}", "--scan.interval=3s",
               "--process.include=^soak-damon-t$", "--process.min-resident=16MiB",
               "--process.detail-above=0", "--no-collector.accelerator", "--collector.damon",
               f"--collector.damon.run-dir={run}"]
        with contextlib.ExitStack() as stack:
            proc = stack.enter_context(_started(cmd, cwd=repo, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))
            old = stack.enter_context(_started(
                [sys.executable, "-c", DAMON_TARGET, "soak-damon-t"], stdout=subprocess.PIPE))
            if not _ready(old):
                return _check(name, False, "the first target did not start")
            if not _until(soak, lambda: str(old.pid) in _damon_view(url)[1], 30):
                return _check(name, False, f"the first target was never watched "
                              f"(damon_up {_damon_view(url)[0]:.0f})")
            for _ in range(DAMON_RESTARTS):
                old.kill()
                old.wait(5)
                t0 = time.monotonic()
                new = stack.enter_context(_started(
                    [sys.executable, "-c", DAMON_TARGET, "soak-damon-t"],
                    stdout=subprocess.PIPE))
                if not _ready(new):
                    return _check(name, False, "a new target did not start")
                seen = False
                while time.monotonic() - t0 < DAMON_REPLACED_S and not soak.stop.is_set():
                    up, pids, exited = _damon_view(url)
                    downs += up != 1
                    if str(new.pid) in pids and target.read_text().strip() == str(new.pid):
                        seen = True
                        break
                    time.sleep(0.2)
                if not seen:
                    break
                waits.append(time.monotonic() - t0)
                old = new
            up, _, exited = _damon_view(url)
            downs += up != 1
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(15)
    passed = len(waits) == DAMON_RESTARTS and downs == 0 and rc == 0
    return _check(name, passed,
                  f"{len(waits)} of {DAMON_RESTARTS} restarted targets watched within "
                  f"{DAMON_REPLACED_S:.0f} s (after {', '.join(f'{w:.1f}' for w in waits)} s), "
                  f"scrapes with damon_up != 1: {downs}, exits met in a region update "
                  f"(target_exited) {exited:.0f}, "
                  f"SIGTERM exit {rc}")


ROUNDS: dict[str, Callable[[Soak], HostileCheck]] = {
    "log_write_failure": log_write_failure,
    "signal_storm": signal_storm,
    "colliding_cgroups": colliding_cgroups,
    "zombie_leader": zombie_leader,
    "renaming_process": renaming_process,
    "rootfs_special_files": rootfs_special_files,
    "checkpoint_churn": checkpoint_churn,
    "exec_in_place": exec_in_place,
    "damon_foreign_run_dir": damon_foreign_run_dir,
    "damon_restarting_target": damon_restarting_target,
}
