"""Real container runtimes: runc, and containerd 1.6 through ctr, start a container in a
kubelet-shaped cgroup; the exporter names its pod and container.

The container is what containerd would ask runc for under the kubelet's cgroupfs driver: a
bundle (``config.json`` with the CRI plugin's annotations, a root filesystem holding only a
statically linked busybox) in containerd's task directory
``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/`` of a host root given to the
exporter as ``--path.rootfs``, and ``linux.cgroupsPath`` ``/kubepods/besteffort/pod<uid>/<id>``.
runc itself creates the cgroups and moves the process there, so the cgroup lines the exporter
reads come from a real runtime. runc keeps its state in a private ``--root``.

The containerd test runs a private containerd (its own root, sockets and state; the state
directory is the host root's ``/run/containerd``, the CRI plugin off) and ``ctr run`` with the
CRI plugin's annotations and the same cgroups path: containerd itself writes the bundle into
its task directory, which the exporter reads.

Needs root, runc (containerd: also containerd, ctr and containerd-shim-runc-v2) and a static
busybox; where a package is missing the test installs it with apt-get (non-interactively), and
skips saying why when it cannot (no root, no apt, the runtime refused to start a container).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import Daemon

pytestmark = pytest.mark.e2e

NAMESPACE, POD, CONTAINER = "rt", "runc-pod-0", "app"
TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
CGROUP_V1 = Path("/sys/fs/cgroup")
PT_INTERP = 3


def _apt_install(package: str) -> str | None:
    """Install a Debian package non-interactively; return why not, None when it worked."""
    apt = shutil.which("apt-get")
    if apt is None:
        return "no apt-get on this machine"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    r = subprocess.run([apt, "install", "-y", "-q", "--no-install-recommends", package],
                       capture_output=True, text=True, timeout=600, env=env, check=False)
    if r.returncode != 0:
        return f"apt-get install {package} exited {r.returncode}: {r.stderr.strip()[-300:]}"
    return None


def _static(path: Path) -> bool:
    """Return whether the ELF file at ``path`` has no program interpreter (static)."""
    try:
        head = path.read_bytes()[:65536]
    except OSError:
        return False
    if head[:5] != b"\x7fELF\x02":  # 64-bit ELF
        return False
    phoff, = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 4 > len(head):
            return False
        if struct.unpack_from("<I", head, off)[0] == PT_INTERP:
            return False
    return True


def _tools() -> tuple[str, Path]:
    """Return runc and a static busybox, installing them if need be; skip when impossible."""
    if os.geteuid() != 0:
        pytest.skip("runc needs root to create cgroups and namespaces")
    runc = shutil.which("runc")
    if runc is None:
        why = _apt_install("runc")
        runc = shutil.which("runc")
        if runc is None:
            pytest.skip(f"runc is not installed and could not be: {why}")
    busybox = Path("/bin/busybox")
    if not _static(busybox):
        why = _apt_install("busybox-static")
        if not _static(busybox):
            pytest.skip(f"no statically linked /bin/busybox (busybox-static): {why}")
    return runc, busybox


def _write_host(host: Path, busybox: Path, uid: str, cid: str) -> Path:
    """Write the host root: the bundle in containerd's task directory, the pod log dir."""
    bundle = host / TASKS / cid
    (bundle / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy(busybox, bundle / "rootfs" / "bin" / "busybox")
    os.symlink("busybox", bundle / "rootfs" / "bin" / "sleep")
    logs = host / "var" / "log" / "pods" / f"{NAMESPACE}_{POD}_{uid}" / CONTAINER
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("")
    return bundle


def _config(runc: str, bundle: Path, uid: str, cid: str) -> None:
    """Write the bundle's config.json: runc's default spec as containerd's CRI plugin sets
    it up for a BestEffort pod under the cgroupfs driver."""
    subprocess.run([runc, "spec", "--bundle", str(bundle)], check=True, timeout=30)
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/bin/sleep", "3599"]
    spec["root"]["readonly"] = True
    spec["linux"]["cgroupsPath"] = f"/kubepods/besteffort/pod{uid}/{cid}"
    spec["annotations"] = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.container-name": CONTAINER,
        "io.kubernetes.cri.sandbox-name": POD,
        "io.kubernetes.cri.sandbox-namespace": NAMESPACE,
        "io.kubernetes.cri.sandbox-uid": uid,
    }
    (bundle / "config.json").write_text(json.dumps(spec))


