"""The Kubernetes reader on fixture trees: attribution, assignments, errors, the rootfs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import structlog

from numa_exporter.model.kubernetes import (
    Assignment,
    ContainerRef,
    KubernetesView,
    kubelet_home,
    kubelet_mismatches,
)
from numa_exporter.parsers.proc_cgroup import ProcCgroup, parse_proc_cgroup
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.kubernetes import KubernetesReader
from numa_exporter.sources.errors import Denied
from numa_exporter.sources.rootfs import RootFS

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
A = "513cb897-0262-4868-826f-aa943ee45a38"
B = "94283d1b-ce5a-4797-bff8-0cf0c7143b2b"
C = "0f6c2d9e-8b41-4a57-9d3c-5e7f1a2b4c6d"
CPU_NODE = {c: 0 if c < 14 else 1 for c in range(28)}  # the fixture host: 2 x 14 CPUs
NODES = frozenset({0, 1})


def _groups(root: Path) -> list[ProcCgroup]:
    return [parse_proc_cgroup(p.read_bytes())
            for p in sorted((root / "proc").glob("*/cgroup"))]


def _read(root: Path, errors: ErrorReporter | None = None,
          reader: KubernetesReader | None = None) -> KubernetesView:
    reader = reader or KubernetesReader(RootFS(root))
    return reader.read(_groups(root), CPU_NODE, NODES, errors or ErrorReporter(quiet=True))


def test_containerd_systemd_v2_attribution() -> None:
    root = FIX / "containerd-systemd-v2"
    errors = ErrorReporter(quiet=True)
    view = _read(root, errors)
    slice_a = "/kubepods.slice/kubepods-pod513cb897_0262_4868_826f_aa943ee45a38.slice"
    slice_b = "/kubepods.slice/kubepods-pod94283d1b_ce5a_4797_bff8_0cf0c7143b2b.slice"
    slice_c = ("/kubepods.slice/kubepods-besteffort.slice/"
               "kubepods-besteffort-pod0f6c2d9e_8b41_4a57_9d3c_5e7f1a2b4c6d.slice")
    assert view.cgroups == {
        f"{slice_a}/cri-containerd-{'c0a1' * 16}.scope": ContainerRef(
            A, "Guaranteed", "default", "gpu-infer-0", "app", "containerd://" + "c0a1" * 16,
            "container", "containerd"),
        f"{slice_a}/cri-containerd-{'5a0a' * 16}.scope": ContainerRef(
            A, "Guaranteed", "default", "gpu-infer-0", "", "containerd://" + "5a0a" * 16,
            "sandbox", "containerd"),
        f"{slice_b}/cri-containerd-{'c0b2' * 16}.scope": ContainerRef(
            B, "Guaranteed", "ml", "trainer-7d9f5c-x2k4q", "app",
            "containerd://" + "c0b2" * 16, "container", "containerd"),
        # no runtime state: names from the log directory, no container name
        f"{slice_c}/cri-containerd-{'c0c3' * 16}.scope": ContainerRef(
            C, "BestEffort", "kube-system", "kube-proxy-x7k2p", "",
            "containerd://" + "c0c3" * 16, "container", "containerd"),
    }
    assert view.pods == {A: ("default", "gpu-infer-0"), B: ("ml", "trainer-7d9f5c-x2k4q"),
                         C: ("kube-system", "kube-proxy-x7k2p")}
    assert errors.parse_errors == {} and errors.read_errors == {}


def test_containerd_systemd_v2_assignments() -> None:
    view = _read(FIX / "containerd-systemd-v2")
    assert (view.cpu_policy, view.memory_policy) == ("static", "Static")
    a = view.assignments[(A, "app")]
    assert a == Assignment(frozenset({0}), {"memory": frozenset({0})}, frozenset({1, 2, 3}),
                           frozenset({0}), {"nvidia.com/gpu": frozenset({0})})
    b = view.assignments[(B, "app")]
    assert b.cpu_nodes == frozenset({1}) and b.cpus == frozenset({14, 15, 16})
    assert b.memory_nodes == frozenset({0})
    assert b.memory_by_type == {"memory": frozenset({0}), "hugepages-1Gi": frozenset({0})}
    assert b.devices == {"nvidia.com/gpu": frozenset({1})}
    assert b.by_resource() == {"cpu": frozenset({1}), "memory": frozenset({0}),
                               "hugepages-1Gi": frozenset({0}),
                               "nvidia.com/gpu": frozenset({1})}
    ref_a = next(r for r in view.cgroups.values() if r.uid == A and r.kind == "container")
    assert view.assignment_for(ref_a) == a
    # the kubelet's home and promises
    assert kubelet_home(a) == frozenset({0}) and kubelet_home(b) == frozenset({0})
    assert kubelet_mismatches(b, {0: 100}, frozenset({1}))["kubelet_device_node"] is True
    assert kubelet_mismatches(a, {0: 100}, frozenset({0})) == dict.fromkeys(
        ("kubelet_memory_nodes", "kubelet_cpu_nodes", "kubelet_device_node",
         "kubelet_dra_device_node"), False)


def test_crio_cgroupfs_v1() -> None:
    errors = ErrorReporter(quiet=True)
    view = _read(FIX / "crio-cgroupfs-v1", errors)
    d = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
    e = "2d1e3f4a-5b6c-4d7e-8f90-a1b2c3d4e5f6"
    by_kind = {(r.uid, r.kind): r for r in view.cgroups.values()}
    assert by_kind[(d, "container")] == ContainerRef(
        d, "Burstable", "cache", "redis-0", "redis", "cri-o://" + "d0d4" * 16, "container",
        "cri-o")
    assert by_kind[(d, "conmon")].container == "" and by_kind[(d, "sandbox")].pod == "redis-0"
    # nothing names this pod: the UID and the container ID still join kube-state-metrics
    assert by_kind[(e, "container")] == ContainerRef(
        e, "Guaranteed", "", "", "", "cri-o://" + "e0e5" * 16, "container", "cri-o")
    assert view.assignments == {} and view.cpu_policy == ""
    assert errors.parse_errors == {} and errors.read_errors == {}


def test_broken_checkpoints_cost_only_themselves() -> None:
    errors = ErrorReporter(quiet=True)
    view = _read(FIX / "broken-checkpoints", errors)
    (ref,) = view.cgroups.values()
    assert (ref.namespace, ref.pod, ref.uid) == ("default", "gpu-infer-0", A)
    assert view.assignments == {}  # CPUs refused (checksum), memory node 7 dropped
    assert errors.parse_errors == {"cpu_manager_state": 1, "kubelet_internal_checkpoint": 1,
                                   "kubelet_assignment": 1}
    assert view.cpu_policy == "" and view.memory_policy == "Static"


def test_broken_checkpoints_say_so_once(capsys: pytest.CaptureFixture[str]) -> None:
    structlog.configure(processors=[structlog.processors.KeyValueRenderer()],
                        logger_factory=structlog.PrintLoggerFactory())
    try:
        reader = KubernetesReader(RootFS(FIX / "broken-checkpoints"))
        errors = ErrorReporter()
        for _ in range(3):
            _read(FIX / "broken-checkpoints", errors, reader)
        out = capsys.readouterr().out
    finally:
        structlog.reset_defaults()
    assert out.count("source='cpu_manager_state'") == 1 and "refuse" in out
    assert out.count("host does not have: 7") == 1
    assert errors.parse_errors["cpu_manager_state"] == 3  # counted every read


def test_no_pods_no_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A host without Kubernetes: no kubelet file is looked at, one debug line."""
    calls: list[str] = []

    class Spy(RootFS):
        def read(self, host_path: str, source: str, limit: int) -> bytes | None:
            calls.append(host_path)
            return super().read(host_path, source, limit)

        def listdir(self, host_path: str, source: str) -> tuple[str, ...] | None:
            calls.append(host_path)
            return super().listdir(host_path, source)

    reader = KubernetesReader(Spy(FIX / "containerd-systemd-v2"))
    groups = [parse_proc_cgroup(b"0::/system.slice/sshd.service\n")]
    structlog.configure(processors=[structlog.processors.KeyValueRenderer()],
                        logger_factory=structlog.PrintLoggerFactory())
    try:
        for _ in range(3):
            view = reader.read(groups, CPU_NODE, NODES, ErrorReporter(quiet=True))
        out = capsys.readouterr().out
    finally:
        structlog.reset_defaults()
    assert view == KubernetesView() and calls == []
    assert out.count("no process in a Kubernetes pod cgroup") == 1


