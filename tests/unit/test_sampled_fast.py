"""The compiled sampled reader (readers/sampled/_sampled_fast.c) against the pure-Python reference.

The two paths must give the same frame for the same maps text and the same estimate for the
same seed; the compiled one must be the one used where the extension is built.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.model.sampling import (
    QuerySampler,
    Tally,
    build_strata,
    draw_addresses,
    estimate_placement,
    make_stratum,
)
from numa_exporter.parsers import numa_maps, pid_maps
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.readers.sampled import compiled as sampled_compiled
from numa_exporter.readers.sampled.frames import Frame, FrameCache, parse_maps_text
from numa_exporter.readers.sampled.reader import (
    SampledReader,
    SampledRequest,
    SampledSettings,
    page_sampler,
    read_sampled,
    sampling_available,
)
from numa_exporter.sources.deadline import Deadline, Expired
from numa_exporter.sources.errors import Gone
from numa_exporter.sources.move_pages import MovePages
from numa_exporter.sources.procfs import ProcFS

PROC = Path("/proc")
PAGE = 4096
MOUNTS = ("/dev/hugepages",)

needs_compiled = pytest.mark.skipif(not sampled_compiled.COMPILED,
                                    reason="the extension is not built here")

HOSTILE = (
    b"7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
    b"7f0000100000-7f0000200000 rw-p 00000000 00:00 0                          [heap]\n"
    b"7f0000200000-7f0000300000 r-xp 00028000 fd:01 1315373                    /usr/lib/x.so\n"
    b"7f0000300000-7f0000400000 rw-s 00000000 00:01 4097   /dev/zero (deleted)\n"
    b"7f0000400000-7f0000500000 ---p 00000000 00:00 0\n"
    b"7f0000500000-7f0000600000 rw-s 00000000 00:05 12 /dev/nvidia0\n"
    b"7f0000600000-7f0000a00000 rw-p 00000000 00:0f 77 /anon_hugepage (deleted)\n"
    b"7f0000a00000-7f0000e00000 rw-s 00000000 00:0f 78 /dev/hugepages/seg\n"
    b"7f0000e00000-7f0000f00000 rw-s 00000000 00:01 79 /dev/shm/a b\\012c\n"
    b"7f0000f00000-7f0001000000 rw-s 00000000 00:01 80 [anon_shmem:x]\n"
    b"7f0001000000-7f0001001000 r--p 00000000 00:00 0 [vvar]\n"
    b"7f0001001000-7f0001002000 r-xp 00000000 00:00 0 [vdso]\n"
    b"   \t\r\n"
    b"\n"
    b"7f0001002000-7f0001002000 rw-p 00000000 00:00 0\n"  # empty: malformed
    b"7f0001003000-7f0001002000 rw-p 00000000 00:00 0\n"  # end before start: malformed
    b"7F0001003000-7f0001004000 rw-p 00000000 00:00 0\n"  # upper case: malformed
    b"7f0001004000-7f0001005000 rw-p 00000000 00:00 123456789012345678901\n"  # 21 digits
    b"7f0001005000-7f0001006000 rw-x 00000000 00:00 0\n"  # no p/s
    b"17f0001005000-7f0001006000 rw-p 00000000 00:00 0\n"  # 13 digits: fine
    b"00000000000000000-1 rw-p 00000000 00:00 0\n"  # 17 digits
    b"7f0001006001-7f0001007001 rw-p 00000000 00:00 0\n"  # unaligned
    b"7f0001008000-7f0001009000 rw-p 00000000 000000000:00 0\n"  # 9-digit major
    b"7f0001008000-7f0001009000 rw-p 00000000 00:00 0\x00junk\n"  # NUL after the inode
    b"fffffffffffff000-ffffffffffffffff rw-p 00000000 00:00 0 /top\n"
    b"0-1 rwxp 0 0:0 0     spaces  in path  \n"
    b"garbage\n"
    b"7f000100a000-7f000100b000 rw-p 00000000 00:00 0 /no/newline"
)


def _pure(text: bytes, pieces: int = 1) -> Frame:
    return parse_maps_text(_chunks(text, pieces), PAGE, MOUNTS, compiled=False)


def _fast(text: bytes, pieces: int = 1) -> Frame:
    return parse_maps_text(_chunks(text, pieces), PAGE, MOUNTS, compiled=True)


def _chunks(text: bytes, pieces: int) -> Iterator[bytes]:
    step = max(1, len(text) // pieces)
    return (text[i:i + step] for i in range(0, len(text), step))


@needs_compiled
def test_hostile_maps_text_gives_the_reference_frame() -> None:
    ref = _pure(HOSTILE)
    got = _fast(HOSTILE)
    assert got == ref
    assert list(got.strata) == list(ref.strata)  # the order decides the random draws
    assert ref.parse_errors >= 9 and set(ref.strata) == set(Kind)


@needs_compiled
def test_random_maps_texts_give_the_reference_frame() -> None:
    rng = random.Random(14)
    lines = HOSTILE.split(b"\n")
    for _ in range(300):
        picked = [rng.choice(lines) for _ in range(rng.randrange(1, 40))]
        text = bytearray(b"\n".join(picked))
        for _ in range(rng.randrange(0, 4)):  # mutate a few bytes
            if text:
                text[rng.randrange(len(text))] = rng.choice(b"0af -:\n\\ps/[x")
        t = bytes(text)
        assert _fast(t) == _pure(t), t
        assert list(_fast(t).strata) == list(_pure(t).strata)


@needs_compiled
def test_a_long_text_in_pieces_gives_the_reference_frame(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    rng = random.Random(3)
    out = []
    addr = 0x7F0000000000
    paths = [b"", b" /lib/a.so", b" /dev/shm/s", b" [stack]", b" /dev/hugepages/h"]
    for _ in range(20_000):
        size = rng.randrange(1, 64) * PAGE
        perms = rng.choice([b"rw-p", b"---p", b"r--s"])
        out.append(b"%x-%x %s 00000000 00:00 0%s\n" % (addr, addr + size, perms,
                                                       rng.choice(paths)))
        addr += size + PAGE * rng.randrange(0, 3)
    text = b"".join(out)
    monkeypatch.setattr(sampled_compiled, "PIECE", 4096)  # many pieces, lines cut across
    ref = _pure(text)
    for pieces in (1, 7, 300):
        got = _fast(text, pieces)
        assert got == ref
        assert list(got.strata) == list(ref.strata)
    # More mappings than are kept: both stop at the same place.
    monkeypatch.setattr(pid_maps, "MAX_ENTRIES", 12_345)
    monkeypatch.setattr(sampled_compiled, "MAX_ENTRIES", 12_345)
    small = _pure(text)
    assert small.mappings == 12_345
    assert _fast(text, 50) == small


@needs_compiled
def test_draws_are_those_of_the_reference() -> None:
    s = make_stratum(Kind.ANON, [(0x10000, 0x30000), (0x7F0000000000, 0x7F0040000000),
                                 (0x7FFF00000000, 0x7FFF00001000)], PAGE)
    fast = sampled_compiled.CompiledSampler(MovePages(pause_s=0), 1)
    for seed in range(5):
        a, b = random.Random(seed), random.Random(seed)
        for n in (0, 1, 16, 700, 4096):  # across the generator's 624-word refills
            assert list(fast.draw(s, n, a)) == draw_addresses(s, n, b)
        assert a.random() == b.random()  # the generator's state was handed back
    small = make_stratum(Kind.FILE, [(0x10000, 0x30000), (0x7F0000000000, 0x7F0000004000)],
                         PAGE)
    assert list(fast.every_page(small)) == list(small.all_addresses())
    # Any generator: the random numbers are its own random() calls (no copy of CPython's
    # Mersenne Twister in the extension, no reach into random.Random's internal state).
    sysrng = random.SystemRandom()
    assert len(fast.draw(s, 10, sysrng)) == 10

    class Fixed(random.Random):
        def random(self) -> float:
            return 0.5

    got = list(fast.draw(s, 3, Fixed()))
    assert got == draw_addresses(s, 3, Fixed()) and len(set(got)) == 1


@needs_compiled
def test_bad_arguments_are_refused_not_trusted() -> None:
    fast = sampled_compiled._sampled_fast
    assert fast is not None
    starts, cum = array("Q", [0x1000]), array("Q", [0, 4])
    half = array("d", [0.5] * 4)
    with pytest.raises((ValueError, TypeError)):
        fast.draw((1, 2, 3), starts, cum, PAGE)  # not an array of doubles
    with pytest.raises(ValueError):
        fast.draw(array("f", [0.5]), starts, cum, PAGE)  # floats, not doubles
    with pytest.raises(ValueError):
        fast.draw(array("d", [1.0]), starts, cum, PAGE)  # outside [0, 1)
    with pytest.raises(ValueError):
        fast.draw(array("d", [float("nan")]), starts, cum, PAGE)
    with pytest.raises(ValueError):
        fast.draw(half, starts, array("Q", [0]), PAGE)
    with pytest.raises(ValueError):
        fast.draw(half, starts, array("Q", [0, 0]), PAGE)
    with pytest.raises(ValueError):
        fast.pages(starts, array("Q", [0, 1 << 40]), PAGE)  # far too many pages to list
    with pytest.raises(ValueError):
        fast.query(279, 1, array("Q", range(300)), 0, 300, 1023)  # over one batch
    with pytest.raises(ValueError):
        fast.query(279, 1, array("Q", range(3)), 2, 5, 1023)  # past the end
    with pytest.raises(ValueError):
        fast.maps_frame(b"", 4095, (), 10, (0, 0, 0, 0))  # not a power of two
    with pytest.raises(TypeError):  # a mount prefix that is not bytes
        fast.maps_frame(b"1000-2000 rw-p 0 00:00 0 /x\n", PAGE, ("/x/",), 10, (0, 0, 0, 0))
    with pytest.raises(ValueError):  # more mounts than it takes
        fast.path_kind(b"/x", tuple(b"/m%d/" % i for i in range(fast.MAX_MOUNTS + 1)))
    fd = os.open("/proc/self/maps", os.O_RDONLY)
    try:
        with pytest.raises(ValueError):  # a known position past the records
            fast.query_frame(fd, 0, 10, PAGE, (), 10, (0, 0, 0, 0), b"", 1)
        with pytest.raises(ValueError):
            fast.query_frame(fd, 0, 10, 4095, (), 10, (0, 0, 0, 0), b"", 0)
    finally:
        os.close(fd)


@needs_compiled
def test_a_known_record_of_no_kind_is_asked_for_again() -> None:
    """Known records are the reader's own, yet a kind code out of range (a corrupted record)
    must not index past the strata: the VMA's path is asked for instead."""
    fast = sampled_compiled._sampled_fast
    assert fast is not None
    text = Path("/proc/self/maps").read_bytes()
    ref = sampled_compiled.parse_frame((text,), PAGE, MOUNTS, keep_known=True)
    bad = array("Q")
    bad.frombytes(ref.known)
    for i in range(4, len(bad), sampled_compiled.KNOWN_FIELDS):
        bad[i] = 7 if i % 2 else (1 << 63)  # codes 7 and a huge negative one
    fd = os.open("/proc/self/maps", os.O_RDONLY)
    try:
        try:
            _, kinds, _, _, _, _, _, asked = fast.query_frame(
                fd, 0, 1 << 20, PAGE, sampled_compiled.mount_prefixes(MOUNTS), 1 << 20,
                (0, 0, 0, 0), bad.tobytes(), 0)
        except OSError as err:
            if err.errno == errno.ENOTTY:
                pytest.skip("this kernel has no PROCMAP_QUERY (before Linux 6.11)")
            raise
    finally:
        os.close(fd)
    assert asked > 0 and len(kinds) == 4


