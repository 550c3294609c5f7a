"""``numa-exporter inspect`` on fixture roots and on a live process here."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.cli import main as cli_main
from numa_exporter.inspect.diagnosis import diagnose
from numa_exporter.model.kubernetes import KubernetesView
from numa_exporter.scan.scanner import Scanner


def main(argv: list[str]) -> int:
    return cli_main(["inspect", *argv])


def _run(capsys: pytest.CaptureFixture[str], root: str, pid: int, *extra: str) -> dict[str, Any]:
    base = ROOTS / root
    args = [str(pid), "--json", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]
    if (base / "udev.json").exists():
        args.append(f"--accelerator.records={base / 'udev.json'}")
    if (base / "config.toml").exists():
        args.append(f"--config.file={base / 'config.toml'}")
    if (base / "rootfs").is_dir():
        args.append(f"--path.rootfs={base / 'rootfs'}")
    assert main([*args, *extra]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_remote_bound_gpu_process(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "inference", 500)
    assert r["verdict"] == "remote"
    assert r["home"] == {"nodes": "0", "source": "accelerator"}
    assert r["unit"] == "vllm.service"
    text = "\n".join(r["remedies"])
    assert "numactl --cpunodebind=0 --membind=0" in text
    assert "/etc/systemd/system/vllm.service.d/numa.conf" in text
    assert "NUMAPolicy=bind" in text and "NUMAMask=0" in text and "CPUAffinity=0" in text
    assert "AllowedMemoryNodes=0" in text  # its cgroup confines memory to node 1
    assert "migratepages 500 1 0" in text
    assert len(r["problems"]) == 3


def test_local_process_needs_no_remedy(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "inference", 501)
    assert r["verdict"] == "local" and r["remedies"] == [] and r["problems"] == []


def test_membind_capture(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "two_node", 159)
    assert r["verdict"] == "remote"
    assert r["memory_bytes"]["1"]["anon"] == 268488704
    assert r["numa_balancing"] == 1
    assert "memory is bound to nodes where none of its threads run" in r["problems"]


def test_split_threads_are_local(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "two_node", 300)
    assert r["verdict"] == "local" and r["home"]["nodes"] == "0-1"


def test_text_output_and_missing_process(capsys: pytest.CaptureFixture[str]) -> None:
    base = ROOTS / "two_node"
    assert main(["159", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]) == 0
    out = capsys.readouterr().out
    assert "Verdict: REMOTE" in out and "numactl --cpunodebind=0 --membind=0" in out
    assert main(["99999", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]) == 1
    assert "does not exist" in capsys.readouterr().err
    # 302's folder is there without status: a file that cannot be read, not a process gone
    assert main(["302", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]) == 1
    assert "cannot read process 302" in capsys.readouterr().err


def test_live_process_here() -> None:
    r = subprocess.run([sys.executable, "-m", "numa_exporter", "inspect", str(_self_pid()),
                        "--json"], capture_output=True, text=True, timeout=60, check=True)
    rep = json.loads(r.stdout)
    total = sum(sum(k.values()) for k in rep["memory_bytes"].values())
    assert total > 0
    assert rep["verdict"] in ("local", "remote", "mixed")


def _self_pid() -> int:
    import os

    return os.getpid()


def test_pod_breaking_the_kubelets_promise(capsys: pytest.CaptureFixture[str]) -> None:
    """The kubernetes root's trainer: the kubelet gave it memory on node 0, 89 % is on 1."""
    r = _run(capsys, "kubernetes", 601)
    assert r["kubernetes"] == {
        "namespace": "ml", "pod": "trainer-7d9f5c-x2k4q", "container": "app",
        "uid": "94283d1b-ce5a-4797-bff8-0cf0c7143b2b",
        "container_id": "containerd://" + "c0b2" * 16, "qos": "Guaranteed",
        "assigned_nodes": {"cpu": "1", "hugepages-1Gi": "0", "memory": "0",
                           "nvidia.com/gpu": "1"}, "dra_devices": [],
        "cpu_manager_policy": "static", "memory_manager_policy": "Static"}
    assert r["verdict"] == "remote" and r["home"] == {"nodes": "0", "source": "kubelet"}
    assert "pod ml/trainer-7d9f5c-x2k4q container app" in r["summary"]
    assert "memoryManagerPolicy Static" in r["summary"]
    assert len(r["problems"]) == 3
    text = "\n".join(r["remedies"])
    assert "topologyManagerPolicy: single-numa-node" in text
    assert "numactl --" not in text and "systemd" not in text  # the kubelet places pods
    assert "migratepages 601 1 0" in text


