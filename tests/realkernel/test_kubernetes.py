"""Kubernetes attribution and the kubelet's promise, on a real kernel (``kubelet_pods``).

In the 2-node guest (cgroup v2) ``kubelet_inguest.py`` builds the kubelet's cgroup tree
(``kubepods.slice/kubepods-pod<uid>.slice/cri-containerd-<id>.scope``), runs a real process
in each of two container cgroups with the cpuset the container really has, and writes the
kubelet's checkpoints, pod log directories and containerd specs under a rootfs given to the
exporter. The follower runs where the kubelet assigned it (CPU 0, node 0); the violator was
assigned CPU 1 and node 1 but its cgroup holds it on node 0.
"""

from __future__ import annotations

import json

import pytest

from .kubelet_inguest import ASSIGNED, NAMESPACE, PODS
from .results import ScenarioRun

pytestmark = pytest.mark.realkernel

REASONS = ("kubelet_memory_nodes", "kubelet_cpu_nodes", "kubelet_device_node")
# the real device checkpoint's GPUs: pod 513cb897-… on node 0, 94283d1b-… on node 1
GPU_NODE = {"follower": "0", "violator": "1"}


@pytest.mark.parametrize("scenario", ["kubelet_pods"])
def test_pods_named_assigned_and_measured_against_the_kubelet(run: ScenarioRun,
                                                              scenario: str) -> None:
    s = run.scrape(0)
    pods = run.summary["pods"]
    for name, (uid, cid, pod) in PODS.items():
        pid = str(pods[name]["pid"])
        (labels,) = [lv for lv, v in s.select("numa_process_kubernetes_info", pid=pid)
                     if v == 1]
        assert labels == {"pid": pid, "namespace": NAMESPACE, "pod": pod, "container": "app",
                          "uid": uid, "container_id": f"containerd://{cid}"}, labels
        (cg,) = s.select("numa_cgroup_kubernetes_info", uid=uid)
        assert cg[0]["cgroup"] == pods[name]["cgroup"] and cg[0]["qos"] == "Guaranteed"
        assigned = {lv["resource"]: lv["nodes"] for lv, _ in
                    s.select("numa_kubernetes_container_assigned_nodes_info", uid=uid)}
        want_node = str(ASSIGNED[name]["cpus_node"])
        assert assigned == {"cpu": want_node,
                            "memory": ",".join(map(str, ASSIGNED[name]["memory"])),
                            "nvidia.com/gpu": GPU_NODE[name]}, assigned
        (home,) = [lv for lv, _ in s.select("numa_process_home_nodes_info", pid=pid)]
        assert (home["source"], home["nodes"]) == ("kubelet", want_node), home


@pytest.mark.parametrize("scenario", ["kubelet_pods"])
def test_ratio_against_the_kubelets_nodes(run: ScenarioRun, scenario: str) -> None:
    s = run.scrape(0)
    pods = run.summary["pods"]
    follower, violator = pods["follower"]["pid"], pods["violator"]["pid"]
    # their memory is on node 0 (their cgroups allow no other node; shared library pages
    # touched before, ~0.5 MiB, may sit on node 1)
    for pid in (follower, violator):
        nb = s.node_bytes(pid)
        assert nb.get(0, 0) >= 0.95 * sum(nb.values()) > 0, nb
    assert (s.ratio(follower) or 0.0) <= 0.05
    assert (s.ratio(violator) or 0.0) >= 0.95  # the kubelet promised node 1


@pytest.mark.parametrize("scenario", ["kubelet_pods"])
def test_mismatch_fires_for_the_violator_only(run: ScenarioRun, scenario: str) -> None:
    s = run.scrape(0)
    pods = run.summary["pods"]
    got = {name: {r: s.value("numa_process_binding_mismatch", pid=str(pods[name]["pid"]),
                             reason=r) for r in REASONS} for name in PODS}
    assert got["follower"] == dict.fromkeys(REASONS, 0), got
    # memory and threads on node 0 against node 1; its GPUs are on node 1 like its memory
    assert got["violator"] == {"kubelet_memory_nodes": 1, "kubelet_cpu_nodes": 1,
                               "kubelet_device_node": 0}, got


@pytest.mark.parametrize("scenario", ["kubelet_pods"])
def test_inspect_names_the_pod_and_the_kubelet_policy(run: ScenarioRun, scenario: str) -> None:
    rep = json.loads((run.path / "inspect.json").read_text())
    assert rep["pid"] == run.summary["pods"]["violator"]["pid"]
    assert rep["kubernetes"]["pod"] == "violator-0" and rep["home"]["source"] == "kubelet"
    assert rep["verdict"] == "remote"
    assert "pod rk/violator-0 container app" in rep["summary"]
    assert "memoryManagerPolicy Static" in rep["summary"]
    assert any("topologyManagerPolicy: single-numa-node" in r for r in rep["remedies"])