CHILD = textwrap.dedent("""
    import mmap, os, sys
    page = os.sysconf("SC_PAGE_SIZE")
    keep = []
    for i in range(200):  # small mappings, some pages touched: census strata and holes
        m = mmap.mmap(-1, 32 * page)
        for j in range(i % 32):
            m[j * page] = 1
        keep.append(m)
    big = mmap.mmap(-1, 256 << 20)
    for i in range(0, len(big), 3 * page):  # a third resident: sampled, with misses
        big[i] = 1
    keep.append(big)
    print("ready", flush=True)
    os.read(0, 1)
""")


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    ok, why = sampling_available(PROC)
    if not ok:
        pytest.skip(f"sampling unavailable here: {why}")
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=30)


@needs_compiled
def test_both_paths_give_the_same_estimate_for_the_same_seed(
        child: subprocess.Popen[str]) -> None:
    pf = ProcFS(PROC).process(child.pid)
    st = parse_pid_status(pf.status())
    mp = MovePages(pause_s=0)
    each = SampledSettings(keep_frames=False)
    slow = SampledSettings(keep_frames=False, compiled=False)
    for seed in (1, 2):
        # The child may still fault a page of its own between "ready" and its read(): a
        # pure read on either side, and the compiled one must equal one of them.
        pure = read_sampled(pf, st, SampledRequest(rng=random.Random(seed)), slow, mp)
        fast = read_sampled(pf, st, SampledRequest(rng=random.Random(seed)), each, mp)
        again = read_sampled(pf, st, SampledRequest(rng=random.Random(seed)), slow, mp)
        assert fast in (pure, again)
        assert fast.samples > fast.resident_samples > 1000  # sampled, with misses
        assert any(s.census for s in fast.strata) and any(not s.census for s in fast.strata)
    other = read_sampled(pf, st, SampledRequest(rng=random.Random(3)), each, mp)
    assert other.samples != fast.samples or other.strata != fast.strata  # the seed counts


