"""Parser for the cgroup paths the kubelet and the container runtimes create for pods.

Input is one cgroup path as ``/proc/<pid>/cgroup`` prints it (the v2 path, or one v1
controller's path); output says which pod it belongs to, in which QoS class, and which
container of the pod. Sources of each form:

* The kubelet names the pod cgroup (``pkg/kubelet/cm/cgroup_manager_linux.go``:
  ``CgroupName``, ``ToSystemd``/``ToCgroupfs``, ``escapeSystemdCgroupName``;
  ``pod_container_manager_linux.go``: ``GetPodContainerName``, prefix ``pod`` + UID;
  ``qos_container_manager_linux.go``: QoS cgroups ``burstable`` and ``besteffort`` under
  ``kubepods``, Guaranteed pods directly under ``kubepods``):

  - systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice``
    (every ``-`` of the UID written ``_``; each slice name repeats its ancestors, so a
    ``--cgroup-root`` adds a prefix: ``kubelet-kubepods-...``); Guaranteed:
    ``/kubepods.slice/kubepods-pod<uid>.slice``;
  - cgroupfs driver: ``/kubepods/burstable/pod<uid>``, Guaranteed ``/kubepods/pod<uid>``.

* The runtime names the container cgroup below it:

  - containerd (``pkg/cri/.../helpers_linux.go`` ``getCgroupsPath``): systemd
    ``cri-containerd-<id>.scope`` (runc's ``slice:prefix:name`` form
    ``kubepods-...-pod<uid>.slice:cri-containerd:<id>``), cgroupfs ``<pod cgroup>/<id>``. When
    containerd runs runc with the cgroupfs driver while the kubelet uses systemd, runc takes
    the ``slice:prefix:name`` string literally and the container lands in one cgroup with
    that name, below containerd's own (``/system.slice/containerd.service/
    kubepods-burstable-pod<uid>.slice:cri-containerd:<id>``, seen in containerd issue 5152);
  - CRI-O (``internal/config/cgmgr/systemd.go``, ``cgroupfs.go``): ``crio-<id>.scope`` /
    ``crio-<id>``, its monitor ``crio-conmon-<id>.scope`` / ``crio-conmon-<id>``;
  - Docker (dockershim, cri-dockerd): ``docker-<id>.scope`` / ``<id>``;
  - Podman (libpod): ``libpod-<id>.scope`` / ``libpod-<id>``, ``libpod-conmon-<id>...``.

A bare ``<id>`` (cgroupfs, containerd or Docker) does not say its runtime: ``runtime`` is
then empty and the reader finds it from the runtime's state. A pause (sandbox) container has
a cgroup like any other container; only the runtime's state tells it apart (the reader
does). Components below the container cgroup (a container that made its own sub-cgroups)
still belong to that container.

Paths are relative to the reader's cgroup namespace: seen from inside a pod, another pod's
path starts with ``/..`` components and may begin below ``kubepods``; the QoS class is then
read from what is left, and is empty where the path does not show it. ``..`` anywhere but
at the start is refused. The first pod cgroup from the root wins, so names a container
gives its own sub-cgroups cannot pose as another pod; a systemd pod slice must sit in its
parent slice where that is visible, and nothing below ``user.slice`` is a pod (systemd
delegates cgroups there to unprivileged users, who could name one after a pod). Work is
bounded by ``MAX_PATH``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from numa_exporter.parsers.proc_cgroup import ProcCgroup

QoS = Literal["Guaranteed", "Burstable", "BestEffort", ""]
Driver = Literal["systemd", "cgroupfs"]
Runtime = Literal["containerd", "cri-o", "docker", "podman", ""]
# container: a container's cgroup; conmon: a runtime's monitor process; pod: the pod cgroup
# itself; other: a cgroup below the pod that no runtime names this way. "sandbox" is set by
# the reader, which knows the pause containers from the runtime's state.
Kind = Literal["container", "sandbox", "conmon", "pod", "other"]

MAX_PATH = 4096  # PATH_MAX: /proc/<pid>/cgroup never prints more
MAX_COMPONENT = 255  # NAME_MAX of cgroupfs
# kube-state-metrics and the kubelet write container IDs as <runtime>://<id>
ID_PREFIX = {"containerd": "containerd://", "cri-o": "cri-o://", "docker": "docker://",
             "podman": "podman://"}

_HEX64 = r"[0-9a-f]{64}"
_UID_SYSTEMD = r"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}|[0-9a-f]{32}"
_UID_CGROUPFS = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}"
# (<cgroup root prefix>-)kubepods(-burstable|-besteffort)-pod<uid>.slice
_POD_SLICE = re.compile(
    r"(?:[A-Za-z0-9_.:@-]+-)?kubepods(?:-(burstable|besteffort))?-pod(" + _UID_SYSTEMD
    + r")\.slice")
_POD_DIR = re.compile(r"pod(" + _UID_CGROUPFS + r")")
# runc's "slice:prefix:name", taken literally by a cgroupfs runc
_LITERAL_SYSTEMD = re.compile(
    r"(?P<slice>[^:/]+\.slice):(?P<prefix>cri-containerd|crio|docker|libpod):(?P<id>"
    + _HEX64 + r")")
_SCOPE = re.compile(
    r"(?P<prefix>cri-containerd|crio-conmon|crio|docker|libpod-conmon|libpod)-(?P<id>"
    + _HEX64 + r")\.scope")
_DIR = re.compile(r"(?:(?P<prefix>crio-conmon|crio|libpod-conmon|libpod)-)?(?P<id>"
                  + _HEX64 + r")")
_PREFIX_RUNTIME: dict[str, tuple[Runtime, Kind]] = {
    "cri-containerd": ("containerd", "container"),
    "crio": ("cri-o", "container"),
    "crio-conmon": ("cri-o", "conmon"),
    "docker": ("docker", "container"),
    "libpod": ("podman", "container"),
    "libpod-conmon": ("podman", "conmon"),
}
_QOS_DIR: dict[str, QoS] = {"burstable": "Burstable", "besteffort": "BestEffort"}


@dataclass(frozen=True, slots=True)
class KubepodsCgroup:
    """The pod (and container) a cgroup path belongs to.

    ``pod_uid`` is written as the API writes it (``-`` separators; static pods have a
    32-digit hex UID). ``container_id`` is the runtime's 64-digit hex ID, empty for the pod
    cgroup itself. ``runtime`` is empty where the path does not say it (a bare ID under the
    cgroupfs driver). ``qos`` is the API's QoS class name, empty where a namespace-relative
    path hides it.
    """

    pod_uid: str
    qos: QoS
    driver: Driver
    container_id: str = ""
    runtime: Runtime = ""
    kind: Kind = "pod"

    @property
    def container_id_label(self) -> str:
        """Return the container ID as kube-state-metrics writes it (``containerd://<id>``).

        Without a known runtime the bare ID; without a container, the empty string.
        """
        if not self.container_id:
            return ""
        return ID_PREFIX.get(self.runtime, "") + self.container_id


def _components(path: str) -> list[str] | None:
    """Return the path's components without the leading ``..``s, None if it is refused."""
    if len(path) > MAX_PATH or "\0" in path:
        return None
    parts = [p for p in path.split("/") if p and p != "."]
    start = 0
    while start < len(parts) and parts[start] == "..":
        start += 1
    rest = parts[start:]
    if any(p == ".." or len(p) > MAX_COMPONENT for p in rest):
        return None
    return rest


def _leaf(name: str, driver: Driver) -> tuple[str, Runtime, Kind]:
    """Return (container ID, runtime, kind) for the component below a pod cgroup."""
    m = _SCOPE.fullmatch(name) if driver == "systemd" else None
    if m is None:
        m = _DIR.fullmatch(name) or _SCOPE.fullmatch(name)
    if m is None:
        return "", "", "other"
    prefix = m.group("prefix")
    if prefix is None:
        return m.group("id"), "", "container"
    runtime, kind = _PREFIX_RUNTIME[prefix]
    return m.group("id"), runtime, kind


def _systemd_pod(name: str) -> tuple[str, QoS] | None:
    """Return (UID, QoS) of a systemd pod slice name, None for any other name."""
    m = _POD_SLICE.fullmatch(name)
    if m is None:
        return None
    qos: QoS = _QOS_DIR.get(m.group(1) or "", "Guaranteed")
    return m.group(2).replace("_", "-"), qos


def _cgroupfs_pod(parts: list[str], i: int) -> tuple[str, QoS] | None:
    """Return (UID, QoS) when ``parts[i]`` is a cgroupfs pod cgroup, None otherwise.

    The parent must be ``kubepods`` (Guaranteed) or ``burstable``/``besteffort`` under
    ``kubepods``; where the namespace hides the parents, the QoS class is left empty.
    """
    m = _POD_DIR.fullmatch(parts[i])
    if m is None:
        return None
    uid = m.group(1)
    if i == 0:
        return uid, ""
    parent = parts[i - 1]
    if parent == "kubepods":
        return uid, "Guaranteed"
    if parent in _QOS_DIR and (i == 1 or parts[i - 2] == "kubepods"):
        return uid, _QOS_DIR[parent]
    return None


def _systemd_parent_ok(parts: list[str], i: int) -> bool:
    """Return whether the pod slice ``parts[i]`` sits in its parent slice, where visible.

    systemd nests a slice ``a-b-c.slice`` in ``a-b.slice``: the parent's name is a prefix
    of the pod slice's name.
    """
    if i == 0:
        return True
    parent = parts[i - 1]
    return parent.endswith(".slice") and parts[i][:-6].startswith(parent[:-6] + "-")


def parse_kubepods_cgroup(path: str) -> KubepodsCgroup | None:
    """Return the pod and container of a cgroup path, or None for a path outside any pod.

    Never raises; a path longer than ``MAX_PATH`` or with ``..`` after its start is None,
    and so is anything below ``user.slice``, where systemd delegates cgroups to
    unprivileged users (who could otherwise name one after a pod).
    """
    parts = _components(path)
    if parts is None:
        return None
    for i, name in enumerate(parts):
        if name == "user.slice":
            return None
        driver: Driver = "systemd"
        pod = _systemd_pod(name)
        if pod is not None and not _systemd_parent_ok(parts, i):
            pod = None
        if pod is None:
            lit = _LITERAL_SYSTEMD.fullmatch(name)
            if lit is not None and (i == 0 or parts[i - 1].endswith(".service")):
                pod = _systemd_pod(lit.group("slice"))
                if pod is not None:
                    runtime, kind = _PREFIX_RUNTIME[lit.group("prefix")]
                    return KubepodsCgroup(pod[0], pod[1], "cgroupfs", lit.group("id"),
                                          runtime, kind)
            pod = _cgroupfs_pod(parts, i)
            driver = "cgroupfs"
        if pod is None:
            continue
        uid, qos = pod
        if i + 1 == len(parts):
            return KubepodsCgroup(uid, qos, driver)
        cid, runtime, kind = _leaf(parts[i + 1], driver)
        return KubepodsCgroup(uid, qos, driver, cid, runtime, kind)
    return None


# v1 controllers tried in this order; the kubelet and the runtimes put a container in the
# same path in every hierarchy, so the first that parses answers.
V1_ORDER = ("memory", "cpuset", "cpu", "cpuacct", "pids", "name=systemd")


def kubepods_of(cgroup: ProcCgroup) -> KubepodsCgroup | None:
    """Return the pod and container of a process from its ``/proc/<pid>/cgroup``, or None.

    The v2 path is tried first (cgroup v2 and the unified part of a hybrid host), then the
    v1 paths in ``V1_ORDER``, then any other v1 hierarchy.
    """
    paths: list[str] = []
    if cgroup.v2_path and cgroup.v2_path != "/":
        paths.append(cgroup.v2_path)
    paths += [cgroup.v1_paths[c] for c in V1_ORDER if c in cgroup.v1_paths]
    paths += [p for c, p in sorted(cgroup.v1_paths.items()) if c not in V1_ORDER]
    seen: set[str] = set()
    for p in paths:
        if p in seen:
            continue
        seen.add(p)
        found = parse_kubepods_cgroup(p)
        if found is not None:
            return found
    return None
