"""In-guest runner: set up each scenario, run the exporter against it, save what both saw.

Run inside the real-kernel guest (in the chroot of the host root) as
``python3 inguest.py PLAN.json``. For every scenario named in the plan it writes a folder
``<out>/<scenario>/`` holding:

* ``summary.json``      - pids, tids, timings, exporter exit status, errors;
* ``workload.out``, ``exporter.log`` (stderr, JSON lines), ``exporter.out``;
* ``scrape-NN.txt``     - /metrics as scraped (one for static scenarios, several for balancing),
  with ``scrape-NN.json`` giving the time and guest state (numa_balancing) of that scrape;
* ``kernel-NN/``        - the guest kernel's own view next to scrape NN: ``numa_maps``,
  ``numastat_p.txt``, ``status``, ``sched``, ``smaps_rollup``, ``vmstat``, task stat files;
* ``root/`` (when ``capture_roots``) - a complete procfs/sysfs root for fixtures.

Standard library only; never raises for one scenario's failure (it lands in summary.json).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenarios import BY_NAME, CGROUP_NAME, WORKLOAD_REGEX, Scenario

CG_ROOT = Path("/sys/fs/cgroup")
NODE_SYS = Path("/sys/devices/system/node")


def write(path: Path, data: str | bytes) -> None:
    """Write text or bytes to ``path``, creating parents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)


def read(path: str | Path) -> bytes | None:
    """Return the bytes of a (proc/sys) file, or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def sysctl(path: str, value: str) -> None:
    """Write ``value`` to a /proc/sys or /sys file (raises on failure)."""
    with open(path, "w") as fh:
        fh.write(value)


def sh(cmd: list[str], timeout: float = 30) -> str:
    """Return the combined output of ``cmd`` (never raises; errors become text)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return p.stdout + (f"\n[stderr]\n{p.stderr}" if p.stderr else "")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"[error] {exc}\n"


def node_cpulist(node: int) -> str:
    """Return node ``node``'s cpulist as the kernel prints it (stripped)."""
    return (NODE_SYS / f"node{node}" / "cpulist").read_text().strip()


def wait_for(pred: Any, timeout: float, interval: float = 0.2) -> bool:
    """Poll ``pred()`` until true or ``timeout`` seconds; return whether it became true."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def parse_kv(text: str) -> dict[str, str]:
    """Return the key=value lines of a ready file as a dict."""
    out = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


# ----------------------------------------------------------------------------------------


def capture_kernel(pid: int, dest: Path, tids: list[int], cgroup: str | None = None) -> None:
    """Save the guest kernel's own view of ``pid`` (and global counters) under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("numa_maps", "status", "sched", "stat", "smaps_rollup", "cgroup", "cmdline"):
        data = read(f"/proc/{pid}/{name}")
        if data is not None:
            write(dest / name, data)
    for tid in tids:
        for name in ("stat", "sched", "status"):
            data = read(f"/proc/{pid}/task/{tid}/{name}")
            if data is not None:
                write(dest / "task" / str(tid) / name, data)
    for name in ("vmstat", "sys/kernel/numa_balancing"):
        data = read(f"/proc/{name}")
        if data is not None:
            write(dest / name.replace("/", "_"), data)
    write(dest / "numastat_p.txt", sh(["numastat", "-p", str(pid)]))
    if cgroup:
        for name in ("memory.numa_stat", "memory.stat", "cpuset.mems", "cpuset.mems.effective",
                     "cpuset.cpus.effective"):
            data = read(CG_ROOT / cgroup / name)
            if data is not None:
                write(dest / "cgroupfs" / name, data)