@needs_compiled
def test_the_compiled_path_is_used_where_it_is_built(child: subprocess.Popen[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fast = sampled_compiled._sampled_fast
    assert fast is not None
    calls = {"maps_frame": 0, "query": 0, "draw": 0}
    for name in calls:
        real = getattr(fast, name)

        def spy(*args: object, _real: object = real, _name: str = name) -> object:
            calls[_name] += 1
            return _real(*args)  # type: ignore[operator]
        monkeypatch.setattr(fast, name, spy)
    pf = ProcFS(PROC).process(child.pid)
    est = SampledReader().read(pf, parse_pid_status(pf.status()),
                               SampledRequest(rng=random.Random(1)))
    assert calls["maps_frame"] >= 1 and calls["draw"] >= 1
    assert calls["query"] * 256 >= est.samples  # every page went through the extension
    assert isinstance(page_sampler(MovePages(), 1), sampled_compiled.CompiledSampler)


def test_the_extension_is_built_where_the_numa_maps_scanner_is() -> None:
    """Both come from the same setup.py with the same compiler: one without the other is a
    broken build, not a machine without a compiler."""
    assert sampled_compiled.COMPILED == numa_maps.COMPILED


def test_without_the_extension_the_pure_path_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampled_compiled, "COMPILED", False)
    assert isinstance(page_sampler(MovePages(), 1), QuerySampler)
    got = parse_maps_text((HOSTILE,), PAGE, MOUNTS)
    ref = build_strata(pid_maps.parse_pid_maps(HOSTILE.splitlines(keepends=True)).entries,
                       PAGE, MOUNTS)
    assert got.strata == ref


@needs_compiled
def test_a_gone_process_is_gone_on_the_compiled_path() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    fast = sampled_compiled.CompiledSampler(MovePages(pause_s=0), p.pid)
    with pytest.raises(Gone):
        fast.tally(array("Q", [0x10000]), 0, 1, Tally())


@needs_compiled
def test_estimator_gives_the_same_with_either_sampler_on_a_fake_query() -> None:
    """The compiled sampler's draws feed the estimator exactly as the pure one's do: with
    the page statuses from the same fake (no system call), the estimates are equal."""
    entries = [pid_maps.MapsEntry(0x7F0000000000, 0x7F0000000000 + (64 << 20), "rw-p", 0, 0,
                                  0, 0, None),
               pid_maps.MapsEntry(0x7F1000000000, 0x7F1000000000 + (8 << 20), "rw-s", 0, 0,
                                  0, 0, "/dev/shm/x")]
    strata = build_strata(entries, PAGE)

    def status(a: int) -> int:
        return -2 if (a // PAGE) % 3 == 0 else (a // PAGE) % 2

    def query(addrs: object) -> list[int]:
        return [status(a) for a in addrs]  # type: ignore[attr-defined]

    class Drawn(QuerySampler):  # the compiled draws, the fake's statuses
        def __init__(self) -> None:
            super().__init__(query)
            self.fast = sampled_compiled.CompiledSampler(MovePages(pause_s=0), 1)

        def draw(self, stratum: object, n: int, rng: random.Random) -> list[int]:
            return list(self.fast.draw(stratum, n, rng))  # type: ignore[arg-type]

        def every_page(self, stratum: object) -> list[int]:
            return list(self.fast.every_page(stratum))  # type: ignore[arg-type]

    totals = {Kind.ANON: 40 << 20, Kind.SHMEM: 5 << 20}
    a = estimate_placement(strata, totals, query, rng=random.Random(7))
    b = estimate_placement(strata, totals, None, rng=random.Random(7), sampler=Drawn())
    assert a == b and a.samples > 0


_HEX = st.text("0123456789abcdefA", min_size=0, max_size=18)
_LINE = st.one_of(
    st.sampled_from(HOSTILE.split(b"\n")),
    st.builds(lambda a, b, perms, major, inode, path: (
        f"{a}-{b} {perms} 00000000 {major}:00 {inode}".encode() + path),
        _HEX, _HEX, st.text("rwxps-", min_size=3, max_size=5), _HEX,
        st.text("0123456789", min_size=0, max_size=22),
        st.binary(max_size=24) | st.sampled_from([b" /dev/shm/x", b" [stack]", b"  /x (deleted)",
                                                  b" /dev/hugepages/h", b" /anon_hugepage",
                                                  b" [vdso]", b"", b" "])),
    st.binary(max_size=60),
)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=25), st.integers(1, 5))
def test_any_maps_text_gives_the_reference_frame(lines: list[bytes], pieces: int) -> None:
    text = b"\n".join(lines)
    got, ref = _fast(text, pieces), _pure(text, pieces)
    assert got == ref
    assert list(got.strata) == list(ref.strata)


