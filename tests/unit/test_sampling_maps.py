"""maps parser: the kernel's line format, hostile paths, kinds and what is sampled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from numa_exporter.model.sampling import build_strata, sampleable
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_maps import (
    MAX_ENTRIES,
    MapsEntry,
    mapping_kind,
    parse_maps_line,
    parse_pid_maps,
)

PAD = " " * 26


def line(path: str = "", perms: str = "rw-p", start: int = 0x7F0000000000,
         size: int = 0x200000, dev: str = "00:00", inode: int = 0) -> bytes:
    text = f"{start:x}-{start + size:x} {perms} 00000000 {dev} {inode}"
    return (text + (PAD + path if path else " ") + "\n").encode("utf-8", "surrogateescape")


def test_anonymous_mapping_has_no_path() -> None:
    e = parse_maps_line(b"7f2c1a000000-7f2c2a000000 rw-p 00000000 00:00 0 \n")
    assert e == MapsEntry(0x7F2C1A000000, 0x7F2C2A000000, "rw-p", 0, 0, 0, 0, None, False)
    assert e.size == 256 << 20
    assert mapping_kind(e) is Kind.ANON


def test_file_mapping_fields() -> None:
    e = parse_maps_line(b"7f2c2a1f2000-7f2c2a214000 r-xp 00028000 fd:01 1315373"
                        b"                    /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert e is not None
    assert (e.offset, e.dev_major, e.dev_minor, e.inode) == (0x28000, 0xFD, 1, 1315373)
    assert e.path == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert mapping_kind(e) is Kind.FILE
    assert not e.shared


def test_deleted_suffix_and_spaces_in_names() -> None:
    e = parse_maps_line(line("/dev/zero (deleted)", perms="rw-s"))
    assert e is not None and e.path == "/dev/zero" and e.deleted and e.shared
    assert mapping_kind(e) is Kind.SHMEM
    e = parse_maps_line(line("/tmp/my file (deleted) (deleted)"))
    assert e is not None and e.path == "/tmp/my file (deleted)" and e.deleted
    e = parse_maps_line(line("/tmp/a\\012b"))  # the kernel escapes only newlines
    assert e is not None and e.path == "/tmp/a\nb"
    e = parse_maps_line(line("/tmp/x\\040y"))  # not an escape in maps: kept as printed
    assert e is not None and e.path == "/tmp/x\\040y"


def test_kinds_match_numa_maps_classification() -> None:
    def kind(path: str, perms: str = "rw-p") -> Kind:
        e = parse_maps_line(line(path, perms=perms))
        assert e is not None, path
        return mapping_kind(e, ("/dev/hugepages", "/mnt/huge"))

    assert kind("[heap]") is Kind.ANON
    assert kind("[stack]") is Kind.ANON
    assert kind("[anon:arena]") is Kind.ANON
    assert kind("[anon_shmem:pool]", "rw-s") is Kind.SHMEM
    assert kind("/dev/shm/pool", "rw-s") is Kind.SHMEM
    assert kind("/memfd:weights (deleted)", "rw-s") is Kind.SHMEM
    assert kind("/SYSV00000000 (deleted)", "rw-s") is Kind.SHMEM
    assert kind("/anon_hugepage (deleted)") is Kind.HUGETLB
    assert kind("/dev/hugepages/kv", "rw-s") is Kind.HUGETLB
    assert kind("/mnt/huge/pool", "rw-s") is Kind.HUGETLB
    assert kind("/mnt/hugepool") is Kind.FILE  # a prefix of a mount is not under it
    assert kind("/usr/lib/libfoo.so") is Kind.FILE


def test_what_is_sampled() -> None:
    def ok(path: str, perms: str = "rw-p") -> bool:
        e = parse_maps_line(line(path, perms=perms))
        assert e is not None
        return sampleable(e)

    assert ok("") and ok("[heap]") and ok("/usr/lib/x.so") and ok("/dev/shm/x")
    assert ok("/dev/hugepages/x") and ok("/dev/zero (deleted)", "rw-s")
    assert not ok("", "---p")  # PROT_NONE reservation or guard
    assert not ok("[vvar]", "r--p") and not ok("[vdso]", "r-xp")
    assert not ok("[vsyscall]", "--xp")
    assert not ok("/dev/nvidia0", "rw-s")  # device memory: virtual size only


def test_malformed_lines_are_counted_not_raised() -> None:
    bad = [
        b"",
        b"garbage\n",
        b"7f00-7e00 rw-p 00000000 00:00 0\n",  # end before start
        b"7f00-7f00 rw-p 00000000 00:00 0\n",  # empty
        b"7f00-8000 rwzp 00000000 00:00 0\n",
        b"7f00-8000 rw-p 00000000 00:00 -1\n",
        b"1" * 17 + b"-" + b"2" * 17 + b" rw-p 00000000 00:00 0\n",
        b"\xff\xfe-\x00 rw-p\n",
    ]
    good = line("/usr/lib/x.so")
    res = parse_pid_maps([good, *bad, good])
    assert len(res.entries) == 2
    assert res.error_count == len(bad) - 1  # the empty line is skipped, not an error
    assert len(res.errors) <= 5 and res.errors[0].lineno == 3


def test_entries_are_bounded() -> None:
    lines = (line(start=0x10000 + i * 0x1000, size=0x1000) for i in range(MAX_ENTRIES + 10))
    res = parse_pid_maps(lines)
    assert len(res.entries) == MAX_ENTRIES and res.truncated and res.error_count == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    res = parse_pid_maps(data.split(b"\n"))
    for e in res.entries:
        assert e.end > e.start
        mapping_kind(e)
        sampleable(e)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60))
def test_any_path_round_trips(name: bytes) -> None:
    """Whatever bytes a process names a file with come back (newlines via \\012)."""
    path = b"/" + name.strip(b" ")
    assume(b"\\012" not in path)  # a literal backslash-012 reads as a newline, as printed
    printed = path.replace(b"\n", b"\\012")
    e = parse_maps_line(line(printed.decode("utf-8", "surrogateescape")))
    assert e is not None
    want = path.decode("utf-8", "surrogateescape").rstrip(" ")
    if want.endswith(" (deleted)"):
        assert e.deleted and e.path == want[: -len(" (deleted)")]
    else:
        assert e.path == want


def test_own_maps_parse_cleanly() -> None:
    """This process's real maps: no errors, and its heap or anonymous memory is there."""
    text = Path(f"/proc/{os.getpid()}/maps").read_bytes()
    res = parse_pid_maps(text.splitlines(keepends=True))
    assert res.error_count == 0 and len(res.entries) == text.count(b"\n")
    kinds = {mapping_kind(e) for e in res.entries}
    assert Kind.ANON in kinds and Kind.FILE in kinds
    strata = build_strata(res.entries, os.sysconf("SC_PAGE_SIZE"))
    assert strata[Kind.FILE].pages > 0


def test_a_maps_text_is_parsed_once_while_it_does_not_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from numa_exporter.readers.sampled import frames as sp

    calls: list[int] = []
    real = sp.parse_pid_maps

    def counting(lines):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(lines)

    monkeypatch.setattr(sp, "parse_pid_maps", counting)
    text = (b"7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n"
            b"7f0040000000-7f0040001000 ---p 00000000 00:00 0 \n")
    cache = sp.FrameCache(max_text=1 << 10)  # the cache, on the pure-Python parse
    a = cache.frame(7, [text[:30], text[30:]], 4096, (), compiled=False)
    b = cache.frame(7, [text], 4096, (), compiled=False)
    assert b is a and len(calls) == 1
    assert (a.largest_mapping, a.mappings) == (1 << 30, 2)
    grown = text.replace(b"7f0040000000 rw-p", b"7f0080000000 rw-p")
    c = cache.frame(7, [grown], 4096, (), compiled=False)  # the text changed: parsed again
    assert len(calls) == 2 and c.largest_mapping == 2 << 30
    # above max_text: parsed, streamed, not kept
    cache.frame(7, [grown * 20], 4096, (), compiled=False)
    cache.frame(7, [grown * 20], 4096, (), compiled=False)
    assert len(calls) == 4
