"""Sampled placement against real processes of this machine, checked with their numa_maps.

A child process maps and touches memory of known kinds; the sampled estimate (maps + status
+ move_pages) is compared with the same process's full numa_maps read right after.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from numa_exporter.model.sampling import sample_size
from numa_exporter.parsers.numa_maps import Kind, parse_numa_maps
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled.reader import (
    SampledRequest,
    read_sampled,
    sampling_available,
)
from numa_exporter.sources.errors import Denied, Gone, ReadFailed
from numa_exporter.sources.move_pages import (
    SYSCALL_NUMBERS,
    MovePages,
    MovePagesUnsupported,
    classify_errno,
)
from numa_exporter.sources.procfs import ProcFS

MiB = 1 << 20
PROC = Path("/proc")

CHILD = textwrap.dedent("""
    import mmap, os, sys
    page = os.sysconf("SC_PAGE_SIZE")
    anon = mmap.mmap(-1, {anon} << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, len(anon), page):
        anon[i] = 1
    keep = [anon]
    if {shm}:
        path = "/dev/shm/numa-exporter-sampled-%d" % os.getpid()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, {shm} << 20)
        shm = mmap.mmap(fd, {shm} << 20, flags=mmap.MAP_SHARED)
        os.unlink(path)
        for i in range(0, len(shm), page):
            shm[i] = 1
        keep.append(shm)
    if {sparse}:
        sp = mmap.mmap(-1, {sparse} << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        for i in range(0, len(sp), 16 * page):
            sp[i] = 1
        keep.append(sp)
    print("ready", flush=True)
    sys.stdin.read()
""")


def _start(anon: int, shm: int = 0, sparse: int = 0) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", CHILD.format(anon=anon, shm=shm, sparse=sparse)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    return p


def _stop(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    p = _start(anon=256, shm=64, sparse=1024)
    yield p
    _stop(p)


@pytest.fixture(scope="module")
def available() -> None:
    ok, why = sampling_available(PROC)
    if not ok:
        pytest.skip(f"sampling unavailable here: {why}")


def _kind_bytes(b: dict[tuple[int, Kind], int], kind: Kind) -> int:
    return sum(v for (_, k), v in b.items() if k is kind)


def test_estimate_matches_numa_maps(available: None, child: subprocess.Popen[str]) -> None:
    pf = ProcFS(PROC).process(child.pid)
    st = parse_pid_status(pf.status())
    est = read_sampled(pf, st, SampledRequest(rng=random.Random(5)))
    nm = parse_numa_maps(pf.numa_maps())
    # Same nodes, same kinds present.
    assert est.node_bytes().keys() == nm.node_bytes().keys()
    assert {k for _, k in est.bytes} == {k for _, k in nm.bytes}
    # Totals per kind within 2 % (the sampled strata are scaled to status counters).
    for kind in (Kind.ANON, Kind.SHMEM):
        e, n = _kind_bytes(est.bytes, kind), _kind_bytes(nm.bytes, kind)
        assert abs(e - n) <= 0.02 * n + 2 * MiB, (kind, e / MiB, n / MiB)
    assert abs(est.total_bytes - sum(nm.bytes.values())) <= 0.02 * sum(nm.bytes.values())
    # Per node: the remote ratio for every single-node home agrees (one node here: exactly).
    for node in nm.node_bytes():
        home = frozenset({node})
        kern = 1 - nm.node_bytes()[node] / sum(nm.bytes.values())
        assert abs(est.remote_ratio(home) - kern) <= 0.02  # 4 standard errors
    # Far fewer pages queried than the process has (256 + 64 + 64 MiB resident).
    assert est.samples < 0.5 * (sum(nm.bytes.values()) // os.sysconf("SC_PAGE_SIZE"))
    assert est.parse_errors == 0 and est.other_errors == 0
    assert est.unsampled_bytes <= 2 * MiB


def test_sparse_mapping_reaches_its_quota(available: None,
                                          child: subprocess.Popen[str]) -> None:
    """1 GiB mapped, every 16th page touched: 1/16 of anon's virtual pages are resident."""
    pf = ProcFS(PROC).process(child.pid)
    est = read_sampled(pf, parse_pid_status(pf.status()), SampledRequest(rng=random.Random(9)))
    anon = next(s for s in est.strata if s.kind is Kind.ANON)
    w = anon.bytes / est.total_bytes
    assert not anon.census and anon.resident >= sample_size() * w * w  # its quota
    assert anon.queried > 2 * anon.resident  # most of its virtual pages are not resident
    assert not est.budget_exhausted


def test_gone_after_exit(available: None) -> None:
    p = _start(anon=8)
    pf = ProcFS(PROC).process(p.pid)
    st = parse_pid_status(pf.status())
    _stop(p)
    with pytest.raises(Gone):
        read_sampled(pf, st)
    with pytest.raises(Gone):
        MovePages().query(p.pid, [0x10000])


def test_query_own_pages() -> None:
    try:
        mp = MovePages()
    except MovePagesUnsupported as exc:
        pytest.skip(str(exc))
    buf = ctypes.create_string_buffer(64 * 1024)
    addr = ctypes.addressof(buf)
    page = os.sysconf("SC_PAGE_SIZE")
    first = addr - addr % page + page
    ctypes.memset(first, 1, page)
    st = mp.query(os.getpid(), [first, 8])  # a touched page; an address with no mapping
    assert st[0] >= 0
    assert st[1] == -14  # -EFAULT
    many = mp.query(os.getpid(), [first] * 1000)  # several batches
    assert many == [st[0]] * 1000


def test_unknown_architecture_never_guesses() -> None:
    with pytest.raises(MovePagesUnsupported, match="no system call number"):
        MovePages(machine="vax", allow_libnuma=False)
    assert "vax" not in SYSCALL_NUMBERS


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to query as another user")
def test_other_users_process_is_denied(available: None) -> None:
    """An unprivileged caller may not query a root process (ptrace_may_access fails)."""
    p = _start(anon=8)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child drops to nobody and queries the root-owned process
        try:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            try:
                MovePages().query(p.pid, [4096])
                msg = b"allowed"
            except Denied:
                msg = b"denied"
            except BaseException as exc:
                msg = repr(exc).encode()
            os.write(w, msg)
        finally:
            os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as fh:
            got = fh.read()
        os.waitpid(pid, 0)
    finally:
        _stop(p)
    assert got == b"denied"


def test_available_on_this_proc() -> None:
    ok, why = sampling_available(PROC)
    if "move_pages" in why and not ok:
        pytest.skip(why)
    assert ok, why


def test_unavailable_for_a_foreign_namespace_root(tmp_path: Path) -> None:
    """A procfs root where we are listed under another pid, or not at all, is refused."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text(f"Name:\tx\nNSpid:\t{os.getpid() + 1}\t7\n")
    ok, why = sampling_available(tmp_path)
    if "move_pages" in why and not ok and "probe" in why:
        pytest.skip(why)
    assert not ok and "another PID namespace" in why
    (tmp_path / "self" / "status").write_text("Name:\tx\n")
    assert sampling_available(tmp_path) == (
        False, f"{tmp_path}/self/status has no NSpid line: cannot check namespaces")
    empty = tmp_path / "empty"
    empty.mkdir()
    ok, why = sampling_available(empty)
    assert not ok and "not of our PID namespace" in why


def _unshare() -> str:
    exe = shutil.which("unshare")
    if exe is None or os.geteuid() != 0:
        pytest.skip("needs unshare(1) and root")
    return exe


def test_refused_inside_a_child_pid_namespace() -> None:
    """The container case: we run in a new PID namespace but read the host's procfs."""
    code = ("from pathlib import Path; from numa_exporter.readers.sampled.reader import "
            "sampling_available as s; ok, why = s(Path('/proc')); print(ok); print(why)")
    r = subprocess.run([_unshare(), "--pid", "--fork", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0:
        pytest.skip(f"unshare --pid failed here: {r.stderr.strip()[-200:]}")
    ok, why = r.stdout.splitlines()[:2]
    assert ok == "False" and "another PID namespace" in why, r.stdout


def test_refused_for_the_procfs_of_a_child_namespace() -> None:
    """A procfs of a namespace we are not in (reached through a process's root)."""
    p = subprocess.Popen([_unshare(), "--pid", "--fork", "--mount-proc", "sleep", "60"],
                         stderr=subprocess.PIPE)
    try:
        root = PROC / str(p.pid) / "root" / "proc"
        for _ in range(100):
            try:
                if (root / "1" / "cmdline").read_bytes().startswith(b"sleep"):
                    break  # pid 1 of the new namespace: its own procfs is mounted
            except OSError:
                pass
            if p.poll() is not None:
                pytest.skip("unshare --mount-proc failed here")
            time.sleep(0.05)
        ok, why = sampling_available(root)
        assert not ok, why
    finally:
        p.kill()
        p.wait()


def test_libnuma_fallback_agrees_with_the_syscall() -> None:
    """On an architecture missing from the table, libnuma's move_pages is used instead."""
    try:
        direct = MovePages(allow_libnuma=False)
        via = MovePages(machine="not-in-the-table")
    except MovePagesUnsupported as exc:
        pytest.skip(str(exc))
    assert (direct.via, via.via) == ("syscall", "libnuma") and via.number is None
    buf = ctypes.create_string_buffer(3 * 4096)
    page = os.sysconf("SC_PAGE_SIZE")
    first = ctypes.addressof(buf) - ctypes.addressof(buf) % page + page
    ctypes.memset(first, 1, 16)
    addrs = [first, 8, first + 3 * page + (1 << 40)]
    assert via.query(os.getpid(), addrs) == direct.query(os.getpid(), addrs)


@pytest.mark.parametrize(("err", "kind"), [
    (errno.ESRCH, Gone), (errno.EINVAL, Gone), (errno.EPERM, Denied), (errno.EACCES, Denied),
    (errno.ENOSYS, MovePagesUnsupported), (errno.EIO, ReadFailed), (errno.ENOMEM, ReadFailed),
])
def test_errno_classification(err: int, kind: type[Exception]) -> None:
    exc = classify_errno(err, "move_pages(1)")
    assert type(exc) is kind


def test_reader_reports_a_missing_move_pages_as_a_read_error(tmp_path: Path) -> None:
    """A kernel without move_pages (ENOSYS) surfaces as ReadFailed, like a file read."""

    class NoMovePages(MovePages):
        def query(self, pid: int, addresses: Sequence[int]) -> list[int]:
            raise classify_errno(errno.ENOSYS, f"move_pages({pid})")

    p = _start(anon=32)
    try:
        pf = ProcFS(PROC).process(p.pid)
        with pytest.raises(ReadFailed, match="move_pages"):
            read_sampled(pf, parse_pid_status(pf.status()), move_pages=NoMovePages())
    finally:
        _stop(p)


def test_calls_are_spaced_by_the_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two system calls (of one query or the next) at least pause_s passes."""
    import numa_exporter.sources.move_pages as mod

    class Clock:
        def __init__(self) -> None:
            self.now = 100.0
            self.slept: list[float] = []

        def monotonic(self) -> float:
            return self.now

        def sleep(self, s: float) -> None:
            self.slept.append(s)
            self.now += s

    clock = Clock()
    monkeypatch.setattr(mod, "time", clock)
    try:
        mp = MovePages(batch=16, pause_s=0.001)
    except MovePagesUnsupported as exc:
        pytest.skip(str(exc))
    calls: list[float] = []

    def fake_call(pid: int, pages: object, status: object, n: int) -> int:
        calls.append(clock.now)
        clock.now += 0.0002  # the call itself takes 0.2 ms
        return 0

    monkeypatch.setattr(mp, "_call", fake_call)
    mp.query(1, [4096] * 40)  # three calls
    clock.now += 0.0004
    mp.query(1, [4096])  # a fourth, 0.4 ms after the third ended
    assert len(calls) == 4
    gaps = [b - a - 0.0002 for a, b in itertools.pairwise(calls)]
    assert all(g >= 0.001 - 1e-12 for g in gaps), gaps
    assert clock.slept[0] == pytest.approx(0.001) and clock.slept[-1] == pytest.approx(0.0006)