# ---- path classification in C (no Python call per distinct path) ----

#: Raw path columns as maps prints them, hostile ones first: a newline is escaped by the
#: kernel as \012 (a backslash is not escaped), an unlinked file ends in " (deleted)" (and
#: a file may be named so), memfds, SysV segments, /dev/zero, named anonymous memory.
HOSTILE_PATHS = (
    b"", b" ", b"   ", b"/usr/lib/x.so", b"/memfd:x", b"/memfd:x (deleted)",
    b"/memfd:a\\012[vdso] (deleted)", b"/memfd:\\012", b"/memfd: (deleted) (deleted)",
    b"/memfd:numa-bench-59999 (deleted)", b"/dev/zero", b"/dev/zero (deleted)",
    b"/dev/zero\\012x", b"/dev/\\012zero", b"/dev/zer", b"/dev/", b"/dev", b"/dev/sda",
    b"/dev/dri/card0 (deleted)", b"/dev/shm/a b\\012c", b"/dev/shm", b"/run/shm/x",
    b"/SYSV00000000 (deleted)", b"/SYSV", b"/SYS", b"/sysv0", b"/i915", b"/i915x",
    b"[anon:x]", b"[anon:\\012]", b"[anon_shmem:x]", b"[anon_shmem:", b"[anon_shmem",
    b"[heap]", b"[stack]", b"[vdso]", b"[vdso] (deleted)", b"[vdso] ", b"[vvar]",
    b"[vvar_vclock]", b"[vsyscall]", b"[uprobes]", b"[vdso]\\012", b"[", b" (deleted)",
    b"  (deleted)", b"x (deleted)", b"x (deleted)  ", b"x  (deleted)", b"(deleted)",
    b"/anon_hugepage", b"/anon_hugepage (deleted)", b"/anon_hugepage/x", b"/anon_hugepag",
    b"/dev/hugepages/seg", b"/dev/hugepages", b"/dev/hugepages/", b"/mnt/huge/x",
    b"/mnt/huge", b"\\012", b"\\01", b"\\0120", b"\\\\012", b"\\012\\012 (deleted)",
    b"/\xff\xfe not utf-8", b"/caf\xc3\xa9", b"\x00/dev/zero", b"/dev/zero\x00",
    b"\t/dev/zero", b"/x\r", b"/x\t (deleted)",
)
MOUNT_SETS = (("/dev/hugepages",), (), ("/mnt/huge/", "/dev/hugepages"), ("",), ("/",),
              ("[anon",), ("/dev/hugepages\n",))