def _remove_pod_cgroups(uid: str) -> None:
    """Remove the (empty) pod cgroup runc left in each v1 hierarchy and in v2."""
    for d in [*CGROUP_V1.glob(f"*/kubepods/besteffort/pod{uid}"),
              *CGROUP_V1.glob(f"kubepods/besteffort/pod{uid}")]:
        with contextlib.suppress(OSError):
            d.rmdir()


@pytest.fixture
def container(tmp_path: Path) -> Iterator[tuple[Path, str, str, int]]:
    """Start the container; yield (host root, pod UID, container ID, its host pid)."""
    runc, busybox = _tools()
    uid, cid = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
    host = tmp_path / "host"
    bundle = _write_host(host, busybox, uid, cid)
    _config(runc, bundle, uid, cid)
    state = tmp_path / "runc-state"
    base = [runc, "--root", str(state)]
    out = tmp_path / "runc.out"
    try:
        # the detached container keeps runc's stdout and stderr: a file, never a pipe
        with out.open("wb") as fh:
            r = subprocess.run([*base, "run", "--detach", "--bundle", str(bundle), cid],
                               stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, timeout=60,
                               check=False)
        if r.returncode != 0:
            pytest.skip(f"runc cannot start a container here (exit {r.returncode}): "
                        f"{out.read_text(errors='replace').strip()[-400:]}")
        st = json.loads(subprocess.run([*base, "state", cid], capture_output=True, text=True,
                                       timeout=30, check=True).stdout)
        yield host, uid, cid, int(st["pid"])
    finally:
        subprocess.run([*base, "delete", "--force", cid], capture_output=True, timeout=60,
                       check=False)
        _remove_pod_cgroups(uid)


def _samples(text: str, name: str) -> list[dict[str, str]]:
    return [dict(s.labels) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name]


def test_runc_container_is_named(container: tuple[Path, str, str, int],
                                 start_daemon: Callable[..., Daemon]) -> None:
    _expect_named(*container, start_daemon)


def _expect_named(host: Path, uid: str, cid: str, pid: int,
                  start_daemon: Callable[..., Daemon]) -> None:
    """Start the exporter on ``host`` and check it names container ``cid`` (process ``pid``)."""
    leaf = f"/kubepods/besteffort/pod{uid}/{cid}"
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    assert any(line.endswith(":" + leaf) for line in lines), lines  # runc put it there
    d = start_daemon(f"--path.rootfs={host}", "--process.min-resident=0",
                     "--process.include=^sleep$", "--scan.interval=1s", "--log.format=json")
    deadline = time.monotonic() + 60
    text, found = "", []
    while time.monotonic() < deadline and not found:
        text = d.wait_scans(1)
        found = [s for s in _samples(text, "numa_process_kubernetes_info")
                 if s["pid"] == str(pid)]
        time.sleep(0.5)
    assert found == [{"pid": str(pid), "namespace": NAMESPACE, "pod": POD,
                      "container": CONTAINER, "uid": uid,
                      "container_id": f"containerd://{cid}"}], (
        found, d.log_path.read_text()[-2000:])
    cgroups = [s for s in _samples(text, "numa_cgroup_kubernetes_info") if s["uid"] == uid]
    assert cgroups == [{"cgroup": leaf, "namespace": NAMESPACE, "pod": POD,
                        "container": CONTAINER, "uid": uid,
                        "container_id": f"containerd://{cid}", "qos": "BestEffort"}], cgroups