def test_pod_whose_dra_gpu_is_off_its_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    """The kubernetes_dra root's vllm: CPUs and memory on node 0, its DRA GPU on node 1."""
    r = _run(capsys, "kubernetes_dra", 600)
    assert r["kubernetes"]["dra_devices"] == [{
        "driver": "gpu.example.com", "pool": "worker-1", "device": "gpu-1",
        "claim": "default/gpu-infer-0-gpu", "node": "1", "paths": ["/dev/dri/renderD129"]}]
    assert any("Dynamic Resource Allocation" in p for p in r["problems"])
    text = "\n".join(r["remedies"])
    assert ("DRA device gpu.example.com/worker-1/gpu-1 (claim default/gpu-infer-0-gpu) "
            "[/dev/dri/renderD129] is on node 1") in text
    assert "numaNode == 0" in text and "on node 1" in text
    assert main([str(600), *(f"--path.{k}={ROOTS / 'kubernetes_dra' / v}" for k, v in (
        ("procfs", "proc"), ("sysfs", "sys"), ("rootfs", "rootfs")))]) == 0
    assert ("DRA device        gpu.example.com/worker-1/gpu-1 (claim default/gpu-infer-0-gpu) "
            "on node 1 [/dev/dri/renderD129]") in capsys.readouterr().out


def test_pod_whose_dra_gpu_is_on_its_node_gets_no_dra_remedy(
        capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "kubernetes_dra", 601)
    assert [d["node"] for d in r["kubernetes"]["dra_devices"]] == ["0"]
    assert not any("Dynamic Resource Allocation" in p for p in r["problems"])
    assert "DRA device" not in "\n".join(r["remedies"])


def test_pod_without_assignment_is_told_how_to_get_one() -> None:
    base = ROOTS / "kubernetes"
    scanner = Scanner(fixture_config(base, rootfs=True))
    sample, system = scanner.sample_one(601)
    assert sample is not None and sample.kubelet is not None
    # the same process with no assignment, on a node with the default policies
    unassigned = replace(sample, kubelet=None, mismatches={},
                         home=replace(sample.home, nodes=frozenset({1}), source="threads"))
    unassigned = replace(unassigned, locality=replace(unassigned.locality,
                                                      local_bytes=256 << 20,
                                                      remote_bytes=64 << 20))
    d = diagnose(unassigned, system, None, KubernetesView(cpu_policy="none",
                                                          memory_policy="None"))
    text = "\n".join(d.remedies)
    assert d.verdict == "mixed" and "no NUMA assignment by the kubelet" in d.summary
    assert "Guaranteed QoS with integer CPUs" in text
    assert "cpuManagerPolicy: static" in text and "memoryManagerPolicy: Static" in text


# The grace_hopper root (tests/fixtures/roots/README.md, "grace_hopper"): every number below
# is copied from the README's per-process lists, not computed from the files.
GH_700_NODE0 = 424706048  # python + heap + staging + libcuda + stack, 103688 pages
GH_700_NODE1 = 2147483648  # the managed buffer on the GPU's memory node, 524288 pages
GH_700_TOTAL = 2572189696


def test_tiers_view_of_a_grace_hopper_gpu_process(capsys: pytest.CaptureFixture[str]) -> None:
    """vllm (700) uses the GPU whose memory is node 1: two accessors, its faults mostly far."""
    t = _run(capsys, "grace_hopper", 700)["tiers"]
    cpu, accel = t["accessors"]["cpu"], t["accessors"]["accelerator"]
    assert set(t["accessors"]) == {"cpu", "accelerator"}
    assert (cpu["home"], cpu["local_bytes"], cpu["remote_bytes"], cpu["far_bytes"]) == (
        "0", GH_700_NODE0, 0, GH_700_NODE1)
    assert (accel["home"], accel["local_bytes"], accel["remote_bytes"],
            accel["far_bytes"]) == ("1", GH_700_NODE1, GH_700_NODE0, 0)
    assert cpu["far_ratio"] == pytest.approx(GH_700_NODE1 / GH_700_TOTAL)
    assert accel["local_ratio"] == pytest.approx(GH_700_NODE1 / GH_700_TOTAL)
    assert accel["remote_ratio"] == pytest.approx(GH_700_NODE0 / GH_700_TOTAL)
    assert t["bytes_by_tier"] == {"4": GH_700_TOTAL} and t["untiered_bytes"] == 0
    assert (t["cpu_span"], t["memory_span"]) == (1, 2)
    f = t["faults"]
    assert f["by_node"] == {"0": 210, "1": 790} and f["total"] == 1000 and f["threads"] == 3
    assert f["by_place_cpu"] == {"local": 210, "remote": 0, "far": 790}
    assert f["remote_share"] == pytest.approx(0.79) and f["estimate"] is True


