"""The VMA list read by PROCMAP_QUERY (Linux 6.11+) against the maps text of the same real
process: the same strata, paths asked only for VMAs the last read did not know, and the
frame cache choosing between the two ways. Skipped where the kernel has no such ioctl (the
6.1 guest of the real-kernel tier covers the fallback: every read there is the text)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from numa_exporter.model.sampling import Stratum
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.readers.sampled import compiled as sampled_compiled
from numa_exporter.readers.sampled.frames import FrameCache, Way
from numa_exporter.sources.errors import Gone, ReadFailed
from numa_exporter.sources.maps_query import MapsQueryUnsupported, with_maps_descriptor
from numa_exporter.sources.procfs import ProcFS

PAGE = os.sysconf("SC_PAGE_SIZE")
MOUNTS = ("/dev/hugepages",)

# A process with every kind of mapping the rules tell apart, many of them: anonymous ones,
# memfds of distinct (and hostile) names, a /dev/shm file with a hostile name, a shared
# anonymous mapping (/dev/zero), a private file mapping, PROT_NONE guards. On "churn" it
# unmaps some memfds, maps new ones and makes some anonymous mappings PROT_NONE.
CHILD = textwrap.dedent(r"""
    import ctypes, mmap, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = os.sysconf("SC_PAGE_SIZE")
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    n = int(sys.argv[1])

    def memfd(name):
        fd = os.memfd_create(name)
        os.ftruncate(fd, page)
        a = libc.mmap(None, page, rw, mmap.MAP_SHARED, fd, 0)
        os.close(fd)
        ctypes.memset(a, 1, page)
        return a

    def anon(prot):
        a = libc.mmap(None, 2 * page, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        ctypes.memset(a, 1, 2 * page)
        libc.mprotect(a, 2 * page, prot)
        return a

    fds = [memfd("q-%d" % i if i % 3 else "q %d (deleted)\n[vdso]  " % i) for i in range(n)]
    anons = [anon(rw if i % 2 else mmap.PROT_READ) for i in range(n)]
    shm = "/dev/shm/numa-exporter-query-%d (deleted)" % os.getpid()
    fd = os.open(shm, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 4 * page)
    keep = [mmap.mmap(fd, 4 * page, flags=mmap.MAP_SHARED)]
    os.unlink(shm)
    keep.append(mmap.mmap(-1, 8 * page, flags=mmap.MAP_SHARED))  # /dev/zero (deleted)
    keep.append(open(sys.executable, "rb"))
    keep.append(mmap.mmap(keep[-1].fileno(), page, flags=mmap.MAP_PRIVATE,
                          prot=mmap.PROT_READ))
    libc.mmap(None, 64 * page, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)  # guard
    print("ready", flush=True)
    for line in sys.stdin:
        for a in fds[: n // 4]:
            libc.munmap(a, page)
        fds[: n // 4] = [memfd("new-%d" % i) for i in range(n // 8)]
        for a in anons[: n // 8]:
            libc.mprotect(a, 2 * page, 0)
        print("churned", flush=True)
""")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "3000"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _maps(pid: int) -> str:
    return f"/proc/{pid}/maps"


def _query(pid: int, known: bytes = b"") -> tuple[sampled_compiled.Parsed, int]:
    try:
        return with_maps_descriptor(_maps(pid), lambda fd: sampled_compiled.query_frame(
            fd, PAGE, MOUNTS, known))
    except MapsQueryUnsupported:
        pytest.skip("this kernel has no PROCMAP_QUERY (before Linux 6.11)")


def _text(pid: int) -> sampled_compiled.Parsed:
    return sampled_compiled.parse_frame((Path(_maps(pid)).read_bytes(),), PAGE, MOUNTS,
                                        keep_known=True)


def _shape(strata: dict[Kind, Stratum]) -> dict[Kind, tuple[list[int], list[int], int]]:
    return {k: (list(s.starts), list(s.cumulative), s.largest) for k, s in strata.items()}


def _churn(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("churn\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "churned\n"


pytestmark = pytest.mark.skipif(not sampled_compiled.COMPILED,
                                reason="the sampled reader's extension is not built")


def test_the_query_gives_the_strata_of_the_text(child: subprocess.Popen[str]) -> None:
    text = _text(child.pid)
    query, asked = _query(child.pid)
    assert _shape(query.strata) == _shape(text.strata)
    assert list(query.strata) == list(text.strata)  # the same order of first appearance
    assert {Kind.ANON, Kind.SHMEM, Kind.FILE} <= set(text.strata)
    # the text counts the vsyscall gate area, which is no VMA (x86-64); else the same
    assert 0 <= text.mappings - query.mappings <= 1
    assert asked > 6000  # no known records: the path of every accessible VMA was asked
    # the known records of the text leave nothing to ask
    again, asked = _query(child.pid, text.known)
    assert _shape(again.strata) == _shape(text.strata) and asked == 0
    # and those of the query too
    _, asked = _query(child.pid, query.known)
    assert asked == 0


def test_after_churn_only_new_vmas_are_asked_for_and_the_strata_stay_exact(
        child: subprocess.Popen[str]) -> None:
    before = _text(child.pid)
    _churn(child)
    after = _text(child.pid)
    got, asked = _query(child.pid, before.known)
    assert _shape(got.strata) == _shape(after.strata)
    assert _shape(got.strata) != _shape(before.strata)
    # 375 new memfds (unmapped ones' neighbours may merge or split): asked, not the rest
    assert 375 <= asked < 1000


def test_the_frame_cache_tries_the_query_then_keeps_the_cheaper_way(
        child: subprocess.Popen[str]) -> None:
    files = ProcFS(Path("/proc")).process(child.pid)
    cache = FrameCache()
    first, way = cache.read(child.pid, files, PAGE, MOUNTS)
    assert way is Way.TEXT
    second, way = cache.read(child.pid, files, PAGE, MOUNTS)
    if cache.query_usable is False:
        pytest.skip("this kernel has no PROCMAP_QUERY (before Linux 6.11)")
    assert way is Way.QUERY  # tried once for a process of many mappings
    assert _shape(second.strata) == _shape(first.strata)
    assert second.largest_mapping == first.largest_mapping
    ways = {cache.read(child.pid, files, PAGE, MOUNTS)[1] for _ in range(3)}
    assert len(ways) == 1  # then the cheaper as measured, not both in turn
    _churn(child)
    got, _ = cache.read(child.pid, files, PAGE, MOUNTS)
    assert _shape(got.strata) == _shape(_text(child.pid).strata)


def test_a_text_read_after_an_unchanged_query_is_not_parsed_again(
        child: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch) -> None:
    files = ProcFS(Path("/proc")).process(child.pid)
    cache = FrameCache()
    first, _ = cache.read(child.pid, files, PAGE, MOUNTS)
    _, way = cache.read(child.pid, files, PAGE, MOUNTS)
    if way is not Way.QUERY:
        pytest.skip("this kernel has no PROCMAP_QUERY (before Linux 6.11)")
    parsed: list[int] = []
    real = sampled_compiled.parse_frame

    def counting(*args: object, **kw: object) -> sampled_compiled.Parsed:
        parsed.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sampled_compiled, "parse_frame", counting)
    assert cache.frame(child.pid, files.maps(), PAGE, MOUNTS) is first
    assert parsed == []
    _churn(child)
    _, way = cache.read(child.pid, files, PAGE, MOUNTS)
    if way is Way.QUERY:  # the frame changed: its text is no longer kept
        assert cache.frame(child.pid, files.maps(), PAGE, MOUNTS) is not first
        assert parsed == [1]


def test_a_process_gone_before_the_query_is_gone(child: subprocess.Popen[str]) -> None:
    files = ProcFS(Path("/proc")).process(child.pid)
    cache = FrameCache()
    cache.read(child.pid, files, PAGE, MOUNTS)
    child.kill()
    child.wait()
    with pytest.raises(Gone):
        cache.read(child.pid, files, PAGE, MOUNTS)


def test_a_kernel_without_the_ioctl_is_read_by_the_text(
        child: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def enotty(*_: object) -> object:
        raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

    monkeypatch.setattr(sampled_compiled, "query_frame", enotty)
    files = ProcFS(Path("/proc")).process(child.pid)
    cache = FrameCache()
    ways = [cache.read(child.pid, files, PAGE, MOUNTS)[1] for _ in range(3)]
    assert ways == [Way.TEXT] * 3
    assert cache.query_usable is False


LONG_CHILD = textwrap.dedent(r"""
    import mmap, os, sys
    os.chdir(sys.argv[1])
    for _ in range(20):  # 20 components of 240 bytes: a path over PATH_MAX (4096)
        os.mkdir("d" * 240)
        os.chdir("d" * 240)
    with open("f", "wb") as f:
        f.write(b"x" * 4096)
    keep = [mmap.mmap(os.open("f", os.O_RDONLY), 4096, prot=mmap.PROT_READ)]
    keep += [mmap.mmap(-1, 4096) for _ in range(3000)]
    for i, m in enumerate(keep[1:]):
        m[0] = 1
    print("ready", flush=True)
    for line in sys.stdin:  # map the file once more: a VMA no read knows yet
        keep.append(mmap.mmap(os.open("f", os.O_RDONLY), 4096, prot=mmap.PROT_READ))
        print("mapped", flush=True)
""")


def test_a_path_over_path_max_fails_the_query_and_the_text_reads_it(
        tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", LONG_CHILD, str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        with pytest.raises(ReadFailed) as got:
            _query(proc.pid)
        assert got.value.errno == errno.ENAMETOOLONG
        text = _text(proc.pid)
        assert Kind.FILE in text.strata
        files = ProcFS(Path("/proc")).process(proc.pid)
        cache = FrameCache()
        # known from the text read, the VMA's path is not asked for: the query reads it
        ways = [cache.read(proc.pid, files, PAGE, MOUNTS)[1] for _ in range(2)]
        assert ways == [Way.TEXT, Way.QUERY]
        assert proc.stdin is not None
        proc.stdin.write("again\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "mapped\n"
        # a new VMA of that path: the query fails, the read falls back to the text
        frame, way = cache.read(proc.pid, files, PAGE, MOUNTS)
        assert way is Way.TEXT
        assert cache._frames[proc.pid].costs.query == float("inf")  # and waits to retry
        assert _shape(frame.strata) == _shape(_text(proc.pid).strata) != _shape(text.strata)
    finally:
        proc.kill()
        proc.wait()
        # removed here, by descriptors (rmtree's openat walk): pytest's own clean-up of a
        # tree deeper than PATH_MAX was seen to take a minute
        shutil.rmtree(tmp_path / ("d" * 240))