def test_checkpoints_are_parsed_again_only_when_replaced(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(FIX / "containerd-systemd-v2", root)
    parsed: list[str] = []

    class Spy(RootFS):
        def read(self, host_path: str, source: str, limit: int) -> bytes | None:
            parsed.append(source)
            return super().read(host_path, source, limit)

    reader = KubernetesReader(Spy(root))
    _read(root, reader=reader)
    _read(root, reader=reader)
    assert parsed.count("cpu_manager_state") == 1
    # the kubelet writes a new file and renames it over the old one
    state = root / "var" / "lib" / "kubelet" / "cpu_manager_state"
    new = state.with_name(".tmp")
    new.write_text('{"policyName":"none","defaultCpuSet":"0-27","checksum":0}')
    os.replace(new, state)
    view = _read(root, reader=reader)
    assert parsed.count("cpu_manager_state") == 2
    assert view.cpu_policy == "none" and view.assignments[(A, "app")].cpus is None


def test_nodes_and_cpus_the_host_lacks() -> None:
    errors = ErrorReporter(quiet=True)
    reader = KubernetesReader(RootFS(FIX / "containerd-systemd-v2"))
    small = {c: 0 for c in range(14)}  # CPUs 14-27 are not on this host
    view = reader.read(_groups(FIX / "containerd-systemd-v2"), small, frozenset({0}), errors)
    b = view.assignments[(B, "app")]
    assert b.cpus is None and b.cpu_nodes is None  # CPUs 14-16 unknown: left out
    assert b.devices == {"nvidia.com/gpu": frozenset()}  # node 1 unknown: left out
    assert b.memory_nodes == frozenset({0})
    assert errors.parse_errors == {"kubelet_assignment": 2}


def test_unreadable_pod_logs_are_a_counted_read_error(tmp_path: Path) -> None:
    class Locked(RootFS):
        def listdir(self, host_path: str, source: str) -> tuple[str, ...] | None:
            raise Denied(source, host_path)

    errors = ErrorReporter(quiet=True)
    reader = KubernetesReader(Locked(FIX / "containerd-systemd-v2"))
    view = reader.read(_groups(FIX / "containerd-systemd-v2"), CPU_NODE, NODES, errors)
    assert errors.read_errors == {("pod_logs", "denied"): 1}
    ref_c = next(r for r in view.cgroups.values() if r.uid == C)
    assert ref_c.namespace == ""  # only the log directory named it
    assert view.assignments[(A, "app")].cpus == frozenset({1, 2, 3})


# --- the root filesystem ----------------------------------------------------------------

def test_rootfs_links_stay_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "data" / "kubelet").mkdir(parents=True)
    (root / "data" / "kubelet" / "cpu_manager_state").write_text("x")
    (root / "var" / "lib").mkdir(parents=True)
    os.symlink("/data/kubelet", root / "var" / "lib" / "kubelet")  # absolute: host path
    (root / "run").mkdir()
    os.symlink("../run", root / "var" / "run")
    os.symlink("/../../../../etc", root / "escape")
    fs = RootFS(root)
    assert fs.read("/var/lib/kubelet/cpu_manager_state", "t", 10) == b"x"
    assert fs.resolve("/var/run") == root / "run"
    assert fs.resolve("/escape/passwd") == root / "etc" / "passwd"  # not the real /etc
    assert fs.read("/escape/passwd", "t", 10) is None
    os.symlink("loop", root / "loop")
    with pytest.raises(Exception, match="too many links"):
        fs.read("/loop", "t", 10)