@needs_compiled
def test_the_extensions_texts_are_the_references() -> None:
    fast = sampled_compiled._sampled_fast
    assert fast is not None
    assert tuple(p.encode() for p in numa_maps.SHMEM_PREFIXES) == fast.SHMEM_PREFIXES
    assert set(fast.PSEUDO_PATHS) == {p.encode() for p in pid_maps.PSEUDO_PATHS}
    assert len(fast.PSEUDO_PATHS) == len(pid_maps.PSEUDO_PATHS)
    assert pid_maps._DELETED.encode() == fast.DELETED
    assert fast.NEWLINE_ESCAPE == pid_maps.NEWLINE_ESCAPE
    assert pid_maps.HUGETLB_ANON_PATH.encode() == fast.HUGETLB_ANON_PATH
    assert pid_maps.ANON_SHMEM_PREFIX.encode() == fast.ANON_SHMEM_PREFIX


@needs_compiled
@pytest.mark.parametrize("mounts", MOUNT_SETS)
def test_c_classifies_hostile_paths_as_the_reference_does(mounts: tuple[str, ...]) -> None:
    fast = sampled_compiled._sampled_fast
    assert fast is not None
    prefixes = sampled_compiled.mount_prefixes(mounts)
    got = {raw: fast.path_kind(raw, prefixes) for raw in HOSTILE_PATHS}
    ref = {raw: sampled_compiled.path_kind(raw, mounts) for raw in HOSTILE_PATHS}
    assert got == ref
    # the cases the issue names, by kind (the reference could be wrong too)
    if mounts == MOUNTS:
        codes = {k: i for i, k in enumerate(sampled_compiled.KINDS)}
        assert got[b"/memfd:x (deleted)"] == codes[Kind.SHMEM]
        assert got[b"/dev/zero (deleted)"] == codes[Kind.SHMEM]
        assert got[b"/SYSV00000000 (deleted)"] == codes[Kind.SHMEM]
        assert got[b"[anon:x]"] == got[b""] == codes[Kind.ANON]
        assert got[b"/dev/hugepages/seg"] == codes[Kind.HUGETLB]
        assert got[b"/usr/lib/x.so"] == codes[Kind.FILE]
        assert got[b"[vdso]"] == got[b"/dev/sda"] == -1
        assert got[b"/dev/\\012zero"] == -1  # a newline after /dev/: no shmem prefix


