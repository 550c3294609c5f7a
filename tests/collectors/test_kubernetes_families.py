"""The Kubernetes info families, built from the fixture node's view, and promtool's verdict."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from numa_exporter.collectors.kubernetes import emit_view
from numa_exporter.model.kubernetes import KubernetesView
from numa_exporter.parsers.proc_cgroup import parse_proc_cgroup
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.kubernetes import KubernetesReader
from numa_exporter.sources.rootfs import RootFS

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet" / "containerd-systemd-v2"
A = "513cb897-0262-4868-826f-aa943ee45a38"


def _view_and_processes() -> tuple[KubernetesView, list[tuple[int, str | None]]]:
    groups = {int(p.parent.name): parse_proc_cgroup(p.read_bytes())
              for p in (ROOT / "proc").glob("*/cgroup")}
    view = KubernetesReader(RootFS(ROOT)).read(
        groups.values(), {c: 0 if c < 14 else 1 for c in range(28)}, frozenset({0, 1}),
        ErrorReporter(quiet=True))
    return view, [(pid, g.path_for("memory")) for pid, g in groups.items()]


class _Families:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics


def _exposition() -> str:
    view, procs = _view_and_processes()
    reg = CollectorRegistry()
    reg.register(_Families(list(emit_view(view, procs))))  # type: ignore[arg-type]
    return generate_latest(reg).decode()


def test_process_info_only_for_containers() -> None:
    text = _exposition()
    lines = [ln for ln in text.splitlines() if ln.startswith("numa_process_kubernetes_info{")]
    assert lines == [
        'numa_process_kubernetes_info{container="app",container_id="containerd://'
        + "c0a1" * 16 + f'",namespace="default",pid="101",pod="gpu-infer-0",uid="{A}"}} 1.0',
        'numa_process_kubernetes_info{container="app",container_id="containerd://'
        + "c0b2" * 16 + '",namespace="ml",pid="201",pod="trainer-7d9f5c-x2k4q",'
        'uid="94283d1b-ce5a-4797-bff8-0cf0c7143b2b"} 1.0',
        'numa_process_kubernetes_info{container="",container_id="containerd://'
        + "c0c3" * 16 + '",namespace="kube-system",pid="301",pod="kube-proxy-x7k2p",'
        'uid="0f6c2d9e-8b41-4a57-9d3c-5e7f1a2b4c6d"} 1.0',
    ]  # 102 is the pause container; 1 and 900 are not in a pod


def test_cgroup_info_and_assigned_nodes() -> None:
    text = _exposition()
    assert sum(ln.startswith("numa_cgroup_kubernetes_info{") for ln in text.splitlines()) == 3
    assert ('qos="Guaranteed"' in text and 'qos="BestEffort"' in text)
    assigned = sorted(ln for ln in text.splitlines()
                      if ln.startswith("numa_kubernetes_container_assigned_nodes_info{"))
    got = {(ln.split('resource="')[1].split('"')[0], ln.split('nodes="')[1].split('"')[0],
            ln.split('pod="')[1].split('"')[0]) for ln in assigned}
    assert got == {
        ("cpu", "0", "gpu-infer-0"), ("memory", "0", "gpu-infer-0"),
        ("nvidia.com/gpu", "0", "gpu-infer-0"),
        ("cpu", "1", "trainer-7d9f5c-x2k4q"), ("memory", "0", "trainer-7d9f5c-x2k4q"),
        ("hugepages-1Gi", "0", "trainer-7d9f5c-x2k4q"),
        ("nvidia.com/gpu", "1", "trainer-7d9f5c-x2k4q")}


def test_promtool_check_metrics_is_clean() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (apt-get install prometheus) is not available")
    r = subprocess.run([promtool, "check", "metrics"], input=_exposition(), text=True,
                       capture_output=True, timeout=60, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (
        r.stdout + r.stderr)
