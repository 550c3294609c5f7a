"""Pod and container names from the node's files: pod log directories, runtime specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.oci_config import MAX_BYTES, OciConfig, parse_oci_config
from numa_exporter.parsers.pod_log_dir import (
    PodLogDir,
    is_container_log_dir,
    parse_pod_log_dir,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
UID = "513cb897-0262-4868-826f-aa943ee45a38"


@pytest.mark.parametrize("name,want", [
    # kubelet pkg/kubelet/kuberuntime/helpers.go BuildPodLogsDirectory
    (f"default_gpu-infer-0_{UID}", PodLogDir("default", "gpu-infer-0", UID)),
    (f"kube-system_coredns-5d78c9869d-x2k4q_{UID}",
     PodLogDir("kube-system", "coredns-5d78c9869d-x2k4q", UID)),
    # pod names are DNS-1123 subdomains: dots allowed
    (f"ml_trainer.v2-0_{UID}", PodLogDir("ml", "trainer.v2-0", UID)),
    # static pods: 32-digit hash UIDs
    ("kube-system_etcd-node1_8daa50c3a64c9ff60bb9eab7b44b56fd",
     PodLogDir("kube-system", "etcd-node1", "8daa50c3a64c9ff60bb9eab7b44b56fd")),
])
def test_pod_log_dir(name: str, want: PodLogDir) -> None:
    assert parse_pod_log_dir(name) == want


@pytest.mark.parametrize("name", [
    UID,  # the pre-1.14 layout: UID only
    f"default_gpu_infer_{UID}",  # "_" cannot be in a namespace or pod name
    f"Default_pod_{UID}",  # upper case is not DNS-1123
    f"default_pod-_{UID}",  # ends with "-"
    f"default_pod_{UID.upper()}",
    f"default_pod_{UID[:-1]}",
    f"{'a' * 64}_pod_{UID}",  # namespace longer than 63
    f"default_{'a.' * 130}a_{UID}",  # pod name longer than 253
    f"default_po\x00d_{UID}", f"default_pöd_{UID}", "", "_", "__",
])
def test_not_a_pod_log_dir(name: str) -> None:
    assert parse_pod_log_dir(name) is None


def test_container_log_dirs() -> None:
    assert is_container_log_dir("app") and is_container_log_dir("kube-proxy")
    assert not is_container_log_dir("App") and not is_container_log_dir("a_b")
    assert not is_container_log_dir("0.log.20240101-000000")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_pod_log_dir_total(name: str) -> None:
    got = parse_pod_log_dir(name)
    assert got is None or "_" not in got.namespace + got.pod


def _containerd_spec(name: str) -> bytes:
    base = FIX / "containerd-systemd-v2" / "run" / "containerd" / "io.containerd.runtime.v2.task"
    return (base / "k8s.io" / name / "config.json").read_bytes()


def test_containerd_container_spec() -> None:
    # containerd pkg/cri/annotations/annotations.go keys
    got = parse_oci_config(_containerd_spec("c0a1" * 16))
    assert got == OciConfig(
        "containerd", "container", "default", "gpu-infer-0", UID, "app", "5a0a" * 16,
        "kubepods-pod513cb897_0262_4868_826f_aa943ee45a38.slice:cri-containerd:" + "c0a1" * 16)


def test_containerd_sandbox_spec() -> None:
    got = parse_oci_config(_containerd_spec("5a0a" * 16))
    assert (got.runtime, got.type, got.pod, got.container) == (
        "containerd", "sandbox", "gpu-infer-0", "")


def test_crio_specs() -> None:
    # CRI-O pkg/annotations: io.kubernetes.pod.*, io.kubernetes.cri-o.ContainerType
    base = FIX / "crio-cgroupfs-v1" / "run" / "containers" / "storage" / "overlay-containers"
    got = parse_oci_config((base / ("d0d4" * 16) / "userdata" / "config.json").read_bytes())
    assert got == OciConfig(
        "cri-o", "container", "cache", "redis-0", "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "redis", "5d0d" * 16,
        "/kubepods/burstable/pod7c9e6679-7425-40de-944b-e07fc1f90ae7/crio-" + "d0d4" * 16)
    got = parse_oci_config((base / ("5d0d" * 16) / "userdata" / "config.json").read_bytes())
    assert got.type == "sandbox" and got.container == ""


def test_invalid_annotation_values_are_dropped_and_counted() -> None:
    spec = {"annotations": {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-namespace": "Bad_NS",
        "io.kubernetes.cri.sandbox-name": "x" * 300,
        "io.kubernetes.cri.sandbox-uid": "not-a-uid",
        "io.kubernetes.cri.container-name": "app\nname",
        "io.kubernetes.cri.sandbox-id": "zz"}}
    got = parse_oci_config(json.dumps(spec).encode())
    assert (got.namespace, got.pod, got.uid, got.container, got.sandbox_id) == ("",) * 5
    assert got.error_count == 5 and got.runtime == "containerd" and got.type == "container"


@pytest.mark.parametrize("data,fragment", [
    (b"", "not JSON"), (b"[1]", "not a JSON object"), (b"{" * 100_000, "not JSON"),
    (b" " * (MAX_BYTES + 1), "larger than"),
])
def test_spec_garbage(data: bytes, fragment: str) -> None:
    got = parse_oci_config(data)
    assert fragment in got.error and got.error_count == 1 and got.runtime == ""


def test_spec_with_odd_types_is_not_an_exception() -> None:
    got = parse_oci_config(b'{"annotations": ["x"], "linux": {"cgroupsPath": 5}}')
    assert got.runtime == "" and got.cgroups_path == "" and got.error_count == 1
    got = parse_oci_config(b'{"annotations": {"io.kubernetes.cri.container-type": "vm"}}')
    assert got.type == "" and got.error_count == 1