def capture_root(pids: list[int], dest: Path, cgroup: str | None = None) -> None:
    """Copy a complete procfs/sysfs root (what the exporter reads) for ``pids`` to ``dest``."""
    files: list[str] = ["proc/vmstat", "proc/stat", "proc/uptime", "proc/meminfo",
                        "sys/devices/system/node/online", "sys/devices/system/node/possible",
                        "sys/devices/system/node/has_cpu", "sys/devices/system/node/has_memory",
                        "sys/devices/system/node/has_normal_memory",
                        "sys/devices/system/cpu/online", "sys/devices/system/cpu/possible",
                        "sys/kernel/mm/transparent_hugepage/enabled"]
    files += [str(p)[1:] for p in Path("/proc/sys/kernel").glob("numa_balancing*")]
    for node_dir in sorted(NODE_SYS.glob("node[0-9]*")):
        rel = str(node_dir)[1:]
        files += [f"{rel}/{n}" for n in ("cpulist", "cpumap", "distance", "meminfo",
                                         "numastat", "vmstat")]
        for hp in sorted((node_dir / "hugepages").glob("hugepages-*")):
            hrel = str(hp)[1:]
            files += [f"{hrel}/{n}" for n in ("nr_hugepages", "free_hugepages",
                                              "surplus_hugepages")]
    for pid in pids:
        base = f"proc/{pid}"
        files += [f"{base}/{n}" for n in ("numa_maps", "status", "stat", "sched", "comm",
                                          "cmdline", "cgroup", "smaps_rollup")]
        for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
            files += [f"{base}/task/{task.name}/{n}" for n in ("stat", "sched", "status",
                                                               "comm")]
    if cgroup:
        files += [f"sys/fs/cgroup/{cgroup}/{n}" for n in (
            "memory.numa_stat", "memory.stat", "cpuset.mems", "cpuset.mems.effective",
            "cpuset.cpus", "cpuset.cpus.effective", "cgroup.procs")]
    for rel in files:
        data = read("/" + rel)
        if data is not None:
            write(dest / rel, data)
    write(dest / "cmd" / "numastat_p.txt",
          "".join(sh(["numastat", "-p", str(p)]) for p in pids))


# ----------------------------------------------------------------------------------------


class Exporter:
    """One exporter process inside the guest, scraped over 127.0.0.1."""

    def __init__(self, argv: list[str], port: int, out: Path, include: str) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.argv = [*argv, f"--web.listen-address=127.0.0.1:{port}", "--scan.interval=1s",
                     "--scan.budget=1s", "--process.min-resident=0",
                     # every family, per node and kind, for processes of any size: the
                     # tier checks the breakdown against the kernel
                     "--process.detail-above=0",
                     f"--process.include={include}",
                     # exact full reads every scan: this tier checks them against the
                     # kernel (under TCG a walk is ~10x slower than on hardware, which would
                     # send these processes to the sampled reader or a slower cadence);
                     # test_sampled.py checks the sampled reader in the guest on its own
                     "--placement.sample-above=0", "--scan.process-budget=0",
                     # drift: baseline as soon as RSS is stable over 2 scans
                     "--drift.warmup-age=0s", "--drift.warmup-scans=2",
                     "--log.format=json"]
        self.out = out
        self.started = time.monotonic()
        with open(out / "exporter.out", "wb") as so, open(out / "exporter.log", "wb") as se:
            self.proc = subprocess.Popen(self.argv, stdout=so, stderr=se,
                                         start_new_session=True)

    def scrape(self) -> str | None:
        """Return the /metrics text, or None when the exporter does not answer."""
        try:
            with urllib.request.urlopen(self.url, timeout=10) as resp:
                return str(resp.read().decode("utf-8", "replace"))
        except OSError:
            return None

    def scans(self, text: str | None) -> int:
        """Return numa_exporter_scans_total from ``text`` (-1 when absent)."""
        if not text:
            return -1
        m = re.search(r"^numa_exporter_scans_total(?:\{\})? ([0-9.e+]+)$", text, re.M)
        return int(float(m.group(1))) if m else -1

    def wait_scans(self, n: int, timeout: float, pid: int | None = None) -> str | None:
        """Wait until ``n`` more scans completed (and ``pid`` is reported); return the text."""
        base: int | None = None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return None
            text = self.scrape()
            s = self.scans(text)
            if s >= 0:
                if base is None:
                    base = s
                seen = pid is None or (text is not None and f'pid="{pid}"' in text)
                if s >= base + n and seen:
                    return text
            time.sleep(0.25)
        return None

    def stop(self) -> int | None:
        """Stop the exporter (SIGTERM, then SIGKILL); return its exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        return self.proc.returncode


def remote_ratio(text: str | None, pid: int) -> float | None:
    """Return numa_process_remote_memory_ratio for ``pid`` from exposition ``text``."""
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("numa_process_remote_memory_ratio{") and f'pid="{pid}"' in line:
            with contextlib.suppress(ValueError):
                return float(line.rsplit(" ", 1)[1])
    return None


def numa_maps_totals(path: Path) -> dict[int, int]:
    """Return bytes per node summed over a numa_maps file (N<node>=pages x kernelpagesize)."""
    totals: dict[int, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return totals
    for line in text.splitlines():
        m = re.search(r"kernelpagesize_kB=(\d+)", line)
        page = int(m.group(1)) * 1024 if m else 4096
        for node, pages in re.findall(r"\bN(\d+)=(\d+)", line):
            totals[int(node)] = totals.get(int(node), 0) + int(pages) * page
    return totals


def setup(sc: Scenario) -> str | None:
    """Apply the scenario's guest settings; return the cgroup path it uses (or None)."""
    for node, count in sc.hugepages.items():
        path = NODE_SYS / f"node{node}/hugepages/hugepages-2048kB/nr_hugepages"
        sysctl(str(path), str(count))
        got = int(path.read_text())
        if got != count:
            raise RuntimeError(f"node{node} nr_hugepages: wanted {count}, kernel gave {got}")
    if not sc.cgroup:
        return None
    (CG_ROOT / "cgroup.subtree_control").write_text("+cpuset +memory")
    grp = CG_ROOT / CGROUP_NAME
    grp.mkdir(exist_ok=True)
    for key, value in sc.cgroup.items():
        if value.startswith("node:"):
            value = node_cpulist(int(value[5:]))
        (grp / key).write_text(value)
    return str(CGROUP_NAME)


