"""Hostile DRA files: the kubelet's DRA checkpoint and the CDI specs as a local user who can
write below the root could leave them (huge, deep, control characters, FIFOs, links out of
the root), and sysfs links out of the sysfs root. Each is refused and counted; the scan
keeps serving the rest.

The root is ``tests/fixtures/roots/kubernetes_dra`` (``build_kubernetes_dra_root.py``),
copied to a temporary directory and changed there. Scans run in a thread the test waits on
for at most ``HANG_SECONDS`` (a hang detector, not a measure of speed).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from tests.collectors.test_kubernetes_hostile_files import _fifo, _scan_guarded
from tests.conftest import ROOTS

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.cdi_spec import MAX_BYTES as CDI_MAX
from numa_exporter.parsers.kubelet.dra_manager_state import MAX_BYTES as DRA_MAX
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

BASE = ROOTS / "kubernetes_dra"
DRA_STATE = Path("var/lib/kubelet/dra_manager_state")
YAML_SPEC = Path("etc/cdi/gpu-example-gpu0.yaml")
JSON_SPEC = Path("run/cdi/gpu-example-gpu1.json")
FAMILY = "numa_kubelet_pod_dra_device_info"
SERIES: list[dict[str, str]] = []  # the DRA family's label sets of the last _scan


def _copy(tmp_path: Path, sys: bool = False) -> tuple[Path, Path]:
    rootfs = tmp_path / "rootfs"
    shutil.copytree(BASE / "rootfs", rootfs, symlinks=True)
    sysfs = BASE / "sys"
    if sys:
        sysfs = tmp_path / "sys"
        shutil.copytree(BASE / "sys", sysfs, symlinks=True)
    return rootfs, sysfs


def _scan(rootfs: Path, sysfs: Path = BASE / "sys", fifos: tuple[Path, ...] = ()
          ) -> tuple[Snapshot, dict[str, str], float]:
    """Return the snapshot, device -> node of the DRA family, and pid 600's DRA flag."""
    cfg = Config(roots=Roots(BASE / "proc", sysfs, rootfs), min_resident=0, detail_above=0)
    snap = _scan_guarded(Scanner(cfg), list(fifos))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    text = generate_latest(reg).decode()
    nodes: dict[str, str] = {}
    flag = -1.0
    SERIES.clear()
    for fam in text_string_to_metric_families(text):  # the exposition parses
        for s in fam.samples:
            if s.name == FAMILY:
                nodes[s.labels["device"]] = s.labels["node"]
                SERIES.append(dict(s.labels))
            if (s.name == "numa_process_binding_mismatch" and s.labels["pid"] == "600"
                    and s.labels["reason"] == "kubelet_dra_device_node"):
                flag = s.value
    return snap, nodes, flag


def _checkpoint(data: str) -> str:
    return json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())})


