"""/proc/<pid>/cgroup parser and systemd unit names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.proc_cgroup import ProcCgroup, parse_proc_cgroup, systemd_unit

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"


def _fixture(name: str) -> ProcCgroup:
    return parse_proc_cgroup((FIX / "proc" / name).read_bytes())


def test_v2_only() -> None:
    r = _fixture("v2-service")
    assert r == ProcCgroup("/system.slice/foo.service", {}, 0)
    assert r.path_for("memory") == "/system.slice/foo.service"
    assert r.unit == "foo.service"


def test_v1_docker() -> None:
    r = _fixture("v1-docker")
    assert r.v2_path is None and r.error_count == 0
    assert r.v1_paths["memory"] == "/docker/abc123"
    assert r.v1_paths["cpu"] == r.v1_paths["cpuacct"] == "/docker/abc123"
    assert r.v1_paths["net_cls"] == r.v1_paths["net_prio"] == "/docker/abc123"
    assert r.v1_paths["rdma"] == "/"
    assert r.v1_paths["name=systemd"] == "/docker/abc123"
    assert r.path_for("memory") == "/docker/abc123"
    assert r.path_for("io") is None
    assert r.systemd_path == "/docker/abc123"
    assert r.unit is None  # plain docker without the systemd cgroup driver: no unit


def test_hybrid_user_scope() -> None:
    r = _fixture("hybrid-user-scope")
    assert r.error_count == 0
    assert r.path_for("memory") == "/user.slice/user-1000.slice/user@1000.service"
    assert r.path_for("cpuset") == "/"
    assert r.path_for("hugetlb") == r.v2_path  # not bound to v1: the unified hierarchy
    assert r.unit == "vte-spawn-1a2b.scope"


def test_real_hybrid_host_file() -> None:
    r = parse_proc_cgroup((FIX / "real" / "hybrid-proc-self-cgroup").read_bytes())
    assert r.error_count == 0
    assert r.v2_path == "/"
    assert r.v1_paths["memory"].startswith("/process_api/")
    assert r.systemd_path == "/"
    assert r.unit is None


def test_this_process() -> None:
    r = parse_proc_cgroup(Path("/proc/self/cgroup").read_bytes())
    assert r.error_count == 0
    assert r.v2_path is not None or r.v1_paths


def test_kubepods_scope_is_the_container() -> None:
    r = _fixture("v2-kubepods")
    assert r.unit is not None and r.unit.startswith("cri-containerd-")
    assert r.unit.endswith(".scope")


def test_namespaced_path_is_kept_verbatim() -> None:
    r = _fixture("v2-namespaced")
    assert r.v2_path == "/../../system.slice/other.service"


@pytest.mark.parametrize(
    ("path", "unit"),
    [
        ("/", None),
        ("", None),
        ("/system.slice", None),
        ("/user.slice/user-1000.slice", None),
        ("/system.slice/foo.service", "foo.service"),
        ("/system.slice/foo.service/payload", "foo.service"),
        ("/system.slice/docker-0123abcd.scope", "docker-0123abcd.scope"),
        ("/machine.slice/libpod-abc.scope/container", "libpod-abc.scope"),
        ("/user.slice/user-1000.slice/user@1000.service", "user@1000.service"),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope", "x.scope"),
        ("/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service"),
        ("/system.slice/.service", None),
        ("/docker/abc123", None),
    ],
)
def test_systemd_unit(path: str, unit: str | None) -> None:
    assert systemd_unit(path) == unit


@pytest.mark.parametrize("bad", [b"garbage\n", b"x::/a\n", b"0::relative\n", b"4::/a\n",
                                 b"0::/dup\n", b"5:memory:/again\n", b"7:,:/a\n"])
def test_malformed_counted(bad: bytes) -> None:
    r = parse_proc_cgroup(b"5:memory:/m\n0::/u\n" + bad)
    assert r.error_count == 1
    assert (r.v2_path, r.v1_paths) == ("/u", {"memory": "/m"})


def test_path_with_colon() -> None:
    r = parse_proc_cgroup(b"0::/system.slice/a:b.service\n")
    assert r.v2_path == "/system.slice/a:b.service"


@settings(max_examples=500)
@given(st.binary(max_size=1000))
def test_never_raises(data: bytes) -> None:
    r = parse_proc_cgroup(data)
    assert r.error_count >= 0
    if r.systemd_path is not None:
        systemd_unit(r.systemd_path)
