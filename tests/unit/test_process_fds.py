"""Accelerator device files open in a process, from /proc/<pid>/fd links."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from numa_exporter.sources.errors import Denied, Gone, ReadFailed
from numa_exporter.sources.process_fds import (
    ACCELERATOR_DEVICE_RE,
    DeviceFd,
    open_device_files,
)

LINKS = {
    "0": "/dev/null",
    "1": "pipe:[40123]",
    "2": "/dev/pts/0",
    "3": "/dev/nvidiactl",
    "4": "/dev/nvidia0",
    "5": "/dev/nvidia-uvm",
    "6": "/dev/nvidia1",
    "7": "/dev/dri/renderD128",
    "8": "/dev/dri/card1",
    "9": "/dev/accel/accel0",
    "10": "/dev/infiniband/uverbs0",
    "11": "/dev/nvidia0",  # the same device opened twice
    "12": "socket:[99]",
    "13": "anon_inode:[eventfd]",
    "14": "/dev/nvidia0x",
    "15": "/dev/dri/renderD128 (deleted)",
    "16": "/dev/infiniband/rdma_cm",
    "17": "/home/u/model.bin",
    "100": "/dev/nvidia-uvm-tools",
}


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    fd = tmp_path / "proc" / "4242" / "fd"
    fd.mkdir(parents=True)
    for name, target in LINKS.items():
        os.symlink(target, fd / name)  # dangling: the targets need not exist
    (fd / "junk").write_text("")  # not a number: ignored
    (fd / "99").write_text("")  # a number but not a link: skipped
    return tmp_path / "proc"


def test_fixture_tree(proc: Path) -> None:
    got = open_device_files(proc, 4242, stat_rdev=False)
    assert got == (
        DeviceFd("/dev/accel/accel0", None),
        DeviceFd("/dev/dri/card1", None),
        DeviceFd("/dev/dri/renderD128", None),
        DeviceFd("/dev/infiniband/uverbs0", None),
        DeviceFd("/dev/nvidia-uvm", None),
        DeviceFd("/dev/nvidia0", None),
        DeviceFd("/dev/nvidia1", None),
    )
    assert got[0].path == got[0][0]  # a plain (path, rdev) tuple too


def test_dangling_link_with_stat_has_no_rdev(tmp_path: Path) -> None:
    target = "/dev/accel/accel987"
    if os.path.exists(target):
        pytest.skip(f"{target} exists here")
    fd = tmp_path / "7" / "fd"
    fd.mkdir(parents=True)
    os.symlink(target, fd / "3")
    assert open_device_files(tmp_path, 7) == (DeviceFd(target, None),)


def test_missing_process_is_gone(tmp_path: Path) -> None:
    with pytest.raises(Gone):
        open_device_files(tmp_path, 1)


@pytest.mark.parametrize(("exc", "cls"), [(PermissionError(13, "Permission denied"), Denied),
                                           (ProcessLookupError(3, "No such process"), Gone),
                                           (OSError(5, "Input/output error"), ReadFailed)])
def test_listing_errors_are_classified(proc: Path, exc: OSError, cls: type[Exception],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(path: object) -> NoReturn:
        raise exc

    monkeypatch.setattr(os, "listdir", fail)
    with pytest.raises(cls):
        open_device_files(proc, 4242)


def test_fd_closed_between_listing_and_readlink(proc: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.readlink

    def flaky(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> str:
        if str(path) == "4":  # read relative to the open fd folder
            raise FileNotFoundError(2, "No such file or directory")
        return real(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "readlink", flaky)
    got = [d.path for d in open_device_files(proc, 4242, stat_rdev=False)]
    assert "/dev/nvidia0" in got  # fd 11 still has it


def test_pattern() -> None:
    ok = ["/dev/nvidia0", "/dev/nvidia15", "/dev/nvidia-uvm", "/dev/dri/renderD128",
          "/dev/dri/card0", "/dev/accel/accel3", "/dev/infiniband/uverbs12"]
    bad = ["/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/dri/by-path",
           "/dev/nvidia", "/dev/infiniband/umad0", "/dev/infiniband/rdma_cm", "dev/nvidia0",
           "/dev/dri/renderD128 (deleted)"]
    assert all(ACCELERATOR_DEVICE_RE.fullmatch(p) for p in ok)
    assert not any(ACCELERATOR_DEVICE_RE.fullmatch(p) for p in bad)


@pytest.fixture
def dev_null_open() -> Iterator[int]:
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def test_real_procfs_reports_rdev(dev_null_open: int) -> None:
    st = os.stat("/dev/null")
    got = open_device_files(Path("/proc"), os.getpid(), pattern=re.compile("/dev/null"))
    assert got == (DeviceFd("/dev/null", (os.major(st.st_rdev), os.minor(st.st_rdev))),)
    assert got[0].rdev == (1, 3)


def test_real_procfs_regular_file_has_no_rdev(tmp_path: Path) -> None:
    f = tmp_path / "plain"
    f.write_text("x")
    with open(f) as fh:
        assert fh
        got = open_device_files(Path("/proc"), os.getpid(), pattern=re.compile(re.escape(str(f))))
    assert got == (DeviceFd(str(f), None),)


def test_real_procfs_default_pattern_runs() -> None:
    for d in open_device_files(Path("/proc"), os.getpid()):
        assert ACCELERATOR_DEVICE_RE.fullmatch(d.path)


def test_only_a_live_procfs_counts_as_live(tmp_path: Path) -> None:
    from numa_exporter.sources.process_fds import is_live_procfs

    assert is_live_procfs(Path("/proc"))
    assert not is_live_procfs(tmp_path)
    (tmp_path / "self").mkdir()  # fixture captures keep self/ as a folder
    assert not is_live_procfs(tmp_path)


def test_fixture_links_are_not_followed_to_this_machines_dev(tmp_path: Path) -> None:
    # a fixture fd link to /dev/null: stat would follow it to this machine's real
    # character device and report its (major, minor) as if the fixture process had it open
    from numa_exporter.config import Config
    from numa_exporter.readers.accelerator_use import AcceleratorMap
    from numa_exporter.readers.error_report import ErrorReporter
    from numa_exporter.roots import Roots
    from numa_exporter.sources.procfs import ProcFS

    proc = tmp_path / "proc"
    (proc / "7" / "fd").mkdir(parents=True)
    (proc / "7" / "fd" / "3").symlink_to("/dev/null")
    amap = AcceleratorMap(None, Config(roots=Roots(proc, tmp_path / "sys")), ProcFS(proc),
                          ErrorReporter(quiet=True))
    assert amap._stat_rdev is False
    assert open_device_files(proc, 7, stat_rdev=amap._stat_rdev,
                             pattern=re.compile("/dev/null")) == (DeviceFd("/dev/null", None),)


def test_a_long_fd_scan_can_be_stopped(proc: Path) -> None:
    from numa_exporter.sources.deadline import Deadline, Expired
    from numa_exporter.sources.process_fds import CHECK_EVERY

    fd = proc / "4242" / "fd"
    for i in range(1000, 1000 + 2 * CHECK_EVERY):
        (fd / str(i)).symlink_to("/tmp/not-a-device")
    looks: list[int] = []

    def clock() -> float:  # the deadline passes at the second look
        looks.append(1)
        return float(len(looks))

    with pytest.raises(Expired):
        open_device_files(proc, 4242, stat_rdev=False, deadline=Deadline(2.0, clock=clock))
    assert len(looks) == 2
    assert open_device_files(proc, 4242, stat_rdev=False,
                             deadline=Deadline(1e9, clock=clock))
