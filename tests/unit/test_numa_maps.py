"""numa_maps parser: every line format the kernel writes, and malformed input."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from numa_exporter.parsers.numa_maps import (
    COMPILED,
    Kind,
    NumaMaps,
    NumaMapsError,
    _scan_batch,
    _scan_lines,
    _Totals,
    parse_numa_maps,
    parse_numa_maps_line,
)

MiB = 1 << 20


def test_bound_anonymous_line() -> None:
    m = parse_numa_maps_line(
        b"7fc6258f4000 bind:1 anon=65538 dirty=65538 active=0 N1=65538 kernelpagesize_kB=4\n"
    )
    assert m.address == 0x7FC6258F4000
    assert (m.policy.name, m.policy.nodes) == ("bind", frozenset({1}))
    assert m.kind is Kind.ANON
    assert m.bytes_by_node == {1: 65538 * 4096}
    assert dict(m.counters) == {"anon": 65538, "dirty": 65538, "active": 0}


def test_hugetlb_counts_huge_pages() -> None:
    m = parse_numa_maps_line(
        rb"7f4a06200000 bind:1 file=/anon_hugepage\040(deleted) huge anon=32 dirty=32 N1=32"
        rb" kernelpagesize_kB=2048"
    )
    assert m.kind is Kind.HUGETLB
    assert m.path == "/anon_hugepage (deleted)"
    assert m.bytes_by_node == {1: 64 * MiB}


def test_gigantic_pages() -> None:
    m = parse_numa_maps_line(b"7f0000000000 default file=/mnt/huge/x huge N0=2 "
                             b"kernelpagesize_kB=1048576")
    assert m.bytes_by_node == {0: 2 << 30}


@pytest.mark.parametrize(
    ("policy", "name", "flags", "nodes"),
    [
        ("default", "default", set(), set()),
        ("local", "local", set(), set()),
        ("prefer:1", "prefer", set(), {1}),
        ("bind:0-1", "bind", set(), {0, 1}),
        ("interleave:0,2-3", "interleave", set(), {0, 2, 3}),
        ("weighted interleave:0-1", "weighted_interleave", set(), {0, 1}),
        ("prefer (many):0-1", "prefer_many", set(), {0, 1}),
        ("bind=static:1", "bind", {"static"}, {1}),
        ("prefer=relative:1", "prefer", {"relative"}, {1}),
        ("bind=balancing:0", "bind", {"balancing"}, {0}),
        ("bind=static|balancing:0", "bind", {"static", "balancing"}, {0}),
        ("weighted interleave=static:0-3", "weighted_interleave", {"static"}, {0, 1, 2, 3}),
    ],
)
def test_policies(policy: str, name: str, flags: set[str], nodes: set[int]) -> None:
    m = parse_numa_maps_line(f"7f00 {policy} anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=4"
                             .encode())
    assert m.policy.name == name
    assert m.policy.flags == flags
    assert m.policy.nodes == nodes
    assert sum(m.bytes_by_node.values()) == 8192


@pytest.mark.parametrize(
    ("path_field", "kind", "path"),
    [
        (rb"file=/opt/my\040dir/lib.so", Kind.FILE, "/opt/my dir/lib.so"),
        (rb"file=/a\075b\134c", Kind.FILE, "/a=b\\c"),
        (b"file=/dev/shm/pool", Kind.SHMEM, "/dev/shm/pool"),
        (rb"file=/SYSV00000000\040(deleted)", Kind.SHMEM, "/SYSV00000000 (deleted)"),
        (rb"file=/memfd:kvpool\040(deleted)", Kind.SHMEM, "/memfd:kvpool (deleted)"),
        (rb"file=/dev/zero\040(deleted)", Kind.SHMEM, "/dev/zero (deleted)"),
        (b"heap", Kind.ANON, None),
        (b"stack", Kind.ANON, None),
    ],
)
def test_kinds_and_paths(path_field: bytes, kind: Kind, path: str | None) -> None:
    m = parse_numa_maps_line(b"55a9 default " + path_field + b" mapped=3 N0=3 kernelpagesize_kB=4")
    assert m.kind is kind
    assert m.path == path


def test_untouched_mapping_has_no_pages() -> None:
    m = parse_numa_maps_line(b"7fff2f9a4000 bind:1")
    assert m.bytes_by_node == {}
    assert m.page_size == 0


def test_every_counter_is_kept() -> None:
    m = parse_numa_maps_line(
        b"1000 default file=/x anon=1 dirty=1 mapped=5 mapmax=3 swapcache=1 active=2 "
        b"writeback=1 N0=5 kernelpagesize_kB=4"
    )
    assert dict(m.counters) == {"anon": 1, "dirty": 1, "mapped": 5, "mapmax": 3,
                                "swapcache": 1, "active": 2, "writeback": 1}


@pytest.mark.parametrize(
    "line",
    [
        b"zzzz default N0=1 kernelpagesize_kB=4",
        b"1000 default N1=abc kernelpagesize_kB=4",
        b"1000 default Nx=5 kernelpagesize_kB=4",
        b"1000 default N0=5",
        b"1000 default N0=5 kernelpagesize_kB=0",
        b"1000 sometimes N0=5 kernelpagesize_kB=4",
        b"1000 bind=weird:1 N0=5 kernelpagesize_kB=4",
        b"1000 bind:1-0 N0=5 kernelpagesize_kB=4",
        b"1000",
        b"1000 default N0=" + b"9" * 5000 + b" kernelpagesize_kB=4",
        b"1000 default N99999999=1 kernelpagesize_kB=4",
        "1000 default N0=\u00b2 kernelpagesize_kB=4".encode(),
    ],
)
def test_malformed_lines_raise_parse_error(line: bytes) -> None:
    with pytest.raises(NumaMapsError):
        parse_numa_maps_line(line)


def test_file_totals_count_errors_and_keep_going() -> None:
    text = [
        b"55a921438000 bind:1 heap anon=3 dirty=3 active=0 N1=3 kernelpagesize_kB=4\n",
        b"garbage here\n",
        b"7fc635ac6000 bind:1 file=/usr/lib/libc.so.6 mapped=37 mapmax=4 N0=37 "
        b"kernelpagesize_kB=4\n",
        b"\n",
        b"7f4a06200000 bind:1 file=/anon_hugepage\\040(deleted) huge anon=32 dirty=32 N1=32 "
        b"kernelpagesize_kB=2048\n",
        b"1000 default N0=abc kernelpagesize_kB=4\n",
    ]
    r = parse_numa_maps(text)
    assert r.error_count == 2
    assert [e.lineno for e in r.errors] == [2, 6]
    assert r.mappings == 3
    assert r.bytes == {(1, Kind.ANON): 3 * 4096, (0, Kind.FILE): 37 * 4096,
                       (1, Kind.HUGETLB): 32 * 2 * MiB}
    assert r.node_bytes() == {0: 37 * 4096, 1: 3 * 4096 + 64 * MiB}
    assert r.policy_bytes == {"bind": 3 * 4096 + 37 * 4096 + 64 * MiB}


SCANNERS = [pytest.param(False, id="python"),
            pytest.param(True, id="compiled",
                         marks=pytest.mark.skipif(not COMPILED, reason="not built"))]
GOOD = b"7f00 default anon=1 N0=1 kernelpagesize_kB=4\n"


@pytest.mark.parametrize("compiled", SCANNERS)
@pytest.mark.parametrize(
    "line",
    [
        b"1000 bind:" + b"1" * 5000 + b" N0=1 kernelpagesize_kB=4\n",  # int() digit limit
        b"1000 bind:" + b"1-" + b"9" * 5000 + b" N0=1 kernelpagesize_kB=4\n",
        b"1000 default N0=" + b"9" * 20 + b" kernelpagesize_kB=4\n",
        b"1000 default N0=1099511627777 kernelpagesize_kB=4\n",  # 2**40 + 1 pages
        b"1000 default N1024=1 kernelpagesize_kB=4\n",  # MAX_NUMNODES is 1024
        b"1000 bind:1024 N0=1 kernelpagesize_kB=4\n",
        b"1000 default N0=1 kernelpagesize_kB=16777217\n",  # above 16 GiB pages
        b"1000 default N0=1 kernelpagesize_kB=" + b"9" * 5000 + b"\n",
        b"1000 default " + b"N0=1 " * 300_000 + b"kernelpagesize_kB=4\n",  # over MAX_LINE
    ],
)
def test_out_of_range_values_are_line_errors(line: bytes, compiled: bool) -> None:
    r = parse_numa_maps([GOOD, line, GOOD], compiled=compiled)
    assert (r.mappings, r.error_count) == (2, 1)
    assert [e.lineno for e in r.errors] == [2]
    assert r.bytes == {(0, Kind.ANON): 2 * 4096}


@pytest.mark.parametrize("compiled", SCANNERS)
def test_largest_values_in_range_are_kept(compiled: bool) -> None:
    line = b"1000 bind:1023 anon=1 N1023=1099511627776 kernelpagesize_kB=16777216\n"
    r = parse_numa_maps([line], compiled=compiled)
    assert r.error_count == 0
    assert r.bytes == {(1023, Kind.ANON): (1 << 40) * (16 << 30)}
    assert r.policy_nodes == {("bind", frozenset({1023})): (1 << 40) * (16 << 30)}


def test_reference_parser_rejects_what_the_kernel_never_prints() -> None:
    for line in [b"7F00 default", b"0x7f default", b"-1 default", b"7f00 bind=",
                 b"7f00 bind:", b"7f00 bind=static|:1", b"1ffffffffffffffff default"]:
        with pytest.raises(NumaMapsError):
            parse_numa_maps_line(line)


@pytest.mark.parametrize("compiled", SCANNERS)
def test_chunks_may_cut_lines_anywhere(compiled: bool) -> None:
    text = (b"55a9 bind:1 heap anon=3 dirty=3 N1=3 kernelpagesize_kB=4\n"
            b"junk\n"
            b"7fc6 weighted interleave:0-1 file=/dev/shm/kv mapped=8 N0=4 N1=4 "
            b"kernelpagesize_kB=4\n"
            b"7f4a bind:1 file=/anon_hugepage\\040(deleted) huge N1=32 kernelpagesize_kB=2048")
    whole = parse_numa_maps([text], compiled=compiled)
    assert whole.mappings == 3 and [e.lineno for e in whole.errors] == [2]
    assert whole.bytes == {(1, Kind.ANON): 3 * 4096, (0, Kind.SHMEM): 4 * 4096,
                           (1, Kind.SHMEM): 4 * 4096, (1, Kind.HUGETLB): 64 * MiB}
    assert whole.policy_bytes == {"bind": 3 * 4096 + 64 * MiB,
                                  "weighted_interleave": 8 * 4096}
    for size in (1, 7, 64):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        assert parse_numa_maps(pieces, compiled=compiled) == whole


@pytest.mark.parametrize("compiled", SCANNERS)
def test_many_alike_lines_and_many_policies(compiled: bool) -> None:
    lines = [b"%x default anon=2 dirty=2 N0=2 kernelpagesize_kB=4\n" % (i << 12)
             for i in range(50_000)]
    lines += [b"%x bind:%d anon=1 N%d=1 kernelpagesize_kB=4\n" % (i << 12, i % 200, i % 200)
              for i in range(1000)]
    r = parse_numa_maps(lines, compiled=compiled)
    assert r.mappings == 51_000 and r.error_count == 0
    assert r.bytes[(0, Kind.ANON)] == 100_000 * 4096 + 5 * 4096
    assert r.policy_bytes == {"default": 100_000 * 4096, "bind": 1000 * 4096}
    assert len(r.policy_nodes) == 201
    assert r.policy_nodes[("bind", frozenset({7}))] == 5 * 4096


def test_consumes_the_chunks_lazily() -> None:
    """A caller can abandon a read part way: nothing is pulled ahead of the parse."""
    pulled = 0

    def chunks() -> Iterator[bytes]:
        nonlocal pulled
        for _ in range(100):
            pulled += 1
            yield GOOD * 10
        raise TimeoutError("deadline")

    with pytest.raises(TimeoutError):
        parse_numa_maps(chunks())
    assert pulled == 100
    limited = parse_numa_maps(itertools.islice(chunks(), 3))
    assert limited.mappings == 30


@pytest.mark.parametrize("compiled", SCANNERS)
def test_line_longer_than_the_limit_arriving_in_pieces(compiled: bool) -> None:
    """A line that never ends within MAX_LINE is one error; reading goes on after it."""
    pieces = [GOOD, b"7f00 default", *[b" anon=1" * 10_000] * 20, b" N0=1\n", GOOD, GOOD]
    r = parse_numa_maps(pieces, compiled=compiled)
    assert (r.mappings, r.error_count) == (3, 1)
    assert [(e.lineno, e.reason) for e in r.errors] == [(2, "line too long")]


@pytest.mark.parametrize("compiled", [False, *([True] if COMPILED else [])])
def test_bind_pages_off_their_policy_nodes(compiled: bool) -> None:
    # after `migratepages PID 1 0` on a --membind=1 process: bind:1 pages on node 0
    text = (b"7f0000000000 bind:1 anon=10 dirty=10 N0=8 N1=2 kernelpagesize_kB=4\n"
            b"7f0000100000 bind:0-1 anon=4 dirty=4 N0=4 kernelpagesize_kB=4\n"
            b"7f0000200000 prefer:1 anon=3 dirty=3 N0=3 kernelpagesize_kB=4\n"
            b"7f0000300000 default anon=5 dirty=5 N0=5 kernelpagesize_kB=4\n")
    m = parse_numa_maps([text], compiled=compiled)
    assert m.off_policy_bytes == 8 * 4096  # preferred and default pages may sit anywhere


# --- the pure-Python scanner's batch path ---------------------------------------------------
# Kernel-shaped text goes through _scan_batch (regular expressions, a batch at a time); a batch
# with any other line goes line by line through _scan_lines. These tests hold the first to the
# second and check that it is really taken for what the kernel prints (it is what makes the
# pure-Python scanner fast; a batch path that declined everything would still be correct).

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL_NUMA_MAPS = sorted(p for d in ("realkernel", "source/real-kernel-2node")
                        for p in (FIXTURES / d).glob("**/numa_maps"))


def _both_paths(text: bytes) -> tuple[int | None, NumaMaps, int, NumaMaps]:
    """Return (lines, totals) of the batch path (None: declined) and of the line path."""
    batch, exact = _Totals(), _Totals()
    got = _scan_batch(batch, text, 0, len(text))
    n = _scan_lines(exact, text, 0)
    return got, batch.result(), n, exact.result()


def test_real_captures_exist() -> None:
    assert len(REAL_NUMA_MAPS) >= 10


@pytest.mark.parametrize("path", REAL_NUMA_MAPS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_batch_path_takes_numa_maps_captured_from_real_kernels(path: Path) -> None:
    text = path.read_bytes()
    got, batch, n, exact = _both_paths(text)
    assert exact.error_count == 0 and exact.mappings > 0
    assert got == n
    assert batch == exact


def test_batch_path_takes_every_shape_the_kernel_prints() -> None:
    text = (
        b"00400000 default file=/usr/bin/python3.11 mapped=2 N0=2 kernelpagesize_kB=4\n"
        b"55a921438000 default heap anon=9 dirty=9 N0=5 N1=4 kernelpagesize_kB=4\n"
        b"7ffd1000 default stack anon=3 dirty=3 active=1 N1=3 kernelpagesize_kB=4\n"
        b"7f00 weighted interleave:0-1 file=/dev/shm/kv mapped=8 mapmax=3 N0=4 N1=4 "
        b"kernelpagesize_kB=4\n"
        b"7f01 prefer (many)=static:0-1 anon=2 dirty=2 N0=2 kernelpagesize_kB=4\n"
        b"7f02 bind=static|balancing:1 file=/anon_hugepage\\040(deleted) huge anon=32 "
        b"dirty=32 N1=32 kernelpagesize_kB=2048\n"
        b"7f03 interleave:0,2-3 file=/memfd:pool\\040(deleted)\n"
        b"7f04 prefer:1 anon=1 dirty=1 swapcache=1 writeback=1 N1023=1 kernelpagesize_kB=4\n"
        b"7f05 local\n"
        b"7f06 default file=/lib/libc.so.6 huge N0=1 kernelpagesize_kB=1048576"
    )
    got, batch, n, exact = _both_paths(text)
    assert (got, n, exact.error_count) == (10, 10, 0)
    assert batch == exact
    assert batch.bytes == {
        (0, Kind.FILE): 2 * 4096, (0, Kind.ANON): (5 + 2) * 4096,
        (1, Kind.ANON): (4 + 3) * 4096, (0, Kind.SHMEM): 4 * 4096, (1, Kind.SHMEM): 4 * 4096,
        (1, Kind.HUGETLB): 32 * 2 * MiB, (1023, Kind.ANON): 4096,
        (0, Kind.HUGETLB): 1024 * MiB}


def test_batch_path_counts_repeated_lines() -> None:
    lines = [b"%x default anon=2 dirty=2 N0=2 kernelpagesize_kB=4\n" % (i << 12)
             for i in range(3000)]
    lines += [b"%x bind:1 anon=%d N1=%d kernelpagesize_kB=4\n" % (i << 12, i % 7, i % 7)
              for i in range(700)]
    text = b"".join(lines)
    got, batch, n, exact = _both_paths(text)
    assert got == n == 3700
    assert batch == exact
    assert batch.bytes == {(0, Kind.ANON): 6000 * 4096, (1, Kind.ANON): 100 * 21 * 4096}


@pytest.mark.parametrize("bad", [
    b"\n",  # a blank line
    b"7F00 default anon=1 N0=1 kernelpagesize_kB=4\n",  # upper-case address
    b"7f00 default anon=1 N0=1 kernelpagesize_kB=4 \n",  # a trailing space
    b"7f00 sometimes anon=1 N0=1 kernelpagesize_kB=4\n",  # unknown policy
    b"7f00 default anon=1 N0=1 kernelpagesize_kB=0\n",
    b"7f00 default anon=1 N0=1 kernelpagesize_kB=16777217\n",
    b"7f00 default anon=1 N1024=1 kernelpagesize_kB=4\n",
    b"7f00 default anon=1 N0=1099511627776 kernelpagesize_kB=4\n",  # 13 digits
    b"7f00 default anon=1 N0=1\n",  # pages without a page size
    b"7f00 default kernelpagesize_kB=4 N0=1\n",  # not in the kernel's order
    b"7f00 weighted interleavex:0 N0=1 kernelpagesize_kB=4\n",
])
def test_batch_path_declines_a_batch_with_any_other_line(bad: bytes) -> None:
    """Such a batch goes line by line, where the reference grammar decides each line."""
    text = GOOD * 3 + bad + GOOD
    got, _, n, exact = _both_paths(text)
    assert got is None
    assert n == 5
    whole = parse_numa_maps([text], compiled=False)
    assert whole == exact
    assert whole.mappings + whole.error_count == 4 + bool(bad.strip())


@pytest.mark.parametrize("line", [
    b"7f00 default anon=1 file=7 N0=1 kernelpagesize_kB=4\n",  # a path, not a counter
    b"7f00 default heap=1 N0=1 kernelpagesize_kB=4\n",  # a counter, not the heap flag
    b"7f00 default huge=1 N0=1 kernelpagesize_kB=4\n",  # a counter, not the huge flag
    b"7f00 default file=/x huge=1 N0=1 kernelpagesize_kB=4\n",
    b"7f00 prefer (many) N0=1 kernelpagesize_kB=4\n",
    b"7f00 prefer (many)x N0=1 kernelpagesize_kB=4\n",
    b"7f00 weighted interleave=5 N0=1 kernelpagesize_kB=4\n",
])
def test_batch_path_reads_lookalike_tokens_as_the_reference_does(line: bytes) -> None:
    got, batch, _, exact = _both_paths(GOOD + line)
    assert got is None or batch == exact
    assert parse_numa_maps([GOOD + line], compiled=False) == exact
    ref = None
    try:
        ref = parse_numa_maps_line(line)
    except NumaMapsError:
        assert exact.error_count == 1
    if ref is not None:
        good = 4096 if ref.kind == Kind.ANON else 0
        assert exact.bytes.get((0, ref.kind), 0) == good + ref.counted_bytes_by_node.get(0, 0)


# Debian 7.3.4, membind_remote: the process's memory is bound to node 1; the vDSO data page
# that 7.x maps into every process ([vvar]) sits on node 0, where the kernel allocated it
VDSO_DATA_LINE = b"7f80453ad000 bind:1 mapped=1 mapmax=2 active=0 N0=1 kernelpagesize_kB=4"
CAPTURE_73 = FIXTURES / "realkernel-7.3" / "membind_remote"


@pytest.mark.parametrize("compiled", SCANNERS)
def test_vdso_data_page_of_7x_is_not_the_process_memory(compiled: bool) -> None:
    """A line with no file=, heap, stack or huge and no anon= holds no page of the process's
    own (7.x's [vvar] data page, shared by every process, mapmax=<processes>): both scanners
    leave it out, so a process bound to node 1 shows nothing on node 0; the capture's other
    bytes are all counted (node 1's total is the harness's sum of the kernel's numa_maps)."""
    text = (CAPTURE_73 / "proc" / "135" / "numa_maps").read_bytes()
    assert VDSO_DATA_LINE in text.splitlines()
    expected = json.loads((CAPTURE_73 / "expected.json").read_text())["node_bytes"]["135"]
    assert expected == {"0": 4096, "1": 135946240}  # what the kernel's lines add up to
    r = parse_numa_maps([text], compiled=compiled)
    assert (r.error_count, r.mappings) == (0, len(text.splitlines()))
    assert r.node_bytes() == {1: 135946240}
    assert r.off_policy_bytes == 0
    got, batch, n, exact = _both_paths(text)
    assert got == n and batch == exact == r


@pytest.mark.parametrize("compiled", SCANNERS)
@pytest.mark.parametrize(("line", "counted"), [
    (VDSO_DATA_LINE, {}),
    (b"7f01 default mapped=2 mapmax=9 N0=1 N1=1 kernelpagesize_kB=4", {}),
    (b"7f02 default dirty=1 N1=1 kernelpagesize_kB=4", {}),
    # an anonymous page next to a kernel page (a COW-ed special mapping): counted as anon
    (b"7f03 default anon=1 dirty=1 mapped=2 N1=2 kernelpagesize_kB=4", {(1, Kind.ANON): 8192}),
    (b"7f04 default heap mapped=1 N1=1 kernelpagesize_kB=4", {(1, Kind.ANON): 4096}),
    (b"7f05 default stack dirty=1 N1=1 kernelpagesize_kB=4", {(1, Kind.ANON): 4096}),
    (b"7f06 default file=/lib/x.so mapped=1 N1=1 kernelpagesize_kB=4", {(1, Kind.FILE): 4096}),
    (b"7f07 default huge dirty=1 N1=1 kernelpagesize_kB=2048",
     {(1, Kind.HUGETLB): 2 * MiB}),
])
def test_lines_without_anonymous_pages_of_their_own(line: bytes, counted: dict[object, int],
                                                    compiled: bool) -> None:
    """Which lines hold kernel pages (not counted) and which the process's memory."""
    ref = parse_numa_maps_line(line)
    assert ref.kernel == (not counted)
    assert ref.bytes_by_node  # the line prints its pages either way
    r = parse_numa_maps([line + b"\n"], compiled=compiled)
    assert (r.error_count, r.mappings) == (0, 1)
    assert r.bytes == counted
    got, batch, n, exact = _both_paths(line + b"\n")
    assert got == n == 1 and batch == exact == r
