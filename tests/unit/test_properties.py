"""Property tests: parsers never raise on arbitrary bytes and count what they cannot read."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.cpulist import format_cpulist, parse_cpulist
from numa_exporter.parsers.node_meminfo import parse_node_meminfo
from numa_exporter.parsers.numa_maps import (
    COMPILED,
    NumaMapsError,
    _scan_batch,
    _scan_lines,
    _Totals,
    parse_numa_maps,
    parse_numa_maps_line,
)
from numa_exporter.parsers.pid_sched import parse_pid_sched
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.parsers.vmstat import parse_vmstat

TOKENS = st.sampled_from([
    b"7f00", b"default", b"bind:1", b"interleave:0-1", b"weighted", b"interleave:0",
    b"prefer", b"(many):0-1", b"N0=1", b"N1=2", b"kernelpagesize_kB=4", b"huge", b"heap",
    b"file=/x\\040y", b"anon=1", b"=", b":", b"N", b"-1", b"\xff", b"",
    # the edges of the bounds and of the policy grammar
    b"N1023=3", b"N1024=1", b"N00=1", b"N0=1099511627776", b"N0=1099511627777",
    b"N0=" + b"9" * 20, b"N0=" + b"9" * 21, b"kernelpagesize_kB=16777216",
    b"kernelpagesize_kB=16777217", b"kernelpagesize_kB=0", b"kernelpagesize_kB=2048",
    b"bind=", b"bind:", b"bind=static|balancing:0-1", b"interleave=relative:0,2-3",
    b"bind:1-0", b"bind:0-1024", b"bind:" + b"1" * 5000, b"file=/dev/shm/x", b"file=",
    b"(many)", b"interleave=static:0", b"dirty=02", b"Anon=1", b"stack", b"7F00",
    b"00000000000000001", b"\t", b"mapped=",
])
RANDOM_LINE = st.lists(TOKENS, max_size=10).map(lambda t: b" ".join(t) + b"\n")
GOOD_ADDRESS = st.sampled_from([b"7f00", b"55a921438000", b"0", b"ffffffffffffffff"])
BAD_ADDRESS = st.sampled_from([b"1ffffffffffffffff", b"7F00", b"-1", b"0x7f", b""])
ADDRESS = st.one_of(GOOD_ADDRESS, GOOD_ADDRESS, GOOD_ADDRESS, BAD_ADDRESS)
GOOD_POLICY = st.sampled_from([
    b"default", b"local", b"bind:1", b"bind:0-1", b"interleave:0,2-3", b"prefer:1",
    b"weighted interleave:0-1", b"weighted interleave=static:0-3", b"prefer (many):0-1",
    b"bind=static|balancing:0", b"prefer=relative:1", b"bind:1023", b"bind:0-1023",
    b"bind:01", b"interleave:" + b",".join(b"%d" % i for i in range(0, 40, 2)),
])
BAD_POLICY = st.sampled_from([
    b"bind:1024", b"bind:", b"bind=", b"bind=weird:1", b"bind:1-0", b"interleave:00000",
    b"weighted", b"prefer (many)x", b"sometimes", b"bind:" + b"1" * 5000, b"bind:0-",
    b"interleave:" + b",".join(b"%d" % i for i in range(0, 60, 2)),
])
POLICY = st.one_of(GOOD_POLICY, GOOD_POLICY, GOOD_POLICY, BAD_POLICY)
GOOD_FIELD = st.sampled_from([
    b"N0=1", b"N1=2", b"N0=0", b"N3=7", b"N1023=3", b"N00=1", b"N0099=1",
    b"N0=1099511627776", b"kernelpagesize_kB=4", b"kernelpagesize_kB=2048",
    b"kernelpagesize_kB=16777216", b"anon=2", b"dirty=2", b"mapped=5", b"mapmax=3",
    b"active=0", b"swapcache=1", b"writeback=1", b"future_field9=4", b"dirty=" + b"9" * 20,
    b"heap", b"stack", b"huge", b"file=/usr/lib/libc.so.6", b"file=/dev/shm/pool",
    b"file=/memfd:x\\040(deleted)", b"file=/SYSV00000000", b"file=/dev/zero", b"file=",
    b"file=/a\\075b", b"file=7", b"",
])
BAD_FIELD = st.sampled_from([
    b"N1024=1", b"N0=1099511627777", b"N0=" + b"9" * 20, b"N0=" + b"9" * 21, b"N99999=1",
    b"N=1", b"Nx=5", b"N1=abc", b"N0=", b"N0=\xc2\xb2", b"kernelpagesize_kB=16777217",
    b"kernelpagesize_kB=0", b"kernelpagesize_kB=" + b"9" * 25, b"Anon=1", b"dirty=", b"=3",
    b"bogus", b"dirty=" + b"9" * 21,
])
FIELD = st.one_of(GOOD_FIELD, GOOD_FIELD, GOOD_FIELD, GOOD_FIELD, BAD_FIELD)
NEAR_LINE = st.tuples(ADDRESS, POLICY, st.lists(FIELD, max_size=7)).map(
    lambda t: b" ".join((t[0], t[1], *t[2])) + b"\n")
GOOD_LINE = st.tuples(GOOD_ADDRESS, GOOD_POLICY, st.lists(GOOD_FIELD, max_size=5),
                      st.lists(FIELD, max_size=1)).map(
    lambda t: b" ".join((t[0], t[1], *t[2], *t[3], b"kernelpagesize_kB=4")) + b"\n")
LINE = st.one_of(RANDOM_LINE, NEAR_LINE, GOOD_LINE, GOOD_LINE)
SCANNERS = [False, True] if COMPILED else [False]
# Lines in the kernel's own field order (show_numa_map): what the batch path must take.
KERNEL_PAGES = st.tuples(
    st.lists(st.sampled_from([b" anon=2", b" dirty=2", b" mapped=5", b" mapmax=3",
                              b" active=0", b" swapcache=1", b" writeback=1",
                              b" future_field9=4", b" heap=1"]), max_size=4),
    st.lists(st.sampled_from([b" N0=1", b" N1=2", b" N3=7", b" N1023=3", b" N00=1",
                              b" N0099=1", b" N0=0", b" N1=999999999999"]),
             min_size=1, max_size=4),
    st.sampled_from([b" kernelpagesize_kB=4", b" kernelpagesize_kB=2048",
                     b" kernelpagesize_kB=16777216"]),
).map(lambda t: b"".join((*t[0], *t[1], t[2])))
KERNEL_LINE = st.tuples(
    GOOD_ADDRESS, GOOD_POLICY.filter(lambda p: len(p) < 64),  # the kernel's policy buffer
    st.sampled_from([b"", b" heap", b" stack", b" file=/usr/lib/libc.so.6", b" file=",
                     b" file=/dev/shm/pool", b" file=/memfd:x\\040(deleted)",
                     b" file=/a\\075b", b" file=/SYSV00000000"]),
    st.sampled_from([b"", b"", b" huge"]),
    st.one_of(st.just(b""), KERNEL_PAGES, KERNEL_PAGES),
).map(lambda t: t[0] + b" " + b"".join(t[1:]) + b"\n")


def _oracle(lines: list[bytes]) -> tuple[int, dict[tuple[int, object], int], list[int]]:
    """Return (mappings, bytes per (node, kind), error line numbers) line by line."""
    expect: dict[tuple[int, object], int] = {}
    ok = 0
    bad: list[int] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            m = parse_numa_maps_line(line)
        except NumaMapsError:
            bad.append(lineno)
            continue
        ok += 1
        for node, b in m.counted_bytes_by_node.items():
            expect[(node, m.kind)] = expect.get((node, m.kind), 0) + b
    return ok, expect, bad


def _chunks(text: bytes, cuts: list[int]) -> list[bytes]:
    """Return text cut at the given offsets (any place, also inside lines)."""
    points = sorted({min(c, len(text)) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(text)]:
        out.append(text[prev:p])
        prev = p
    return out


# what setup.py needs to build the compiled scanner: a C compiler and Python's headers
CAN_BUILD = bool(shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0])
                 and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists())


@pytest.mark.skipif(not CAN_BUILD, reason="no C compiler or Python headers here: only the "
                                          "pure-Python scanner can be installed")
def test_compiled_scanner_is_built_where_it_can_be() -> None:
    """Where the compiled scanner can be built, the install built it, so that both scanners
    are tested (tools/test.sh installs gcc and python3-dev)."""
    assert COMPILED


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=200), max_size=20), st.sampled_from(SCANNERS))
def test_numa_maps_never_raises_on_bytes(pieces: list[bytes], compiled: bool) -> None:
    r = parse_numa_maps(pieces, compiled=compiled)
    non_blank = sum(1 for line in b"".join(pieces).split(b"\n") if line.strip())
    assert r.mappings + r.error_count == non_blank
    assert all(b >= 0 for b in r.bytes.values())


@pytest.mark.skipif(not COMPILED, reason="the compiled scanner is not built")
@settings(max_examples=300)
@given(st.lists(st.binary(max_size=120), max_size=20))
def test_scanners_agree_on_bytes(pieces: list[bytes]) -> None:
    """The compiled and the pure-Python scanners give the same totals and errors."""
    assert parse_numa_maps(pieces, compiled=True) == parse_numa_maps(pieces, compiled=False)


@settings(max_examples=300)
@given(st.lists(LINE, max_size=20), st.sampled_from(SCANNERS))
def test_numa_maps_near_valid_lines(lines: list[bytes], compiled: bool) -> None:
    r = parse_numa_maps(lines, compiled=compiled)
    assert r.mappings + r.error_count == sum(1 for line in lines if line.strip())
    assert sum(r.policy_bytes.values()) == sum(r.bytes.values())
    assert sum(r.policy_nodes.values()) == sum(r.bytes.values())


@given(st.binary(max_size=2000))
def test_small_parsers_never_raise(data: bytes) -> None:
    parse_vmstat(data)
    parse_node_meminfo(data)
    parse_pid_status(data)
    parse_pid_stat(data)
    parse_pid_sched(data)
    parse_cpulist(data)


@given(st.frozensets(st.integers(min_value=0, max_value=300), max_size=40))
def test_cpulist_round_trip(ids: frozenset[int]) -> None:
    assert parse_cpulist(format_cpulist(set(ids))) == ids


@settings(max_examples=1000)
@given(st.lists(LINE, max_size=15), st.lists(st.integers(0, 2000), max_size=6),
       st.sampled_from(SCANNERS))
def test_fast_totals_agree_with_line_parser(lines: list[bytes], cuts: list[int],
                                            compiled: bool) -> None:
    """The streamed totals equal the sum of the reference parser's results, however cut."""
    ok, expect, bad = _oracle(lines)
    r = parse_numa_maps(_chunks(b"".join(lines), cuts), compiled=compiled)
    assert r.mappings == ok
    assert r.error_count == len(bad)
    assert [e.lineno for e in r.errors] == bad[:5]
    assert {k: v for k, v in r.bytes.items() if v} == {k: v for k, v in expect.items() if v}