def teardown(sc: Scenario, cgroup: str | None) -> None:
    """Undo :func:`setup` (best effort)."""
    for node in sc.hugepages:
        with contextlib.suppress(OSError):
            sysctl(str(NODE_SYS / f"node{node}/hugepages/hugepages-2048kB/nr_hugepages"), "0")
    if cgroup:
        grp = CG_ROOT / cgroup
        wait_for(lambda: not (grp / "cgroup.procs").read_text().strip(), 5)
        with contextlib.suppress(OSError):
            grp.rmdir()


def run_scenario(sc: Scenario, plan: dict[str, Any], out: Path, index: int) -> dict[str, Any]:
    """Run one scenario end to end; return its summary (also written to summary.json)."""
    if sc.kubelet:
        from kubelet_inguest import run_kubelet_pods

        return run_kubelet_pods(sc, plan, out, index)
    summary: dict[str, Any] = {"scenario": sc.name, "description": sc.description,
                               "errors": [], "scrapes": []}
    t0 = time.monotonic()
    sysctl("/proc/sys/kernel/numa_balancing", "0")
    cgroup = None
    wl: subprocess.Popen[bytes] | None = None
    exp: Exporter | None = None
    try:
        cgroup = setup(sc)
        summary["cgroup"] = cgroup
        ready = Path(f"/tmp/rk-ready-{sc.name}")
        argv = sc.workload_argv(plan["workload"], str(ready))
        summary["workload_argv"] = argv
        procs_file = str(CG_ROOT / cgroup / "cgroup.procs") if cgroup else None

        def join_cgroup() -> None:
            if procs_file:
                with open(procs_file, "w") as fh:
                    fh.write(str(os.getpid()))

        with open(out / "workload.out", "wb") as wout:
            wl = subprocess.Popen(argv, stdout=wout, stderr=subprocess.STDOUT,
                                  start_new_session=True, preexec_fn=join_cgroup)
        if not wait_for(lambda: ready.exists() or wl.poll() is not None, 120):
            raise RuntimeError("workload never became ready")
        if not ready.exists():
            raise RuntimeError(f"workload exited {wl.returncode}: "
                               + (out / "workload.out").read_text(errors="replace")[-2000:])
        info = parse_kv(ready.read_text())
        summary["ready"] = info
        summary["ready_s"] = round(time.monotonic() - t0, 3)
        main_pid = int(info["pid"])
        pid = int(info["child"]) if sc.target == "child" else main_pid
        summary["pid"] = pid
        summary["main_pid"] = main_pid
        all_pids = [main_pid] + ([int(info["child"])] if int(info.get("child", "0")) else [])
        summary["pids"] = all_pids

        def tids_of(p: int) -> list[int]:
            try:
                return sorted(int(t) for t in os.listdir(f"/proc/{p}/task"))
            except OSError:
                return []

        if plan.get("exporter"):
            exp = Exporter(plan["exporter"], plan["port"] + index, out,
                           plan.get("include") or WORKLOAD_REGEX)
            first = exp.wait_scans(1, 90, pid=pid)
            summary["exporter_first_scan_s"] = round(time.monotonic() - exp.started, 3)
            if first is None:
                raise RuntimeError("exporter never reported the workload (see exporter.log)")

        def record(i: int, note: str) -> None:
            """Capture kernel view, scrape after a fresh scan, capture again."""
            capture_kernel(pid, out / f"kernel-{i:02d}", tids_of(pid), cgroup)
            text = None
            if exp is not None:
                # A scan that starts after the first capture: two completions for
                # moving placements (the first may have begun before), one when static.
                text = exp.wait_scans(1 if sc.phase == "static" else 2, 30, pid=pid)
                write(out / f"scrape-{i:02d}.txt", text or "")
            capture_kernel(pid, out / f"kernel-{i:02d}-after", tids_of(pid), cgroup)
            meta = {"index": i, "t": round(time.monotonic() - t0, 3), "note": note,
                    "numa_balancing": (read("/proc/sys/kernel/numa_balancing") or b"").decode()
                    .strip(), "ratio": remote_ratio(text, pid), "ok": text is not None}
            write(out / f"scrape-{i:02d}.json", json.dumps(meta, indent=1))
            summary["scrapes"].append(meta)

        def inspect(name: str) -> None:
            """Run ``numa-exporter inspect --json`` on the target; save its output."""
            if not plan.get("exporter") or sc.verdict is None:
                return
            r = subprocess.run([*plan["exporter"], "inspect", str(pid), "--json"],
                               capture_output=True, timeout=120, check=False)
            write(out / f"{name}.json", r.stdout)
            if r.returncode != 0:
                summary["errors"].append(f"inspect exited {r.returncode}: {r.stderr[-500:]!r}")

        if sc.phase == "static":
            record(0, "static")
            inspect("inspect")
            if sc.strict_balancing_check and exp is not None:
                sysctl("/proc/sys/kernel/numa_balancing", "1")
                text = exp.wait_scans(2, 30, pid=pid)
                write(out / "scrape-strict.txt", text or "")
                inspect("inspect-strict")
                sysctl("/proc/sys/kernel/numa_balancing", "0")
            if plan.get("capture_roots"):
                capture_root(all_pids, out / "root", cgroup)
            if sc.migrate_pages and exp is not None:
                src, dst = sc.migrate_pages
                r = subprocess.run(["migratepages", str(pid), src, dst], capture_output=True,
                                   timeout=120, check=False)
                if r.returncode != 0:
                    summary["errors"].append(f"migratepages exited {r.returncode}: "
                                             f"{r.stderr[-500:]!r}")
                capture_kernel(pid, out / "kernel-migrated", tids_of(pid), cgroup)
                text = exp.wait_scans(2, 30, pid=pid)
                write(out / "scrape-migrated.txt", text or "")
                inspect("inspect-migrated")
        else:
            if plan.get("capture_roots"):
                capture_root(all_pids, out / "root.before-move", cgroup)
            if exp is not None:  # let the drift baseline settle on the pre-move placement
                exp.wait_scans(2, 60, pid=pid)
            os.kill(main_pid, signal.SIGUSR1)
            moved = Path(str(ready) + ".moved")
            if not wait_for(moved.exists, 30):
                raise RuntimeError("workload never moved its thread")
            summary["moved"] = parse_kv(moved.read_text())
            time.sleep(0.5)
            record(0, "moved, balancing off")
            if plan.get("capture_roots"):
                capture_root(all_pids, out / "root.moved", cgroup)
            if sc.phase == "balancing_on":
                sysctl("/proc/sys/kernel/numa_balancing", "1")
            # Balancing on: until the kernel shows >= 95 % on the thread's node twice (at most
            # 90 s; under TCG the kernel took 15-40 s to start and finish migrating 128 MiB);
            # balancing off: a fixed 12 s, long enough for several scans.
            duration = 90.0 if sc.phase == "balancing_on" else 12.0
            t_start = time.monotonic()
            i, settled = 1, 0
            while time.monotonic() - t_start < duration:
                time.sleep(2.0)
                record(i, sc.phase)
                totals = numa_maps_totals(out / f"kernel-{i:02d}-after" / "numa_maps")
                i += 1
                whole = sum(totals.values()) or 1
                settled = settled + 1 if totals.get(sc.node, 0) / whole >= 0.95 else 0
                if sc.phase == "balancing_on" and settled >= 2:
                    break
            inspect("inspect")
            if plan.get("capture_roots"):
                capture_root(all_pids, out / "root", cgroup)
    except Exception as exc:
        summary["errors"].append(f"{type(exc).__name__}: {exc}")
        summary["traceback"] = traceback.format_exc()
    finally:
        with contextlib.suppress(OSError):
            sysctl("/proc/sys/kernel/numa_balancing", "0")
        if exp is not None:
            summary["exporter_rc_before_stop"] = exp.proc.poll()
            summary["exporter_rc"] = exp.stop()
        if wl is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(wl.pid, signal.SIGKILL)
            wl.wait(timeout=10)
        try:
            teardown(sc, cgroup)
        except Exception as exc:
            summary["errors"].append(f"teardown: {exc}")
        summary["elapsed_s"] = round(time.monotonic() - t0, 3)
        write(out / "summary.json", json.dumps(summary, indent=1))
    return summary


