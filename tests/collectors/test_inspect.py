"""``numa-exporter inspect`` on fixture roots and on a live process here."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from tests.conftest import ROOTS

from numa_exporter.cli import main as cli_main
from numa_exporter.config import Config
from numa_exporter.inspect.diagnosis import diagnose
from numa_exporter.model.kubernetes import KubernetesView
from numa_exporter.roots import Roots
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
    assert main(["302", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]) == 1
    assert "does not exist" in capsys.readouterr().err


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
                           "nvidia.com/gpu": "1"},
        "cpu_manager_policy": "static", "memory_manager_policy": "Static"}
    assert r["verdict"] == "remote" and r["home"] == {"nodes": "0", "source": "kubelet"}
    assert "pod ml/trainer-7d9f5c-x2k4q container app" in r["summary"]
    assert "memoryManagerPolicy Static" in r["summary"]
    assert len(r["problems"]) == 3
    text = "\n".join(r["remedies"])
    assert "topologyManagerPolicy: single-numa-node" in text
    assert "numactl --" not in text and "systemd" not in text  # the kubelet places pods
    assert "migratepages 601 1 0" in text


def test_pod_without_assignment_is_told_how_to_get_one() -> None:
    base = ROOTS / "kubernetes"
    scanner = Scanner(Config(roots=Roots(base / "proc", base / "sys", base / "rootfs")))
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
