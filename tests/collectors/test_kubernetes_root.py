"""The Kubernetes collector, kubelet home and kubelet mismatch reasons on the kubernetes root.

Expected values come from ``EXPECTED.json``, written out by
``tests/fixtures/build_kubernetes_root.py`` from its tables (not from the exporter's parsers).
"""

from __future__ import annotations

import functools
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS, fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.rootfs import RootFS

BASE = ROOTS / "kubernetes"
EXP: dict[str, Any] = json.loads((BASE / "EXPECTED.json").read_text())
KUBELET_REASONS = ("kubelet_memory_nodes", "kubelet_cpu_nodes", "kubelet_device_node")


_config = functools.partial(fixture_config, BASE, rootfs=True, detail_above=0)


def _scan(**kw: Any) -> tuple[Scanner, Snapshot, str]:
    cfg = _config(**kw)
    scanner = Scanner(cfg)
    snap = scanner.scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return scanner, snap, generate_latest(reg).decode()


@pytest.fixture(scope="module")
def scanned() -> tuple[Scanner, Snapshot, str]:
    return _scan()


def test_process_info_names_pod_and_container(scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, _, text = scanned
    got = {s["pid"]: {k: v for k, v in s.items() if k != "pid"}
           for s, v in values(text, "numa_process_kubernetes_info") if v == 1}
    want = {pid: e["kubernetes"] for pid, e in EXP["processes"].items() if e["kubernetes"]}
    assert got == want  # 602 (pause) and 604 (not in a pod) have none


def test_assigned_nodes_and_cgroups(scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, _, text = scanned
    got = sorted((s for s, _ in values(text, "numa_kubernetes_container_assigned_nodes_info")),
                 key=lambda d: sorted(d.items()))
    assert got == sorted(EXP["assigned"], key=lambda d: sorted(d.items()))
    cgroups = {s["cgroup"]: s["qos"] for s, _ in values(text, "numa_cgroup_kubernetes_info")}
    assert cgroups == EXP["cgroups"]


def test_kubelet_is_the_home_and_the_ratio_is_against_it(
        scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, _, text = scanned
    for pid, e in EXP["processes"].items():
        (home,) = [s for s, _ in values(text, "numa_process_home_nodes_info", pid=pid)]
        assert (home["source"], home["nodes"]) == (e["home_source"], e["home_nodes"]), pid
        ((_, ratio),) = values(text, "numa_process_remote_memory_ratio", pid=pid)
        assert ratio == pytest.approx(e["remote_ratio"]), pid


def test_mismatch_reasons_only_for_assigned_containers(
        scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, _, text = scanned
    for pid, e in EXP["processes"].items():
        got = {s["reason"]: v for s, v in values(text, "numa_process_binding_mismatch",
                                                 pid=pid) if s["reason"] in KUBELET_REASONS}
        assert got == e["kubelet_mismatch"], pid


def test_no_errors_and_the_policies(scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, snap, _ = scanned
    assert snap.stats.parse_errors == {} and snap.stats.read_errors == {}
    assert (snap.kubernetes.cpu_policy, snap.kubernetes.memory_policy) == ("static", "Static")


def test_collector_off_reads_no_kubelet_file() -> None:
    reads: list[str] = []

    class Spy(RootFS):
        def read(self, host_path: str, source: str, limit: int) -> bytes | None:
            reads.append(host_path)
            return super().read(host_path, source, limit)

    cfg = _config(collectors=frozenset({"process", "binding", "cgroup"}))
    scanner = Scanner(cfg)
    scanner.kube.fs = Spy(BASE / "rootfs")
    snap = scanner.scan()
    trainer = next(p for p in snap.processes if p.pid == 601)
    assert trainer.home.source == "threads" and trainer.kubernetes is None
    assert not set(trainer.mismatches) & set(KUBELET_REASONS)
    assert reads == [] and snap.kubernetes.cgroups == {}


def test_kept_process_keeps_its_pod() -> None:
    """A process not read again this scan (cadence, budget) still has its info series."""
    scanner = Scanner(_config())
    first = scanner.scan()
    assert 600 in {p.pid for p in first.processes if p.kubernetes is not None}
    scanner.config = replace(scanner.config, scan_budget=0.0)  # no time: every process kept
    second = scanner.scan()
    assert second.stats.states["kept"] == len(first.processes)
    kept = next(p for p in second.processes if p.pid == 600)
    assert kept.kubernetes is not None
    assert kept.kubernetes_cgroup in second.kubernetes.cgroups


def test_a_bug_in_the_lookup_costs_only_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    from numa_exporter.readers.kubernetes import KubernetesScan

    def broken(self: KubernetesScan, g: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(KubernetesScan, "container", broken)
    _, snap, text = _scan()
    assert {p.pid for p in snap.processes} == {int(p) for p in EXP["processes"]}
    assert all(p.kubernetes is None for p in snap.processes)
    # every process's cgroup is looked up, in a pod or not
    assert snap.stats.read_errors == {("kubernetes", "error"): len(EXP["processes"])}
    assert values(text, "numa_process_kubernetes_info") == []


def test_broken_checkpoint_costs_only_itself(tmp_path: Path) -> None:
    """A CPU Manager checkpoint the kubelet would refuse: counted and logged, the pods are
    still named, the Memory Manager's nodes still make the home; nothing else is lost."""
    rootfs = tmp_path / "rootfs"
    shutil.copytree(BASE / "rootfs", rootfs)
    state = rootfs / "var" / "lib" / "kubelet" / "cpu_manager_state"
    state.write_text(state.read_text().replace('"1-3"', '"4-6"'))  # checksum no longer holds
    cfg = Config(detail_above=0, roots=Roots(BASE / "proc", BASE / "sys", rootfs), min_resident=0)
    snap = Scanner(cfg).scan()
    assert snap.stats.parse_errors == {"cpu_manager_state": 1}
    assert {p.pid for p in snap.processes} == {int(p) for p in EXP["processes"]}
    named = {p.pid: p.kubernetes.pod for p in snap.processes
             if p.kubernetes is not None and p.kubernetes.kind == "container"}
    assert named == {600: "gpu-infer-0", 601: "trainer-7d9f5c-x2k4q", 603: "kube-proxy-x7k2p"}
    trainer = next(p for p in snap.processes if p.pid == 601)
    assert (trainer.home.source, trainer.home.nodes) == ("kubelet", frozenset({0}))
    assert trainer.kubelet is not None and trainer.kubelet.cpus is None  # CPUs refused
    assert trainer.mismatches["kubelet_cpu_nodes"] is False
    assert trainer.mismatches["kubelet_memory_nodes"] is True


def test_kubelet_root_dir_flag_reaches_the_reader(tmp_path: Path) -> None:
    """A kubelet run with --root-dir=/srv/kubelet: found with --kubelet.root-dir only."""
    from numa_exporter.cli import build_parser, config_from_args

    rootfs = tmp_path / "rootfs"
    shutil.copytree(BASE / "rootfs", rootfs)
    (rootfs / "srv").mkdir()
    (rootfs / "var" / "lib" / "kubelet").rename(rootfs / "srv" / "kubelet")
    parser = build_parser()
    common = [f"--path.procfs={BASE / 'proc'}", f"--path.sysfs={BASE / 'sys'}",
              f"--path.rootfs={rootfs}", "--process.min-resident=0"]
    for extra, source in (([], "threads"), (["--kubelet.root-dir=/srv/kubelet"], "kubelet")):
        cfg, _ = config_from_args(parser.parse_args([*common, *extra]), parser)
        snap = Scanner(cfg).scan()
        trainer = next(p for p in snap.processes if p.pid == 601)
        assert trainer.home.source == source, extra
        assert trainer.kubernetes is not None and trainer.kubernetes.pod == "trainer-7d9f5c-x2k4q"


def test_hostile_sub_cgroup_of_a_container(tmp_path: Path) -> None:
    """A container may create cgroups below its own (cgroup v2 delegation): a name with
    bytes that are not UTF-8, a newline and a fake pod path keeps the process its own pod,
    and the exposition stays valid."""
    from tests.fixtures.build_kubernetes_root import CG_A

    root = tmp_path / "root"
    shutil.copytree(BASE, root, symlinks=True)
    fake = ("kubepods.slice/kubepods-pod94283d1b_ce5a_4797_bff8_0cf0c7143b2b.slice/"
            f"cri-containerd-{'c0b2' * 16}.scope")
    (root / "proc" / "600" / "cgroup").write_bytes(
        b"0::" + CG_A.encode() + b"/evil\xff\xfe\x1b[2J\\n\"}" + b"/" + fake.encode() + b"\n")
    cfg = fixture_config(root, rootfs=True, detail_above=0)
    snap = Scanner(cfg).scan()
    vllm = next(p for p in snap.processes if p.pid == 600)
    assert vllm.kubernetes is not None and vllm.kubernetes.pod == "gpu-infer-0"
    assert (vllm.home.source, vllm.home.nodes) == ("kubelet", frozenset({0}))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    text = generate_latest(reg).decode()
    (info,) = [s for s, _ in values(text, "numa_process_kubernetes_info", pid="600")]
    assert info["pod"] == "gpu-infer-0"
    cgroups = [s["cgroup"] for s, _ in values(text, "numa_cgroup_kubernetes_info",
                                              pod="gpu-infer-0")]
    assert any("evil" in c for c in cgroups) and all("\n" not in c for c in cgroups)


def test_assignments_per_numa_node(scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, _, text = scanned
    # containers with any resource on a node, from the root's table of assignments
    want: dict[str, set[tuple[str, str]]] = {}
    for a in EXP["assigned"]:
        for node in parse_cpulist(a["nodes"]) or ():
            want.setdefault(str(node), set()).add((a["uid"], a["container"]))
    got = {s["node"]: v for s, v in values(text, "numa_kubelet_node_assigned_containers")}
    assert got == {n: len(c) for n, c in want.items()} == {"0": 2, "1": 1}
    # exclusive CPUs: the checkpoint's 1-3 (node 0: CPUs 0-13) and 14-16 (node 1: 14-27)
    cpus = {s["node"]: v for s, v in values(text, "numa_kubelet_node_assigned_cpus")}
    assert cpus == {"0": 3, "1": 3}


def test_memory_reserved_per_numa_node(scanned: tuple[Scanner, Snapshot, str]) -> None:
    _, _, text = scanned
    # expected from the checkpoint's container entries (every block here is on one node);
    # the exporter serves machineState's per-node account, which must agree with them
    state = json.loads((BASE / "rootfs/var/lib/kubelet/memory_manager_state").read_text())
    want: dict[tuple[str, str], int] = {}
    for containers in state["entries"].values():
        for blocks in containers.values():
            for b in blocks:
                (node,) = b["numaAffinity"]
                key = (str(node), b["type"])
                want[key] = want.get(key, 0) + b["size"]
    got = {(s["node"], s["resource"]): v
           for s, v in values(text, "numa_kubelet_node_assigned_memory_bytes")}
    assert {k: v for k, v in got.items() if v} == want
    assert want == {("0", "memory"): 3 << 30, ("0", "hugepages-1Gi"): 2 << 30}
    assert got[("1", "memory")] == 0  # node 1: nothing reserved, served as 0