def test_tiers_view_of_a_process_bound_to_the_gpu_memory_node(
        capsys: pytest.CaptureFixture[str]) -> None:
    """spill (710), membind=1 and no accelerator: far for its CPUs, no accelerator view."""
    t = _run(capsys, "grace_hopper", 710)["tiers"]
    assert list(t["accessors"]) == ["cpu"]
    cpu = t["accessors"]["cpu"]
    assert (cpu["local_bytes"], cpu["remote_bytes"], cpu["far_bytes"]) == (1433600, 0,
                                                                           1074171904)
    assert t["faults"]["by_node"] == {"0": 4, "1": 400}
    assert t["faults"]["remote_share"] == pytest.approx(400 / 404)


def test_tiers_view_without_faults_says_absent(capsys: pytest.CaptureFixture[str]) -> None:
    """postgres (720) has taken no hinting fault: absent, not zero, in JSON and text."""
    t = _run(capsys, "grace_hopper", 720)["tiers"]
    assert t["faults"] is None
    assert t["accessors"]["cpu"]["local_bytes"] == 160456704
    assert t["accessors"]["cpu"]["local_ratio"] == 1.0
    base = ROOTS / "grace_hopper"
    assert main(["720", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}",
                 f"--config.file={base / 'config.toml'}"]) == 0
    out = capsys.readouterr().out
    assert "Hinting faults    none shown" in out and "remote share" not in out


def test_tiers_view_in_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    base = ROOTS / "grace_hopper"
    assert main(["700", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}",
                 f"--accelerator.records={base / 'udev.json'}",
                 f"--config.file={base / 'config.toml'}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 424706048 B = 405.03 MiB, 2147483648 B = 2048.00 MiB, 2572189696 B = 2453.03 MiB
    assert lines[lines.index("Locality by accessor (MiB)") + 1].split() == [
        "accessor", "local", "remote", "far", "home", "nodes"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines
            if ln.startswith(("cpu ", "accelerator "))}
    assert rows == {"cpu": ["405.03", "0.00", "2048.00", "0"],
                    "accelerator": ["2048.00", "405.03", "0.00", "1"]}
    assert "Memory by tier    tier 4 2453.03 MiB" in lines
    assert "NUMA in play      CPUs on 1 node, memory on 2 nodes" in lines
    assert ("Hinting faults    node 0 210, node 1 790 (decayed counts, 3 threads)" in lines)
    assert "  for the CPUs    local 210, remote 0, far 790" in lines
    assert "  remote share    0.790 (an estimate from NUMA hinting faults)" in lines


def test_gpu_process_is_not_told_to_move_its_gpu_memory(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm (700) keeps 2 GiB on node 1, its GPU's own memory (README: local for the
    accelerator). The remedies must not move those pages to node 0 or bind memory away from
    node 1; the summary says where the far bytes are."""
    r = _run(capsys, "grace_hopper", 700)
    text = "\n".join(r["remedies"])
    assert "migratepages 700 1" not in text
    assert "--membind=0 " not in text and "NUMAMask=0\n" not in text + "\n"
    # far and local to the GPU alike: 2147483648 / 2572189696 = 0.8349
    assert "far, on CPU-less or slower-tier nodes: 83%" in r["summary"]
    assert "83% local to its accelerator's memory node(s) 1" in r["summary"]


def test_unbound_process_beside_memoryless_nodes_is_not_told_to_stop_balancing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm (700): Mems_allowed 0-1 is every node with memory (nodes 2-8 have none), a
    default policy: not bound, so no strict-binding problem and no sysctl remedy."""
    r = _run(capsys, "grace_hopper", 700)
    assert r["memory_bound"] is False and r["memory_bound_nodes"] is None
    assert r["mismatches"]["balancing_with_strict_binding"] is False
    assert not any("numa_balancing" in ln for ln in [*r["problems"], *r["remedies"]])
    # nor told to relaunch bound to 0-1, which is what it already has
    assert not any(ln.startswith("numactl") for ln in r["remedies"])


def test_process_bound_to_one_memory_node_is_still_bound(
        capsys: pytest.CaptureFixture[str]) -> None:
    """spill (710), numactl --membind=1 with balancing on: bound to node 1, and told."""
    r = _run(capsys, "grace_hopper", 710)
    assert r["memory_bound"] is True and r["memory_bound_nodes"] == "1"
    assert r["mismatches"]["balancing_with_strict_binding"] is True
    assert any(ln.startswith("sysctl -w kernel.numa_balancing=0") for ln in r["remedies"])


def test_process_bound_to_the_gpu_memory_without_the_gpu_is_still_told(
        capsys: pytest.CaptureFixture[str]) -> None:
    """spill (710) uses no accelerator: its memory on node 1 is far for its CPUs, and moving
    it back is still the remedy."""
    r = _run(capsys, "grace_hopper", 710)
    assert "migratepages 710 1 0" in "\n".join(r["remedies"])
    assert "accelerator" not in r["summary"]