def capture_guest(out: Path) -> None:
    """Save guest-wide facts (topology, versions, settings) under ``out``."""
    write(out / "uname.txt", sh(["uname", "-a"]))
    write(out / "numactl_H.txt", sh(["numactl", "-H"]))
    for node_dir in sorted(NODE_SYS.glob("node[0-9]*")):
        for name in ("distance", "cpulist", "meminfo"):
            data = read(node_dir / name)
            if data is not None:
                write(out / node_dir.name / name, data)
    write(out / "vmstat", read("/proc/vmstat") or b"")
    write(out / "thp_enabled", read("/sys/kernel/mm/transparent_hugepage/enabled") or b"")


def main() -> int:
    """Run the plan given as argv[1]; return 0 (per-scenario errors are in the summaries)."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(plan["out"])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # 4 KiB pages unless a scenario asks for huge ones; NUMA balancing on only where wanted.
    sysctl("/sys/kernel/mm/transparent_hugepage/enabled", "madvise")
    sysctl("/proc/sys/kernel/numa_balancing", "0")
    capture_guest(out / "_guest")
    done = []
    for index, name in enumerate(plan["scenarios"]):
        sc = BY_NAME[name]
        d = out / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        print(f"== {name}: {sc.description}", flush=True)
        s = run_scenario(sc, plan, d, index)
        print(f"   {name}: {s['elapsed_s']} s, errors={s['errors']}, "
              f"ratios={[x['ratio'] for x in s['scrapes']]}", flush=True)
        done.append({"scenario": name, "elapsed_s": s["elapsed_s"], "errors": s["errors"]})
    write(out / "_runner.json", json.dumps({"elapsed_s": round(time.monotonic() - t0, 3),
                                            "scenarios": done}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