_PATH_PIECE = st.sampled_from([b"/dev/", b"zero", b"/memfd:", b"/SYSV", b"[", b"]",
                               b"anon_shmem:", b"vdso", b" (deleted)", b" ", b"\\012",
                               b"\\", b"012", b"/dev/hugepages/", b"/anon_hugepage",
                               b"/i915", b"/dev/shm/", b"x", b"\xff"])


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(st.lists(_PATH_PIECE, max_size=6), st.sampled_from(MOUNT_SETS))
def test_c_classifies_composed_paths_as_the_reference_does(
        pieces: list[bytes], mounts: tuple[str, ...]) -> None:
    fast = sampled_compiled._sampled_fast
    assert fast is not None
    raw = b"".join(pieces)
    assert (fast.path_kind(raw, sampled_compiled.mount_prefixes(mounts))
            == sampled_compiled.path_kind(raw, mounts))


MEMFD_CHILD = textwrap.dedent("""
    import mmap, os
    names = ["plain", "nl\\nname", "x (deleted)", "[vdso]", "zero", "a\\\\012b", " sp "]
    keep, fds = [], []
    for i in range(300):
        fd = os.memfd_create(names[i % len(names)] + str(i))
        os.ftruncate(fd, 4096)
        keep.append(mmap.mmap(fd, 4096))
        fds.append(fd)
    for fd in fds[::2]:
        os.close(fd)
    z = os.open("/dev/zero", os.O_RDWR)
    keep.append(mmap.mmap(z, 1 << 20))
    print("ready", flush=True)
    os.read(0, 1)
""")


