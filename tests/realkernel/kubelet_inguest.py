"""In-guest part of the ``kubelet_pods`` scenario: a kubelet's cgroup tree and files, for real.

Run by ``inguest.py`` inside the 2-node guest (cgroup v2). It builds what a kubelet with the
systemd cgroup driver and containerd would leave on a node, without a kubelet:

* the cgroup tree ``kubepods.slice/kubepods-pod<uid_>.slice/cri-containerd-<id>.scope`` of
  two Guaranteed pods, with the cpuset each container really gets;
* under a root directory given to the exporter as ``--path.rootfs``: the kubelet's
  ``cpu_manager_state`` (v2, checksum 0, which the kubelet accepts), ``memory_manager_state``
  (v1, checksum 0), the device manager's checkpoint (a real kubelet 1.20 file from the
  fixtures, checksum verified: pod ``513cb897-…`` has a GPU on node 0, ``94283d1b-…`` two on
  node 1), the pod log directories and containerd's ``config.json`` of each container.

What the kubelet assigned (``ASSIGNED``) and what each container's cgroup really allows
(``CGROUP``): the follower gets CPU 0 and memory on node 0, as assigned; the violator was
assigned CPU 1 and memory on node 1 but its cgroup allows CPU 0 and node 0 only (as after a
cpuset rewritten behind the kubelet's back), so its memory and threads sit on node 0.

One ``rkwork`` (anonymous memory, 64 MiB) runs in each container cgroup; one exporter reads
them. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from inguest import (
    CG_ROOT,
    Exporter,
    capture_kernel,
    node_cpulist,
    parse_kv,
    remote_ratio,
    wait_for,
    write,
)
from scenarios import WORKLOAD_REGEX, Scenario

HERE = Path(__file__).resolve().parent
DEVICE_CHECKPOINT = (HERE.parent / "fixtures" / "kubelet" / "containerd-systemd-v2" / "var" /
                     "lib" / "kubelet" / "device-plugins" / "kubelet_internal_checkpoint")
ROOTFS = Path("/tmp/rk-kubelet-rootfs")
NAMESPACE = "rk"

# name -> pod UID (those of the real device checkpoint), container ID, pod name
PODS = {
    "follower": ("513cb897-0262-4868-826f-aa943ee45a38", "a1" * 32, "follower-0"),
    "violator": ("94283d1b-ce5a-4797-bff8-0cf0c7143b2b", "b2" * 32, "violator-0"),
}
# what the kubelet's checkpoints say: exclusive CPUs (by node) and memory nodes
ASSIGNED = {"follower": {"cpus_node": 0, "memory": [0]},
            "violator": {"cpus_node": 1, "memory": [1]}}
# what each container's cgroup really allows (nodes)
CGROUP = {"follower": {"cpus_node": 0, "mems": "0"},
          "violator": {"cpus_node": 0, "mems": "0"}}
SIZE_MIB = 64


def pod_slice(uid: str) -> str:
    """Return the pod's cgroup path under the root (systemd driver, Guaranteed)."""
    return f"kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice"


def container_cgroup(name: str) -> str:
    """Return the container's cgroup path under the root."""
    uid, cid, _ = PODS[name]
    return f"{pod_slice(uid)}/cri-containerd-{cid}.scope"


def write_rootfs() -> dict[str, str]:
    """Write the kubelet's and containerd's files under ROOTFS; return name -> its CPU list."""
    if ROOTFS.exists():
        shutil.rmtree(ROOTFS)
    kubelet = ROOTFS / "var" / "lib" / "kubelet"
    cpus = {name: node_cpulist(a["cpus_node"]) for name, a in ASSIGNED.items()}
    cpu_entries = {PODS[n][0]: {"app": cpus[n]} for n in PODS}
    write(kubelet / "cpu_manager_state", json.dumps(
        {"policyName": "static", "defaultCpuSet": "", "entries": cpu_entries, "checksum": 0}))
    mem_entries = {PODS[n][0]: {"app": [{"numaAffinity": ASSIGNED[n]["memory"],
                                         "type": "memory", "size": SIZE_MIB << 20}]}
                   for n in PODS}
    write(kubelet / "memory_manager_state", json.dumps(
        {"policyName": "Static", "machineState": {}, "entries": mem_entries, "checksum": 0}))
    write(kubelet / "device-plugins" / "kubelet_internal_checkpoint",
          DEVICE_CHECKPOINT.read_bytes())
    tasks = ROOTFS / "run" / "containerd" / "io.containerd.runtime.v2.task" / "k8s.io"
    for uid, cid, pod in PODS.values():
        write(ROOTFS / "var" / "log" / "pods" / f"{NAMESPACE}_{pod}_{uid}" / "app" / "0.log",
              "")
        spec = {"ociVersion": "1.0.2", "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": "app",
            "io.kubernetes.cri.sandbox-name": pod,
            "io.kubernetes.cri.sandbox-namespace": NAMESPACE,
            "io.kubernetes.cri.sandbox-uid": uid},
            "linux": {"cgroupsPath": f"kubepods-pod{uid.replace('-', '_')}.slice:"
                                     f"cri-containerd:{cid}"}}
        write(tasks / cid / "config.json", json.dumps(spec))
    return cpus