def _containerd_tools() -> tuple[str, str, Path]:
    """Return containerd, ctr and a static busybox, installing them if need be, or skip."""
    _, busybox = _tools()
    if not all(shutil.which(t) for t in ("containerd", "ctr", "containerd-shim-runc-v2")):
        why = _apt_install("containerd")
        if not all(shutil.which(t) for t in ("containerd", "ctr", "containerd-shim-runc-v2")):
            pytest.skip(f"containerd is not installed and could not be: {why}")
    return str(shutil.which("containerd")), str(shutil.which("ctr")), busybox


@pytest.fixture
def containerd_container(tmp_path: Path) -> Iterator[tuple[Path, str, str, int]]:
    """Start a private containerd and a container through ctr; yield as ``container``."""
    containerd, ctr, busybox = _containerd_tools()
    uid, cid = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
    host = tmp_path / "host"
    (host / "run" / "containerd").mkdir(parents=True)
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    os.symlink("busybox", rootfs / "bin" / "sleep")
    sock = tmp_path / "containerd.sock"
    (tmp_path / "config.toml").write_text(
        "version = 2\n"
        f'root = "{tmp_path / "root"}"\n'
        f'state = "{host / "run" / "containerd"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{sock}"\n'
        f'[ttrpc]\n  address = "{sock}.ttrpc"\n'
        '[debug]\n  address = ""\n')
    log = tmp_path / "containerd.log"
    with log.open("wb") as fh:
        daemon = subprocess.Popen([containerd, "--config", str(tmp_path / "config.toml")],
                                  stdout=fh, stderr=fh)
    base = [ctr, "--address", str(sock), "--namespace", "k8s.io"]
    started = False
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and daemon.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not sock.exists():
            pytest.skip("containerd did not start here: "
                        f"{log.read_text(errors='replace').strip()[-400:]}")
        annotations = {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.container-name": CONTAINER,
            "io.kubernetes.cri.sandbox-name": POD,
            "io.kubernetes.cri.sandbox-namespace": NAMESPACE,
            "io.kubernetes.cri.sandbox-uid": uid,
        }
        out = tmp_path / "ctr.out"
        with out.open("wb") as fh:
            r = subprocess.run(
                [*base, "run", "--detach", "--cgroup", f"/kubepods/besteffort/pod{uid}/{cid}",
                 *(a for k, v in annotations.items() for a in ("--annotation", f"{k}={v}")),
                 "--rootfs", str(rootfs), cid, "/bin/sleep", "3599"],
                stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, timeout=60, check=False)
        started = r.returncode == 0
        if not started:
            pytest.skip(f"ctr run failed here (exit {r.returncode}): "
                        f"{out.read_text(errors='replace').strip()[-400:]}")
        bundle = host / TASKS / cid
        assert (bundle / "config.json").is_file(), "containerd wrote no bundle there"
        yield host, uid, cid, int((bundle / "init.pid").read_text())
    finally:
        if started:
            for cmd in (["task", "kill", "--signal", "SIGKILL", cid], ["task", "delete", cid],
                        ["container", "delete", cid]):
                time.sleep(0.5 if cmd[1] == "delete" else 0)
                subprocess.run([*base, *cmd], capture_output=True, timeout=60, check=False)
        daemon.terminate()
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        _remove_pod_cgroups(uid)


def test_containerd_container_is_named(containerd_container: tuple[Path, str, str, int],
                                       start_daemon: Callable[..., Daemon]) -> None:
    """containerd wrote the spec: the exporter reads its annotations from the task dir."""
    host, uid, cid, pid = containerd_container
    spec = json.loads((host / TASKS / cid / "config.json").read_text())
    # the file containerd wrote, with the annotations ctr passed it
    assert spec["annotations"]["io.kubernetes.cri.sandbox-uid"] == uid
    _expect_named(host, uid, cid, pid, start_daemon)
