"""cgroupfs source: layout detection and reads on v2, hybrid/v1 fixture trees and this host."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import NoReturn

import pytest
from tests.unit.unprivileged import raises_denied

from numa_exporter.parsers.memory_numa_stat import parse_memory_numa_stat
from numa_exporter.parsers.memory_stat import parse_memory_stat
from numa_exporter.parsers.proc_cgroup import parse_proc_cgroup
from numa_exporter.sources import files
from numa_exporter.sources.cgroupfs import CgroupFS, detect_layout
from numa_exporter.sources.errors import Denied, ReadFailed

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
V2_SYS = FIX / "v2" / "sys"
V1_SYS = FIX / "v1" / "sys"


def test_detect_unified() -> None:
    lay = detect_layout(V2_SYS / "fs" / "cgroup")
    assert lay.layout == "unified"
    assert lay.v2_root == V2_SYS / "fs" / "cgroup"
    assert lay.v2_controllers is not None
    assert {"memory", "cpuset"} <= lay.v2_controllers
    assert lay.v1_roots == {}
    assert lay.version_for("memory") == 2


def test_detect_hybrid() -> None:
    lay = detect_layout(V1_SYS / "fs" / "cgroup")
    assert lay.layout == "hybrid"
    assert lay.v2_root == V1_SYS / "fs" / "cgroup" / "unified"
    assert lay.v2_controllers == frozenset({"hugetlb"})
    assert set(lay.v1_roots) == {"memory", "cpuset"}
    assert lay.version_for("memory") == 1
    assert lay.version_for("hugetlb") == 2
    assert lay.version_for("io") is None


def test_detect_nothing(tmp_path: Path) -> None:
    assert detect_layout(tmp_path / "fs" / "cgroup").layout == "none"
    assert CgroupFS(tmp_path).memory_stat("/a", {}) is None


def test_v2_reads() -> None:
    fs = CgroupFS(V2_SYS)
    cg = parse_proc_cgroup(b"0::/system.slice/foo.service\n")
    ns = fs.memory_numa_stat(cg.v2_path, cg.v1_paths)
    assert ns is not None
    r = parse_memory_numa_stat(ns)
    assert (r.version, r.error_count) == (2, 0)
    ms = fs.memory_stat(cg.v2_path, cg.v1_paths)
    assert ms is not None and parse_memory_stat(ms).values["numa_pages_migrated"] == 262144
    assert fs.cpuset_mems_effective(cg.v2_path, cg.v1_paths) == b"1\n"
    assert fs.cpuset_cpus_effective(cg.v2_path, cg.v1_paths) == b"32-47\n"
    assert fs.memory_version() == 2


def test_v2_cpuset_inherited_from_nearest_ancestor() -> None:
    fs = CgroupFS(V2_SYS)
    path = "/system.slice/bar.service/payload"
    assert fs.memory_numa_stat(path, {}) is not None
    assert fs.cpuset_mems_effective(path, {}) == b"0-1\n"  # from system.slice
    assert fs.cpuset_cpus_effective(path, {}) == b"0-63\n"


def test_v2_root_cgroup() -> None:
    fs = CgroupFS(V2_SYS)
    assert fs.cpuset_mems_effective("/", {}) == b"0-1\n"
    assert fs.memory_numa_stat("/", {}) is None  # the root has no memory.numa_stat


def test_missing_cgroup_is_none_and_not_inherited() -> None:
    fs = CgroupFS(V2_SYS)
    assert fs.memory_numa_stat("/system.slice/gone.service", {}) is None
    assert fs.cpuset_mems_effective("/system.slice/gone.service", {}) is None
    assert fs.memory_stat(None, {}) is None


@pytest.mark.parametrize("path", ["/../../system.slice/foo.service", "/system.slice/../..",
                                  "/a/\0"])
def test_paths_outside_the_namespace_are_refused(path: str) -> None:
    fs = CgroupFS(V2_SYS)
    assert fs.cgroup_dir("memory", path, {}) is None
    assert fs.memory_numa_stat(path, {}) is None


def test_hybrid_reads_v1_memory_and_cpuset() -> None:
    fs = CgroupFS(V1_SYS)
    cg = parse_proc_cgroup((FIX / "proc" / "v1-docker").read_bytes())
    found = fs.cgroup_dir("memory", cg.v2_path, cg.v1_paths)
    assert found == (V1_SYS / "fs/cgroup/memory/docker/abc123", 1)
    ns = fs.memory_numa_stat(cg.v2_path, cg.v1_paths)
    assert ns is not None
    r = parse_memory_numa_stat(ns)
    assert (r.version, r.in_pages) == (1, True)
    assert fs.memory_stat(cg.v2_path, cg.v1_paths) is not None
    # v1 names the files cpuset.effective_mems / cpuset.effective_cpus
    assert fs.cpuset_mems_effective(cg.v2_path, cg.v1_paths) == b"0\n"
    assert fs.cpuset_cpus_effective(cg.v2_path, cg.v1_paths) == b"0-15\n"
    assert fs.memory_version() == 1


def test_hybrid_root_memory_from_real_host_files() -> None:
    fs = CgroupFS(V1_SYS)
    data = fs.memory_numa_stat("/", {"memory": "/"})
    assert data == (FIX / "real" / "v1-root-memory.numa_stat").read_bytes()


def test_v1_process_without_controller_path() -> None:
    fs = CgroupFS(V1_SYS)
    assert fs.memory_numa_stat("/", {}) is None  # memory is v1 here; no v1 path given


def test_denied_raises() -> None:
    """A mode-0 file is Denied; as root (CI) the check runs as nobody, since root reads it."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="numa-denied-"))  # pytest's tmp is root-only
    tmp_path.chmod(0o755)
    cg = tmp_path / "fs" / "cgroup"
    (cg / "a").mkdir(parents=True)
    for d in (tmp_path / "fs", cg, cg / "a"):
        d.chmod(0o755)
    (cg / "cgroup.controllers").write_text("memory\n")
    f = cg / "a" / "memory.stat"
    f.write_text("anon 1\n")
    f.chmod(0)
    try:
        assert raises_denied("from numa_exporter.sources.cgroupfs import CgroupFS",
                             "CgroupFS(Path(sys.argv[1])).memory_stat('/a', {})", tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def test_file_where_a_folder_should_be_is_none(tmp_path: Path) -> None:
    cg = tmp_path / "fs" / "cgroup"
    cg.mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("memory\n")
    (cg / "a").write_text("not a cgroup\n")
    assert CgroupFS(tmp_path).memory_stat("/a", {}) is None  # ENOTDIR


def test_this_host() -> None:
    fs = CgroupFS(Path("/sys"))
    if fs.layout.layout == "none":
        pytest.skip("no cgroup filesystem at /sys/fs/cgroup")
    cg = parse_proc_cgroup(Path("/proc/self/cgroup").read_bytes())
    if fs.memory_version() is None:
        pytest.skip("no memory controller")
    data = fs.memory_numa_stat(cg.v2_path, cg.v1_paths)
    if data is None:  # e.g. the root cgroup on v2
        pytest.skip("no memory.numa_stat for this process's cgroup")
    r = parse_memory_numa_stat(data)
    assert r.error_count == 0 and r.nodes
    assert r.in_pages == (fs.memory_version() == 1)
    stat = fs.memory_stat(cg.v2_path, cg.v1_paths)
    assert stat is not None and parse_memory_stat(stat).error_count == 0


@pytest.mark.parametrize(
    ("err", "expected"),
    [(errno.EACCES, Denied), (errno.EPERM, Denied), (errno.EIO, ReadFailed),
     (errno.ENODEV, None), (errno.ENOENT, None)],
)
def test_error_classification(monkeypatch: pytest.MonkeyPatch, err: int,
                              expected: type[Exception] | None) -> None:
    def fail(path: object, *args: object, **kwargs: object) -> NoReturn:
        raise OSError(err, os.strerror(err), str(path))

    fs = CgroupFS(V2_SYS)
    monkeypatch.setattr(files, "open", fail, raising=False)
    if expected is None:
        assert fs.memory_stat("/system.slice/foo.service", {}) is None
    else:
        with pytest.raises(expected):
            fs.memory_stat("/system.slice/foo.service", {})


def test_unreadable_controllers_file_lets_v2_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(path: object, *args: object, **kwargs: object) -> NoReturn:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(files, "open", fail, raising=False)
    lay = detect_layout(V2_SYS / "fs" / "cgroup")
    assert lay.layout == "unified" and lay.v2_controllers is None
    assert lay.version_for("memory") == 2
