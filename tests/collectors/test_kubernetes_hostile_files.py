"""Hostile files under ``--path.rootfs``: special files where the kubelet's and the runtime's
files belong, and a pod log directory among 100,000 others.

The root is ``tests/fixtures/roots/kubernetes`` (see ``build_kubernetes_root.py``), copied to
a temporary directory and changed there as a local user who can write below the root could.
A scan runs in a thread that the test waits on for at most ``HANG_SECONDS``: a hang
detector (the scan thread blocked for good), not a measure of speed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path

import pytest
from tests.conftest import ROOTS

from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

BASE = ROOTS / "kubernetes"
HANG_SECONDS = 30.0
CID_A = "c0a1" * 16
SPEC_A = Path("run/containerd/io.containerd.runtime.v2.task/k8s.io") / CID_A / "config.json"
CPU_STATE = Path("var/lib/kubelet/cpu_manager_state")


def _root(tmp_path: Path) -> Path:
    rootfs = tmp_path / "rootfs"
    shutil.copytree(BASE / "rootfs", rootfs)
    return rootfs


def _fifo(at: Path) -> None:
    at.unlink()
    os.mkfifo(at)


def _release(fifo: Path) -> None:
    """Open a FIFO for writing, so that a reader blocked in open() returns (cleanup)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _scan_guarded(scanner: Scanner, fifos: list[Path]) -> Snapshot:
    """Return the scan's snapshot; fail when it has not ended after ``HANG_SECONDS``."""
    got: list[Snapshot] = []
    thread = threading.Thread(target=lambda: got.append(scanner.scan()), daemon=True)
    thread.start()
    thread.join(HANG_SECONDS)
    if thread.is_alive():
        for f in fifos:
            _release(f)
        thread.join(HANG_SECONDS)
        pytest.fail(f"the scan was still blocked after {HANG_SECONDS:g} s")
    assert got, "the scan raised"
    return got[0]


def _named(snap: Snapshot) -> dict[int, tuple[str, str, str]]:
    return {p.pid: (p.kubernetes.namespace, p.kubernetes.pod, p.kubernetes.container)
            for p in snap.processes
            if p.kubernetes is not None and p.kubernetes.kind == "container"}


def test_fifo_at_cpu_manager_state_is_refused_and_counted(tmp_path: Path) -> None:
    rootfs = _root(tmp_path)
    _fifo(rootfs / CPU_STATE)
    cfg = Config(roots=Roots(BASE / "proc", BASE / "sys", rootfs), min_resident=0)
    scanner = Scanner(cfg)
    for scans in (1, 2):  # refused and counted on every scan (the counts are totals)
        snap = _scan_guarded(scanner, [rootfs / CPU_STATE])
        assert snap.stats.read_errors == {("cpu_manager_state", "error"): scans}
        assert _named(snap) == {600: ("default", "gpu-infer-0", "app"),
                                601: ("ml", "trainer-7d9f5c-x2k4q", "app"),
                                603: ("kube-system", "kube-proxy-x7k2p", "")}
        trainer = next(p for p in snap.processes if p.pid == 601)
        assert trainer.kubelet is not None and trainer.kubelet.cpus is None
        assert (trainer.home.source, trainer.home.nodes) == ("kubelet", frozenset({0}))
    # the FIFO replaced by the kubelet's file: its CPUs come back on the next scan
    (rootfs / CPU_STATE).unlink()
    shutil.copy(BASE / "rootfs" / CPU_STATE, rootfs / CPU_STATE)
    snap = _scan_guarded(scanner, [])
    assert snap.stats.read_errors == {("cpu_manager_state", "error"): 2}  # no new one
    trainer = next(p for p in snap.processes if p.pid == 601)
    assert trainer.kubelet is not None and trainer.kubelet.cpus == frozenset({14, 15, 16})


def test_fifo_at_config_json_names_the_pod_from_its_log_directory(tmp_path: Path) -> None:
    rootfs = _root(tmp_path)
    _fifo(rootfs / SPEC_A)
    cfg = Config(roots=Roots(BASE / "proc", BASE / "sys", rootfs), min_resident=0)
    snap = _scan_guarded(Scanner(cfg), [rootfs / SPEC_A])
    assert snap.stats.read_errors == {("containerd_spec", "error"): 1}
    named = _named(snap)
    # no spec: the container's name is unknown, the pod named from /var/log/pods
    assert named[600] == ("default", "gpu-infer-0", "")
    assert named[601] == ("ml", "trainer-7d9f5c-x2k4q", "app")


@pytest.mark.parametrize("target", ["/dev/null", "/dev/zero"])
def test_link_to_a_character_device_is_refused(tmp_path: Path, target: str) -> None:
    """A checkpoint linked to a host device (``/dev/kmsg`` blocks a reader like a FIFO;
    ``/dev/zero`` never ends): the link is followed inside the root, to the root's own
    device node, which is refused before a byte is read."""
    rootfs = _root(tmp_path)
    (rootfs / "dev").mkdir()
    real = os.stat(target)
    try:
        os.mknod(rootfs / target.lstrip("/"), real.st_mode, real.st_rdev)
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    (rootfs / CPU_STATE).unlink()
    os.symlink(target, rootfs / CPU_STATE)
    cfg = Config(roots=Roots(BASE / "proc", BASE / "sys", rootfs), min_resident=0)
    snap = _scan_guarded(Scanner(cfg), [])
    assert snap.stats.read_errors == {("cpu_manager_state", "error"): 1}


def test_pod_log_directory_among_100000(tmp_path: Path) -> None:
    """100,000 log directories (the pods' among them, in directory-hash order) and the
    runtime's specs absent: every pod is still named (the pause container too: without its
    spec it cannot be told from the others), nothing is counted."""
    rootfs = _root(tmp_path)
    shutil.rmtree(rootfs / "run")
    logs = rootfs / "var" / "log" / "pods"
    for i in range(100_000):
        os.mkdir(logs / f"ns{i % 97}_filler-{i}_{i:08x}-0000-4000-8000-000000000000")
    cfg = Config(roots=Roots(BASE / "proc", BASE / "sys", rootfs), min_resident=0)
    snap = _scan_guarded(Scanner(cfg), [])
    assert snap.stats.read_errors == {}
    assert _named(snap) == {600: ("default", "gpu-infer-0", ""),
                            602: ("default", "gpu-infer-0", ""),
                            601: ("ml", "trainer-7d9f5c-x2k4q", ""),
                            603: ("kube-system", "kube-proxy-x7k2p", "")}
