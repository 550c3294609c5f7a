"""A process whose main thread has exited (issue 15 #7): its leader is a zombie (status
without VmRSS, an empty numa_maps) while another thread holds the memory. It is read through
that thread; kernel threads are told apart by PF_KTHREAD in stat's flags.

A copy of the two_node root in which process 300 looks as the kernel shows such a process,
then for real: a C program that calls pthread_exit() in main."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import REPO, ROOTS, fixture_config
from tools.soak_rounds import ZOMBIE_LEADER_C

from numa_exporter.config import Config
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

PID, TID = 300, 310
ZOMBIE_FLAGS = 0x40800C  # PF_EXITING | ... as a real zombie leader's stat shows, no PF_KTHREAD


def _zombie_leader_root(tmp: Path) -> tuple[Path, bytes]:
    """Return the root and process 300's original numa_maps (now behind task/310)."""
    root = tmp / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    proc = root / "proc" / str(PID)
    maps = (proc / "numa_maps").read_bytes()
    status = (proc / "status").read_bytes()
    live = proc / "task" / str(TID)
    # the live thread sees the process's memory: its status has VmRSS, its numa_maps all
    (live / "status").write_bytes(status.replace(b"Pid:\t300", b"Pid:\t310"))
    (live / "numa_maps").write_bytes(maps)
    (live / "cgroup").write_bytes((proc / "cgroup").read_bytes())
    # the leader: a zombie without memory lines, an empty numa_maps
    zombie = b"".join(line for line in status.splitlines(keepends=True)
                      if not line.startswith((b"Vm", b"Rss", b"Hugetlb")))
    zombie = zombie.replace(b"State:\tS (sleeping)", b"State:\tZ (zombie)")
    for f in (proc / "status", proc / "task" / str(PID) / "status"):
        f.write_bytes(zombie)
    (proc / "numa_maps").write_bytes(b"")
    for f in (proc / "stat", proc / "task" / str(PID) / "stat"):
        fields = f.read_bytes().split(b" ")
        fields[2] = b"Z"
        fields[8] = str(ZOMBIE_FLAGS).encode()  # field 9: flags
        f.write_bytes(b" ".join(fields))
    return root, maps


def test_zombie_leader_is_read_through_a_live_thread(tmp_path: Path) -> None:
    root, _ = _zombie_leader_root(tmp_path)
    snap = Scanner(fixture_config(root)).scan()
    (p,) = [p for p in snap.processes if p.pid == PID]
    base = Scanner(fixture_config(ROOTS / "two_node")).scan()
    (q,) = [q for q in base.processes if q.pid == PID]
    assert p.memory == q.memory and sum(p.memory.values()) > 0  # the same bytes as before
    assert p.rss_bytes == q.rss_bytes == 140416 * 1024
    assert p.comm == "splitter"
    assert snap.stats.states == base.stats.states  # counted as scanned, as before


def test_kernel_thread_is_known_by_pf_kthread_not_by_missing_fields(tmp_path: Path) -> None:
    root, _ = _zombie_leader_root(tmp_path)
    proc = root / "proc" / str(PID)
    for f in (proc / "stat",):
        fields = f.read_bytes().split(b" ")
        fields[8] = str(ZOMBIE_FLAGS | 0x00200000).encode()  # PF_KTHREAD
        f.write_bytes(b" ".join(fields))
    snap = Scanner(fixture_config(root)).scan()
    assert PID not in {p.pid for p in snap.processes}
    base = Scanner(fixture_config(ROOTS / "two_node")).scan()
    # a kernel thread is in no state at all: one process fewer than before
    assert sum(snap.stats.states.values()) == sum(base.stats.states.values()) - 1


@pytest.mark.parametrize("line", [b"Kthread:\t0\n", b""])
def test_status_kthread_line_is_taken_when_present(tmp_path: Path, line: bytes) -> None:
    """Kernels since 6.x print PF_KTHREAD in status (Kthread: 0/1): no stat read needed.
    With Kthread: 0 or without the line, the zombie leader is read through its thread."""
    root, _ = _zombie_leader_root(tmp_path)
    st = root / "proc" / str(PID) / "status"
    st.write_bytes(st.read_bytes().replace(b"Threads:", line + b"Threads:"))
    snap = Scanner(fixture_config(root)).scan()
    assert PID in {p.pid for p in snap.processes}
    st.write_bytes(st.read_bytes().replace(line + b"Threads:", b"Kthread:\t1\nThreads:"))
    snap = Scanner(fixture_config(root)).scan()
    assert PID not in {p.pid for p in snap.processes}  # the kernel says kernel thread


def test_inspect_reads_a_zombie_leader(tmp_path: Path) -> None:
    root, _ = _zombie_leader_root(tmp_path)
    r = subprocess.run([sys.executable, "-m", "numa_exporter", "inspect", str(PID), "--json",
                        f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}",
                        f"--accelerator.records={ROOTS.parent / 'udev' / 'none.json'}"],
                       capture_output=True, text=True, cwd=REPO, check=False)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["comm"] == "splitter"




@pytest.fixture
def zombie_leader(tmp_path: Path):  # type: ignore[no-untyped-def]
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not found")
    src = tmp_path / "zl.c"
    src.write_text(ZOMBIE_LEADER_C)  # the soak's program: one C source
    exe = tmp_path / "zombie-leader"
    subprocess.run([gcc, "-O2", "-pthread", "-o", str(exe), str(src)], check=True)
    child = subprocess.Popen([str(exe), "96"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 10
        while b"Z (zombie)" not in Path(f"/proc/{child.pid}/status").read_bytes():
            assert time.monotonic() < deadline, "the leader did not become a zombie"
            time.sleep(0.01)
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_real_zombie_leader_is_scanned_and_inspected(zombie_leader: int) -> None:
    pid = zombie_leader
    status = Path(f"/proc/{pid}/status").read_bytes()
    assert b"VmRSS" not in status and Path(f"/proc/{pid}/numa_maps").read_bytes() == b""
    cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 << 20,
                 sampling=False)
    sample, _ = Scanner(cfg).sample_one(pid)
    assert sample is not None, "read as a kernel thread"
    assert sample.comm == "zombie-leader"
    assert sum(sample.memory.values()) >= 96 << 20
    snap = Scanner(cfg).scan()
    (p,) = [p for p in snap.processes if p.pid == pid]
    assert sum(p.memory.values()) >= 96 << 20
    r = subprocess.run([sys.executable, "-m", "numa_exporter", "inspect", str(pid), "--json",
                        "--accelerator.records", str(ROOTS.parent / "udev" / "none.json")],
                       capture_output=True, text=True, cwd=REPO, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["comm"] == "zombie-leader"


def test_a_thread_read_through_that_exits_is_gone_not_absent() -> None:
    """The live thread can exit between listing and reading: that is the process going
    away (next scan picks another thread), not a file missing from a live process."""
    from numa_exporter.sources.errors import Absent, Gone
    from numa_exporter.sources.procfs import ProcFS

    files = ProcFS(ROOTS / "two_node" / "proc").process(PID)
    with pytest.raises(Gone) as exc:
        list(files.through(99999).numa_maps())
    assert not isinstance(exc.value, Absent)
    with pytest.raises(Absent):  # a file missing while the process is there stays Absent
        list(files.maps())  # the fixture has no maps file for 300