def test_rootfs_kubelet_root_dir_and_bounds(tmp_path: Path) -> None:
    (tmp_path / "srv" / "kubelet").mkdir(parents=True)
    (tmp_path / "srv" / "kubelet" / "memory_manager_state").write_bytes(b"y" * 100)
    fs = RootFS(tmp_path, "/srv/kubelet/")
    assert fs.kubelet_path("memory_manager_state") == "/srv/kubelet/memory_manager_state"
    assert fs.read(fs.kubelet_path("memory_manager_state"), "t", 10) == b"y" * 11
    assert fs.read("/srv/kubelet/absent", "t", 10) is None
    assert fs.listdir("/srv/absent", "t") is None
    assert fs.signature("/srv/absent") is None


class _Ticking:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_rootfs_read_is_bounded_in_time(tmp_path: Path) -> None:
    """A read still going after ``read_seconds`` (a slow network file system, a file
    growing as it is read) is refused, not waited for; under the bound it is read whole."""
    from numa_exporter.sources.errors import Refused
    from numa_exporter.sources.rootfs import CHUNK

    (tmp_path / "big").write_bytes(b"z" * (CHUNK * 4))
    slow = RootFS(tmp_path, read_seconds=2.5, clock=_Ticking(1.0))
    with pytest.raises(Refused, match=r"not read within 2.5 s \(196608 bytes read\)"):
        slow.read("/big", "t", CHUNK * 8)
    fast = RootFS(tmp_path, read_seconds=2.5, clock=_Ticking(0.1))
    assert fast.read("/big", "t", CHUNK * 8) == b"z" * (CHUNK * 4)


def test_rootfs_listing_cut_at_its_time_bound_is_counted(tmp_path: Path) -> None:
    """A listing that runs past ``list_seconds`` is cut and counted as a read error; the
    pods found before the cut are still named."""
    logs = tmp_path / "var" / "log" / "pods"
    logs.mkdir(parents=True)
    for i in range(3000):
        (logs / f"ns_p-{i}_{i:08x}-0000-4000-8000-000000000000").mkdir()
    fs = RootFS(tmp_path, list_seconds=1.5, clock=_Ticking(1.0))
    errors = ErrorReporter(quiet=True)
    pods = KubernetesReader(fs).pod_names(errors)
    assert errors.read_errors == {("pod_logs", "error"): 1}
    assert len(pods) == 2048  # checked every 1024 names: cut at the second check


def test_rootfs_listing_kept_while_the_directory_is_unchanged(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").mkdir()
    old = 1_000_000_000 * 1000  # an mtime long before the listing (not racy)
    os.utime(tmp_path / "d", ns=(old, old))
    fs = RootFS(tmp_path)
    first = fs.listdir("/d", "t")
    assert first == ("a",) and fs.listdir("/d", "t") is first  # kept, not listed again
    (tmp_path / "d" / "b").mkdir()  # the directory's mtime moves
    assert fs.listdir("/d", "t") == ("a", "b")  # changed just now: listed, not kept
    assert fs.listdir("/d", "t") is not fs.listdir("/d", "t")
