"""DRA devices on the ``kubernetes_dra`` root: the info family, the binding mismatch, and
checkpoints the kubelet would refuse or read by an older rule.

Expected values come from ``EXPECTED.json``, written by
``tests/fixtures/build_kubernetes_dra_root.py`` from its tables (the GPUs' nodes from the
sysfs it writes), not from the exporter's parsers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

BASE = ROOTS / "kubernetes_dra"
EXP: dict[str, Any] = json.loads((BASE / "EXPECTED.json").read_text())
VECTORS = json.loads((ROOTS.parent / "kubelet" / "dra-vectors.json").read_text())["vectors"]
DRA_STATE = Path("var/lib/kubelet/dra_manager_state")
REASONS = ("kubelet_memory_nodes", "kubelet_cpu_nodes", "kubelet_device_node",
           "kubelet_dra_device_node")
FAMILY = "numa_kubelet_pod_dra_device_info"


def _scan(rootfs: Path = BASE / "rootfs", sysfs: Path = BASE / "sys",
          scanner: Scanner | None = None) -> tuple[Snapshot, str]:
    cfg = Config(roots=Roots(BASE / "proc", sysfs, rootfs), min_resident=0,
                 detail_above=0)
    snap = (scanner or Scanner(cfg)).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return snap, generate_latest(reg).decode()


def _copy(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    shutil.copytree(BASE / "rootfs", rootfs, symlinks=True)
    return rootfs


def _mismatch(text: str, pid: str) -> dict[str, float]:
    return {s["reason"]: v for s, v in values(text, "numa_process_binding_mismatch", pid=pid)
            if s["reason"] in REASONS}


@pytest.fixture(scope="module")
def scanned() -> tuple[Snapshot, str]:
    return _scan()


def test_the_pods_dra_devices_and_their_nodes(scanned: tuple[Snapshot, str]) -> None:
    _, text = scanned
    got = sorted((s for s, v in values(text, FAMILY) if v == 1),
                 key=lambda d: sorted(d.items()))
    want = [{**d, "claim": f"{d['namespace']}/{d['claim']}"} for d in EXP["dra_devices"]]
    assert got == sorted(want, key=lambda d: sorted(d.items()))


def test_gpu_on_node_1_is_flagged_gpu_on_node_0_is_not(scanned: tuple[Snapshot, str]) -> None:
    snap, text = scanned
    for pid, e in EXP["processes"].items():
        if e["kubelet_mismatch"]:
            assert _mismatch(text, pid) == e["kubelet_mismatch"], pid
    assert snap.stats.parse_errors == {} and snap.stats.read_errors == {}


def test_wrong_checksum_is_refused_and_counted(tmp_path: Path) -> None:
    rootfs = _copy(tmp_path)
    top = json.loads((rootfs / DRA_STATE).read_text())
    top["Checksum"] ^= 1
    (rootfs / DRA_STATE).write_text(json.dumps(top))
    snap, text = _scan(rootfs)
    assert snap.stats.parse_errors == {"dra_manager_state": 1}
    assert values(text, FAMILY) == []  # nothing of a refused file is used
    assert _mismatch(text, "600")["kubelet_dra_device_node"] == 0
    assert snap.kubernetes.cpu_policy == "static"  # the other checkpoints still read


def test_legacy_checkpoint_is_read_by_its_own_rule(tmp_path: Path) -> None:
    """The kubelet's own legacy vector (state_checkpoint_test.go) verifies by the FNV rule
    its kubelet used; its pod is not on this node, so only its info series appears."""
    rootfs = _copy(tmp_path)
    (rootfs / DRA_STATE).write_text(VECTORS["legacy_old"]["content"])
    snap, text = _scan(rootfs)
    assert snap.stats.parse_errors == {}
    assert [s for s, _ in values(text, FAMILY)] == [{
        "namespace": "", "pod": "", "uid": "139cdb46-f989-4f17-9561-ca10cfb509a6",
        "driver": "test-driver.cdi.k8s.io", "pool": "", "device": "cdi-example",
        "claim": "default/example", "node": ""}]


def test_legacy_checkpoint_with_a_wrong_checksum_is_refused(tmp_path: Path) -> None:
    rootfs = _copy(tmp_path)
    (rootfs / DRA_STATE).write_text(VECTORS["legacy_invalid"]["content"])
    snap, text = _scan(rootfs)
    assert snap.stats.parse_errors == {"dra_manager_state": 1}
    assert values(text, FAMILY) == []


def test_without_the_var_run_link_the_json_spec_is_not_found(tmp_path: Path) -> None:
    """The JSON spec is only reachable as /var/run/cdi through var/run -> /run: with the
    link gone, gpu-1's node is unknown and pod A is no longer flagged."""
    rootfs = _copy(tmp_path)
    (rootfs / "var" / "run").unlink()
    _, text = _scan(rootfs)
    nodes = {s["device"]: s["node"] for s, _ in values(text, FAMILY)}
    assert nodes == {"gpu-0": "0", "gpu-1": ""}
    assert _mismatch(text, "600")["kubelet_dra_device_node"] == 0


def test_a_changed_spec_is_read_again_by_the_same_scanner(tmp_path: Path) -> None:
    """The resolution is kept while the checkpoint and the specs are unchanged, and made
    again when a spec changes (a driver rewrites it: a new file renamed over the old)."""
    rootfs = _copy(tmp_path)
    cfg = Config(roots=Roots(BASE / "proc", BASE / "sys", rootfs), min_resident=0,
                 detail_above=0)
    scanner = Scanner(cfg)
    for _ in range(2):
        _, text = _scan(rootfs, scanner=scanner)
        assert _mismatch(text, "600")["kubelet_dra_device_node"] == 1
    spec_path = rootfs / "run" / "cdi" / "gpu-example-gpu1.json"
    spec = json.loads(spec_path.read_text())
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["minor"] = 128  # node 0's GPU
    new = spec_path.with_suffix(".tmp")
    new.write_text(json.dumps(spec))
    new.rename(spec_path)
    _, text = _scan(rootfs, scanner=scanner)
    assert {s["device"]: s["node"] for s, _ in values(text, FAMILY)} == {
        "gpu-0": "0", "gpu-1": "0"}
    assert _mismatch(text, "600")["kubelet_dra_device_node"] == 0