def _entries(entries: list[dict[str, Any]]) -> str:
    return json.dumps({"kind": "DRACheckpoint",
                       "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "Entries": entries})


def test_fifo_at_the_checkpoint_is_refused_and_counted(tmp_path: Path) -> None:
    rootfs, _ = _copy(tmp_path)
    _fifo(rootfs / DRA_STATE)
    snap, nodes, flag = _scan(rootfs, fifos=(rootfs / DRA_STATE,))
    assert snap.stats.read_errors == {("dra_manager_state", "error"): 1}
    assert (nodes, flag) == ({}, 0)
    assert snap.kubernetes.cpu_policy == "static"


def test_huge_checkpoint_is_refused_unread(tmp_path: Path) -> None:
    rootfs, _ = _copy(tmp_path)
    (rootfs / DRA_STATE).write_bytes(b"{" + b" " * DRA_MAX + b"}")
    snap, nodes, _ = _scan(rootfs)
    assert snap.stats.parse_errors == {"dra_manager_state": 1} and nodes == {}


def test_deep_checkpoint_with_a_valid_checksum_is_refused(tmp_path: Path) -> None:
    rootfs, _ = _copy(tmp_path)
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    (rootfs / DRA_STATE).write_text(_checkpoint(_entries([{"ClaimName": "c", "PodUIDs": {
        "p": {}}, "DriverState": {"d": {"Devices": [{"CDIDeviceIDs": deep}]}}}])))
    snap, nodes, _ = _scan(rootfs)
    assert snap.stats.parse_errors == {"dra_manager_state": 1} and nodes == {}


def test_control_characters_are_escaped_in_labels(tmp_path: Path) -> None:
    rootfs, _ = _copy(tmp_path)
    pod_a = "513cb897-0262-4868-826f-aa943ee45a38"
    (rootfs / DRA_STATE).write_text(_checkpoint(_entries([{
        "ClaimName": "c\x1b[2J\n# TYPE evil counter", "Namespace": "default",
        "PodUIDs": {pod_a: {}}, "DriverState": {"drv\x00\x07": {"Devices": [{
            "PoolName": "p\r\n", "DeviceName": "gpu-1\"}",
            "CDIDeviceIDs": ["gpu.example.com/gpu=gpu-1"]}]}}}])))
    snap, nodes, flag = _scan(rootfs)
    assert snap.stats.parse_errors == {}
    ((device, node),) = nodes.items()
    assert node == "1" and flag == 1  # still resolved and checked
    assert device == 'gpu-1"}'  # a quote is escaped by the exposition, kept as data
    (labels,) = SERIES
    for name in ("claim", "driver", "pool"):  # controls escaped by label_text
        assert not any(ord(c) < 0x20 for c in labels[name]), (name, labels[name])
    assert labels["claim"].startswith("default/c")


def test_fifo_at_a_cdi_spec_is_refused_the_other_spec_read(tmp_path: Path) -> None:
    rootfs, _ = _copy(tmp_path)
    _fifo(rootfs / YAML_SPEC)
    snap, nodes, flag = _scan(rootfs, fifos=(rootfs / YAML_SPEC,))
    assert snap.stats.read_errors == {("cdi_spec", "error"): 1}
    assert (nodes, flag) == ({"gpu-0": "", "gpu-1": "1"}, 1)


def test_huge_deep_and_aliased_cdi_specs_are_refused_and_counted(tmp_path: Path) -> None:
    rootfs, _ = _copy(tmp_path)
    cdi = rootfs / "etc" / "cdi"
    (cdi / "huge.json").write_bytes(b" " * (CDI_MAX + 1))
    (cdi / "deep.yaml").write_text("kind: a.com/b\nx: " + "[" * 500 + "]" * 500 + "\n")
    laughs = ["kind: gpu.example.com/gpu", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (cdi / "laughs.yaml").write_text("\n".join(laughs) + "\n")
    (cdi / "ctl.yaml").write_text("kind: gpu.example.com/gpu\ndevices:\n- name: \"\\e[2J\"\n")
    snap, nodes, flag = _scan(rootfs)
    assert snap.stats.parse_errors == {"cdi_spec": 4}
    assert (nodes, flag) == ({"gpu-0": "0", "gpu-1": "1"}, 1)


def test_cdi_links_out_of_the_root_stay_inside_it(tmp_path: Path) -> None:
    """A spec outside the root would move gpu-1 to node 0 (and clear the flag) if a link
    could reach it: relative and absolute links both resolve inside the root instead."""
    rootfs, _ = _copy(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"kind": "gpu.example.com/gpu", "devices": [
        {"name": "gpu-1", "containerEdits": {"deviceNodes": [
            {"path": "/dev/dri/renderD128", "major": 226, "minor": 128}]}}]}))
    os.symlink("../../../outside.json", rootfs / "run" / "cdi" / "zz-relative.json")
    os.symlink(str(outside), rootfs / "run" / "cdi" / "zz-absolute.json")
    snap, nodes, flag = _scan(rootfs)
    assert (nodes, flag) == ({"gpu-0": "0", "gpu-1": "1"}, 1)
    assert snap.stats.read_errors == {} and snap.stats.parse_errors == {}


def test_sysfs_device_link_out_of_the_sysfs_root_is_not_followed(tmp_path: Path) -> None:
    rootfs, sysfs = _copy(tmp_path, sys=True)
    fake = tmp_path / "elsewhere" / "0000:80:02.0"
    (fake / "drm" / "renderD129").mkdir(parents=True)
    (fake / "numa_node").write_text("0\n")
    link = sysfs / "dev" / "char" / "226:129"
    link.unlink()
    os.symlink(str(fake / "drm" / "renderD129"), link)
    _, nodes, flag = _scan(rootfs, sysfs)
    assert (nodes, flag) == ({"gpu-0": "0", "gpu-1": ""}, 0)