@needs_compiled
def test_a_real_process_of_many_hostile_memfd_names_gives_the_reference_frame() -> None:
    p = subprocess.Popen([sys.executable, "-c", MEMFD_CHILD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        text = b"".join(ProcFS(PROC).process(p.pid).maps())
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=30)
    assert text.count(b"/memfd:") >= 300 and b"\\012name" in text  # escaped by the kernel
    got = parse_maps_text((text,), PAGE, MOUNTS)
    ref = parse_maps_text((text,), PAGE, MOUNTS, compiled=False)
    assert got == ref
    assert got.strata[Kind.SHMEM].pages >= 300


def _maps_text(lines: int, path: bytes = b"") -> bytes:
    """Return a maps text of ``lines`` one-page mappings, each with ``path`` and its number."""
    return b"".join(b"%012x-%012x rw-s 00000000 00:01 %d %s%d\n"
                    % ((0x7F0000000000 + 2 * i * PAGE), (0x7F0000000000 + (2 * i + 1) * PAGE),
                       i, path, i) for i in range(lines))


def test_the_frame_cache_keeps_a_large_maps_text_within_its_bytes() -> None:
    # 30,000 memfd mappings: a text of over 1 MiB, parsed once while unchanged
    text = _maps_text(30_000, b"/memfd:numa-bench-")
    assert len(text) > 1 << 21
    cache = FrameCache()
    first = cache.frame(1, (text[:100_000], text[100_000:]), PAGE, MOUNTS)
    assert cache.frame(1, (text,), PAGE, MOUNTS) is first
    assert first.mappings == 30_000
    # what one pid keeps: the text and, for PROCMAP_QUERY, a record of 40 bytes a mapping
    one = len(text) + 30_000 * 40
    assert cache.kept_bytes == one
    # bounded: the kept bytes never exceed max_bytes; the oldest goes first
    small = FrameCache(max_bytes=one + 10)
    small.frame(1, (text,), PAGE, MOUNTS)
    two = small.frame(2, (text,), PAGE, MOUNTS)
    assert small.kept_bytes == one
    assert small.frame(2, (text,), PAGE, MOUNTS) is two
    small.frame(1, (text,), PAGE, MOUNTS)  # pid 2's goes to make room
    assert small.frame(2, (text,), PAGE, MOUNTS) is not two


@pytest.mark.parametrize("compiled", [True, False])
def test_the_parse_counts_against_the_deadline(compiled: bool) -> None:
    # a text of many pieces: the deadline is checked as it is parsed, and one that has
    # passed gives the parse up
    text = _maps_text(40_000, b"/memfd:n")
    ticks: list[int] = []

    def clock() -> float:
        ticks.append(1)
        return 0.0

    parse_maps_text((text,), PAGE, MOUNTS, compiled, Deadline(at=1.0, clock=clock))
    assert len(ticks) >= 4
    with pytest.raises(Expired):
        FrameCache().frame(1, (text,), PAGE, MOUNTS, compiled, Deadline(at=0.0))
