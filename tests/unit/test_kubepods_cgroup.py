"""cgroup path -> pod, QoS class, container and runtime, for every driver, runtime, QoS and
cgroup version. Each case names the kubelet or runtime source whose naming it follows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.kubepods_cgroup import (
    KubepodsCgroup,
    kubepods_of,
    parse_kubepods_cgroup,
)
from numa_exporter.parsers.proc_cgroup import parse_proc_cgroup

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
UID = "8f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6a7b"
USC = "8f1c2a3b_4d5e_4f60_8a1b_2c3d4e5f6a7b"  # escapeSystemdCgroupName: "-" -> "_"
STATIC_UID = "8daa50c3a64c9ff60bb9eab7b44b56fd"  # static pods: a hash of the manifest
CID = "4c0f9e2d" * 8

# kubelet: cgroup_manager_linux.go ToSystemd() (each slice repeats its ancestors' names),
# pod_container_manager_linux.go GetPodContainerName() ("pod" + UID),
# qos_container_manager_linux.go (Guaranteed pods directly under kubepods).
SYSTEMD_POD = {
    "Guaranteed": f"/kubepods.slice/kubepods-pod{USC}.slice",
    "Burstable": f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{USC}.slice",
    "BestEffort": f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{USC}.slice",
}
# kubelet: cgroup_manager_linux.go ToCgroupfs()
CGROUPFS_POD = {
    "Guaranteed": f"/kubepods/pod{UID}",
    "Burstable": f"/kubepods/burstable/pod{UID}",
    "BestEffort": f"/kubepods/besteffort/pod{UID}",
}
# runtime -> (systemd leaf, cgroupfs leaf, expected runtime for the cgroupfs leaf)
LEAVES = {
    # containerd pkg/cri/server/helpers_linux.go getCgroupsPath: "<slice>:cri-containerd:<id>"
    # which runc's systemd driver makes "cri-containerd-<id>.scope"; cgroupfs: <parent>/<id>
    "containerd": (f"cri-containerd-{CID}.scope", CID, ""),
    # CRI-O internal/config/cgmgr/systemd.go / cgroupfs.go: crio-<id>(.scope)
    "cri-o": (f"crio-{CID}.scope", f"crio-{CID}", "cri-o"),
    # dockershim / cri-dockerd with runc: docker-<id>.scope; cgroupfs: <parent>/<id>
    "docker": (f"docker-{CID}.scope", CID, ""),
    # libpod: libpod-<id>.scope / libpod-<id>
    "podman": (f"libpod-{CID}.scope", f"libpod-{CID}", "podman"),
}


def _v1_file(path: str) -> bytes:
    """A cgroup v1 /proc/<pid>/cgroup: the same path in every hierarchy, as runc writes it."""
    ctrls = ("12:hugetlb", "11:pids", "10:memory", "9:cpuset", "8:cpu,cpuacct", "7:devices",
             "6:freezer", "5:blkio", "4:net_cls,net_prio", "3:perf_event", "2:rdma",
             "1:name=systemd")
    return "".join(f"{c}:{path}\n" for c in ctrls).encode()


def _v2_file(path: str) -> bytes:
    return f"0::{path}\n".encode()


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("qos", ["Guaranteed", "Burstable", "BestEffort"])
@pytest.mark.parametrize("runtime", sorted(LEAVES))
@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_driver_runtime_qos_version(driver: str, runtime: str, qos: str, version: str) -> None:
    systemd_leaf, cgroupfs_leaf, cgroupfs_runtime = LEAVES[runtime]
    if driver == "systemd":
        path = f"{SYSTEMD_POD[qos]}/{systemd_leaf}"
        want_runtime = runtime
    else:
        path = f"{CGROUPFS_POD[qos]}/{cgroupfs_leaf}"
        want_runtime = cgroupfs_runtime
    data = _v1_file(path) if version == "v1" else _v2_file(path)
    got = kubepods_of(parse_proc_cgroup(data))
    assert got == KubepodsCgroup(UID, qos, driver, CID, want_runtime, "container")  # type: ignore[arg-type]


@pytest.mark.parametrize("driver,path", [
    ("systemd", f"{SYSTEMD_POD['Burstable']}/crio-conmon-{CID}.scope"),
    ("cgroupfs", f"{CGROUPFS_POD['Burstable']}/crio-conmon-{CID}"),
])
def test_crio_conmon_is_not_a_container(driver: str, path: str) -> None:
    # CRI-O internal/config/cgmgr: the monitor runs in crio-conmon-<id>(.scope)
    got = parse_kubepods_cgroup(path)
    assert got is not None and got.kind == "conmon" and got.runtime == "cri-o"
    assert got.container_id == CID and got.driver == driver


def test_podman_conmon() -> None:
    got = parse_kubepods_cgroup(f"{SYSTEMD_POD['Guaranteed']}/libpod-conmon-{CID}.scope")
    assert got is not None and (got.kind, got.runtime) == ("conmon", "podman")


@pytest.mark.parametrize("qos", ["Guaranteed", "Burstable", "BestEffort"])
def test_containerd_literal_systemd_path_under_cgroupfs_runc(qos: str) -> None:
    """containerd with runc's cgroupfs driver while the kubelet uses systemd: runc takes
    "<slice>:cri-containerd:<id>" literally, below containerd's own cgroup (containerd
    issue 5152 shows /system.slice/containerd.service/kubepods-...slice:cri-containerd:<id>)."""
    slice_name = SYSTEMD_POD[qos].rsplit("/", 1)[1]
    for version_file in (_v1_file, _v2_file):
        path = f"/system.slice/containerd.service/{slice_name}:cri-containerd:{CID}"
        got = kubepods_of(parse_proc_cgroup(version_file(path)))
        assert got == KubepodsCgroup(UID, qos, "cgroupfs", CID, "containerd", "container")  # type: ignore[arg-type]


@pytest.mark.parametrize("qos", ["Guaranteed", "Burstable", "BestEffort"])
def test_pod_cgroup_itself(qos: str) -> None:
    for path, driver in ((SYSTEMD_POD[qos], "systemd"), (CGROUPFS_POD[qos], "cgroupfs")):
        assert parse_kubepods_cgroup(path) == KubepodsCgroup(UID, qos, driver)  # type: ignore[arg-type]
        assert parse_kubepods_cgroup(path).container_id_label == ""  # type: ignore[union-attr]


def test_static_pod_uid_is_32_hex_digits() -> None:
    # kubelet pkg/kubelet/config/common.go: a static pod's UID is a hash of its manifest
    got = parse_kubepods_cgroup(
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/"
        f"cri-containerd-{CID}.scope")
    assert got is not None and got.pod_uid == STATIC_UID and got.qos == "Burstable"


def test_cgroup_root_prefix() -> None:
    # --cgroup-root=/kubelet with systemd: every slice name carries the prefix
    got = parse_kubepods_cgroup(
        "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{USC}.slice/docker-{CID}.scope")
    assert got == KubepodsCgroup(UID, "BestEffort", "systemd", CID, "docker", "container")
    got = parse_kubepods_cgroup(f"/kubelet/kubepods/burstable/pod{UID}/{CID}")
    assert got == KubepodsCgroup(UID, "Burstable", "cgroupfs", CID, "", "container")


def test_sub_cgroups_of_a_container_belong_to_it() -> None:
    # a container running systemd (init.scope) or making its own sub-cgroups (cgroup v2)
    base = f"{SYSTEMD_POD['Burstable']}/cri-containerd-{CID}.scope"
    for tail in ("/init.scope", "/system.slice/app.service", "/a/b/c"):
        got = parse_kubepods_cgroup(base + tail)
        assert got is not None and got.container_id == CID and got.kind == "container"


def test_nested_pod_names_inside_a_container_do_not_win() -> None:
    """A container may name its own sub-cgroups after another pod; the outer pod wins."""
    other = "11111111_2222_3333_4444_555555555555"
    path = (f"{SYSTEMD_POD['Burstable']}/cri-containerd-{CID}.scope/kubepods.slice/"
            f"kubepods-pod{other}.slice/cri-containerd-{'f' * 64}.scope")
    got = parse_kubepods_cgroup(path)
    assert got is not None and got.pod_uid == UID and got.container_id == CID


def test_namespace_relative_paths() -> None:
    """Seen from inside a pod (a private cgroup namespace) other pods' paths climb first."""
    got = parse_kubepods_cgroup(f"/../../kubepods-besteffort-pod{USC}.slice/crio-{CID}.scope")
    assert got == KubepodsCgroup(UID, "BestEffort", "systemd", CID, "cri-o", "container")
    # cgroupfs, sibling pod of the same QoS class: the class is not visible
    got = parse_kubepods_cgroup(f"/../../pod{UID}/{CID}")
    assert got == KubepodsCgroup(UID, "", "cgroupfs", CID, "", "container")
    got = parse_kubepods_cgroup(f"/../../../burstable/pod{UID}/{CID}")
    assert got is not None and got.qos == "Burstable"