def make_cgroups() -> list[Path]:
    """Create the kubepods tree with each container's real cpuset; return the dirs made."""
    made: list[Path] = []
    (CG_ROOT / "cgroup.subtree_control").write_text("+cpuset +memory")
    for name in PODS:
        parts = container_cgroup(name).split("/")
        for i in range(len(parts)):
            d = CG_ROOT.joinpath(*parts[: i + 1])
            if not d.exists():
                d.mkdir()
                made.append(d)
            if i < len(parts) - 1:
                (d / "cgroup.subtree_control").write_text("+cpuset +memory")
        leaf = CG_ROOT / container_cgroup(name)
        (leaf / "cpuset.cpus").write_text(node_cpulist(CGROUP[name]["cpus_node"]))
        (leaf / "cpuset.mems").write_text(CGROUP[name]["mems"])
    return made


def remove_cgroups(made: list[Path]) -> None:
    """Remove the cgroups :func:`make_cgroups` created (deepest first), best effort."""
    for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
        wait_for(lambda d=d: not (d / "cgroup.procs").read_text().strip(), 5)  # type: ignore[misc]
        with contextlib.suppress(OSError):
            d.rmdir()


def run_kubelet_pods(sc: Scenario, plan: dict[str, Any], out: Path, index: int
                     ) -> dict[str, Any]:
    """Run the scenario; return its summary (also written to summary.json)."""
    summary: dict[str, Any] = {"scenario": sc.name, "description": sc.description,
                               "errors": [], "scrapes": [], "pods": {}}
    t0 = time.monotonic()
    made: list[Path] = []
    workloads: list[subprocess.Popen[bytes]] = []
    exp: Exporter | None = None
    try:
        summary["assigned_cpus"] = write_rootfs()
        made = make_cgroups()
        pids: dict[str, int] = {}
        for name in PODS:
            procs = str(CG_ROOT / container_cgroup(name) / "cgroup.procs")

            def join(procs: str = procs) -> None:
                with open(procs, "w") as fh:
                    fh.write(str(os.getpid()))

            ready = Path(f"/tmp/rk-ready-{sc.name}-{name}")
            with contextlib.suppress(FileNotFoundError):
                ready.unlink()
            argv = [plan["workload"], "-m", "anon", "-s", str(SIZE_MIB), "-c", "0",
                    "-r", str(ready), "-T", "300"]
            with open(out / f"workload-{name}.out", "wb") as wout:
                wl = subprocess.Popen(argv, stdout=wout, stderr=subprocess.STDOUT,
                                      start_new_session=True, preexec_fn=join)
            workloads.append(wl)
            if not wait_for(lambda r=ready, w=wl: r.exists() or w.poll() is not None, 120):
                raise RuntimeError(f"{name}: workload never became ready")
            if not ready.exists():
                raise RuntimeError(f"{name}: workload exited {wl.returncode}")
            pids[name] = int(parse_kv(ready.read_text())["pid"])
            uid, cid, pod = PODS[name]
            summary["pods"][name] = {"pid": pids[name], "uid": uid, "container_id": cid,
                                     "pod": pod, "namespace": NAMESPACE,
                                     "cgroup": "/" + container_cgroup(name)}
        summary["pid"] = pids["violator"]
        summary["pids"] = list(pids.values())
        if plan.get("exporter"):
            exp = Exporter([*plan["exporter"], f"--path.rootfs={ROOTFS}"],
                           plan["port"] + index, out, plan.get("include") or WORKLOAD_REGEX)
            if exp.wait_scans(1, 90, pid=pids["follower"]) is None:
                raise RuntimeError("exporter never reported the pods (see exporter.log)")
        for name, pid in pids.items():
            capture_kernel(pid, out / f"kernel-{name}", [], None)
        capture_kernel(pids["violator"], out / "kernel-00", [], None)
        text = exp.wait_scans(1, 30, pid=pids["violator"]) if exp is not None else None
        write(out / "scrape-00.txt", text or "")
        capture_kernel(pids["violator"], out / "kernel-00-after", [], None)
        summary["scrapes"].append({"index": 0, "ok": text is not None,
                                   "t": round(time.monotonic() - t0, 3),
                                   "ratio": remote_ratio(text, pids["violator"])})
        if exp is not None:
            r = subprocess.run([*plan["exporter"], "inspect", str(pids["violator"]), "--json",
                                f"--path.rootfs={ROOTFS}"],
                               capture_output=True, timeout=120, check=False)
            write(out / "inspect.json", r.stdout)
            if r.returncode != 0:
                summary["errors"].append(f"inspect exited {r.returncode}: {r.stderr[-500:]!r}")
    except Exception as exc:
        summary["errors"].append(f"{type(exc).__name__}: {exc}")
        summary["traceback"] = traceback.format_exc()
    finally:
        if exp is not None:
            summary["exporter_rc_before_stop"] = exp.proc.poll()
            summary["exporter_rc"] = exp.stop()
        for wl in workloads:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(wl.pid, signal.SIGKILL)
            wl.wait(timeout=10)
        remove_cgroups(made)
        summary["elapsed_s"] = round(time.monotonic() - t0, 3)
        write(out / "summary.json", json.dumps(summary, indent=1))
    return summary
