"""Property tests: parsers never raise on arbitrary bytes and count what they cannot read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.cpulist import format_cpulist, parse_cpulist
from numa_exporter.parsers.node_meminfo import parse_node_meminfo
from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.parsers.pid_sched import parse_pid_sched
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.parsers.vmstat import parse_vmstat

TOKENS = st.sampled_from([
    b"7f00", b"default", b"bind:1", b"interleave:0-1", b"weighted", b"interleave:0",
    b"prefer", b"(many):0-1", b"N0=1", b"N1=2", b"kernelpagesize_kB=4", b"huge", b"heap",
    b"file=/x\\040y", b"anon=1", b"=", b":", b"N", b"-1", b"\xff", b"",
])
LINE = st.lists(TOKENS, max_size=10).map(lambda t: b" ".join(t) + b"\n")


@settings(max_examples=400)
@given(st.lists(st.binary(max_size=200), max_size=20))
def test_numa_maps_never_raises_on_bytes(lines: list[bytes]) -> None:
    r = parse_numa_maps(lines)
    non_blank = sum(1 for line in lines if line.strip())
    assert r.mappings + r.error_count == non_blank
    assert all(b >= 0 for b in r.bytes.values())


@settings(max_examples=400)
@given(st.lists(LINE, max_size=20))
def test_numa_maps_near_valid_lines(lines: list[bytes]) -> None:
    r = parse_numa_maps(lines)
    assert r.mappings + r.error_count == sum(1 for line in lines if line.strip())
    assert sum(r.policy_bytes.values()) == r.total_bytes


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


@settings(max_examples=500)
@given(st.lists(LINE, max_size=15))
def test_fast_totals_agree_with_line_parser(lines: list[bytes]) -> None:
    """The streamed totals equal the sum of the detailed per-line parser's results."""
    from numa_exporter.parsers.numa_maps import NumaMapsError, parse_numa_maps_line

    expect: dict[tuple[int, object], int] = {}
    ok = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            m = parse_numa_maps_line(line)
        except NumaMapsError:
            continue
        ok += 1
        for node, b in m.bytes_by_node.items():
            expect[(node, m.kind)] = expect.get((node, m.kind), 0) + b
    r = parse_numa_maps(lines)
    assert r.mappings == ok
    assert {k: v for k, v in r.bytes.items() if v} == {k: v for k, v in expect.items() if v}