def test_container_id_label_carries_the_runtime_prefix() -> None:
    # kube-state-metrics kube_pod_container_info{container_id="containerd://<id>"}
    got = parse_kubepods_cgroup(f"{SYSTEMD_POD['Guaranteed']}/cri-containerd-{CID}.scope")
    assert got is not None and got.container_id_label == f"containerd://{CID}"
    got = parse_kubepods_cgroup(f"{CGROUPFS_POD['Guaranteed']}/crio-{CID}")
    assert got is not None and got.container_id_label == f"cri-o://{CID}"
    got = parse_kubepods_cgroup(f"{CGROUPFS_POD['Guaranteed']}/{CID}")
    assert got is not None and got.container_id_label == CID  # runtime unknown: bare


def test_real_runc_leaf() -> None:
    """runc 1.1.5 made this tree from containerd's cgroupfs cgroups path (README there)."""
    pc = parse_proc_cgroup((FIX / "real-runc-1.1.5-cgroupfs-v1.cgroup").read_bytes())
    assert pc.error_count == 0
    got = kubepods_of(pc)
    assert got == KubepodsCgroup(
        "6b1e5f7c-0d2a-4c1e-9f3b-7a8d2c4e6f10", "BestEffort", "cgroupfs",
        "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f2a4c6e8b0d1f3a", "", "container")