def _batch_and_lines(text: bytes) -> tuple[int | None, _Totals, int, _Totals]:
    batch, exact = _Totals(), _Totals()
    got = _scan_batch(batch, text, 0, len(text))
    return got, batch, _scan_lines(exact, text, 0), exact


@settings(max_examples=500)
@given(st.lists(KERNEL_LINE, min_size=1, max_size=15), st.integers(1, 4))
def test_batch_path_takes_kernel_lines_with_the_reference_totals(lines: list[bytes],
                                                                 repeat: int) -> None:
    """Lines as the kernel prints them (some repeated): the batch path takes them and its
    totals are those of the line-by-line path, which the reference parser decides."""
    text = b"".join(lines * repeat)
    got, batch, n, exact = _batch_and_lines(text)
    assert exact.n_err == 0
    assert got == n == len(lines) * repeat
    assert batch.result() == exact.result()


@settings(max_examples=500)
@given(st.lists(st.one_of(KERNEL_LINE, KERNEL_LINE, LINE), max_size=15))
def test_batch_path_is_the_line_path_where_it_takes_a_batch(lines: list[bytes]) -> None:
    """Whatever the batch path takes, it totals as the line-by-line path does; it takes
    nothing with a malformed line (those go line by line, to be counted)."""
    text = b"".join(lines)
    got, batch, n, exact = _batch_and_lines(text)
    if got is not None:
        assert exact.n_err == 0
        assert got == n
        assert batch.result() == exact.result()
    else:
        assert batch.result() == _Totals().result()