@pytest.mark.parametrize("path", [
    "/", "/system.slice/containerd.service", "/init.scope", "/user.slice",
    # a local user may create delegated cgroups with any name: never a pod
    f"/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-pod{USC}.slice/"
    f"cri-containerd-{CID}.scope",
    f"/user.slice/user-1000.slice/user@1000.service/kubepods/pod{UID}/{CID}",
    f"/user.slice/user-1000.slice/user@1000.service/kubepods-pod{USC}.slice:cri-containerd:{CID}",
    # a pod slice outside its parent slice, or a pod directory outside kubepods
    f"/system.slice/kubepods-burstable-pod{USC}.slice/cri-containerd-{CID}.scope",
    f"/docker/pod{UID}/{CID}",
    f"/kubepods/weird/pod{UID}/{CID}",
    # ".." after the start climbs out: refused
    f"/kubepods/burstable/../pod{UID}/{CID}",
    # malformed UIDs and IDs
    "/kubepods/burstable/podNOT-A-UID/" + CID,
    "/kubepods.slice/kubepods-pod8f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6a7b.slice",  # "-" not "_"
    "/kubepods/pod" + UID.upper(),
    "\0/kubepods/pod" + UID,
    "/kubepods/pod" + UID + "/" + "x" * 5000,
])
def test_not_a_pod(path: str) -> None:
    assert parse_kubepods_cgroup(path) is None


def test_unknown_leaf_is_other() -> None:
    got = parse_kubepods_cgroup(f"{CGROUPFS_POD['Burstable']}/something-else")
    assert got is not None and got.kind == "other" and got.container_id == ""
    got = parse_kubepods_cgroup(f"{SYSTEMD_POD['Burstable']}/cri-containerd-{CID[:-1]}.scope")
    assert got is not None and got.kind == "other"


def test_v2_path_wins_then_v1_in_order() -> None:
    other = "0" * 64
    data = (f"10:memory:/kubepods/burstable/pod{UID}/{other}\n"
            f"0::{SYSTEMD_POD['Burstable']}/cri-containerd-{CID}.scope\n").encode()
    got = kubepods_of(parse_proc_cgroup(data))
    assert got is not None and got.container_id == CID
    # v2 at the root of a hybrid host: the v1 memory path answers
    data = f"0::/\n10:memory:/kubepods/burstable/pod{UID}/{CID}\n".encode()
    got = kubepods_of(parse_proc_cgroup(data))
    assert got is not None and got.container_id == CID


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("/.:_-kubepodsliceqbrt0123456789abcdef\0")),
               max_size=400))
def test_total_on_any_path(path: str) -> None:
    got = parse_kubepods_cgroup(path)
    assert got is None or isinstance(got, KubepodsCgroup)


def test_bounded_on_a_long_hostile_path() -> None:
    # many components that almost match: each is checked once, the path length is capped
    path = "/" + "/".join(["kubepods-burstable-pod" + "a" * 31 + ".slice"] * 200)
    assert parse_kubepods_cgroup(path) is None
    assert parse_kubepods_cgroup("/" + "a-" * 3000 + "kubepods-pod" + USC + ".slice") is None
