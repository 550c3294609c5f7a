"""memory.numa_stat parser: cgroup v2 (bytes) and v1 (pages) formats, real files, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.memory_numa_stat import (
    EVENT_PREFIXES,
    MemoryNumaStat,
    parse_memory_numa_stat,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
V2_FILE = FIX / "v2/sys/fs/cgroup/system.slice/foo.service/memory.numa_stat"
V1_FILE = FIX / "v1/sys/fs/cgroup/memory/docker/abc123/memory.numa_stat"
V2_FIELDS = (
    "anon", "file", "kernel_stack", "pagetables", "sec_pagetables", "shmem", "file_mapped",
    "file_dirty", "file_writeback", "swapcached", "anon_thp", "file_thp", "shmem_thp",
    "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
    "slab_reclaimable", "slab_unreclaimable",
)


def test_v2_fixture_bytes_per_node() -> None:
    r = parse_memory_numa_stat(V2_FILE.read_bytes())
    assert (r.version, r.in_pages, r.error_count) == (2, False, 0)
    assert r.nodes["anon"] == {0: 1363968, 1: 2147483648}
    assert r.nodes["anon_thp"] == {0: 0, 1: 1862270976}
    assert set(V2_FIELDS) <= set(r.nodes)
    assert r.totals == {}
    assert r.node_ids() == {0, 1}
    assert r.in_bytes(4096) is r  # already bytes


def test_v2_amounts_leave_out_event_counters() -> None:
    r = parse_memory_numa_stat(V2_FILE.read_bytes())
    amounts = r.amounts()
    assert "workingset_refault_file" in r.nodes and "pgdemote_kswapd" in r.nodes
    assert not any(k.startswith(EVENT_PREFIXES) for k in amounts)
    assert set(V2_FIELDS) <= set(amounts)
    assert "hugetlb" in amounts


def test_v1_fixture_pages_and_totals() -> None:
    r = parse_memory_numa_stat(V1_FILE.read_bytes())
    assert (r.version, r.in_pages, r.error_count) == (1, True, 0)
    assert set(r.nodes) == {"total", "file", "anon", "unevictable", "hierarchical_total",
                            "hierarchical_file", "hierarchical_anon",
                            "hierarchical_unevictable"}
    assert r.nodes["anon"] == {0: 131328, 1: 393216}
    for name, per in r.nodes.items():
        assert sum(per.values()) == r.totals[name]
    b = r.in_bytes(4096)
    assert (b.in_pages, b.version) == (False, 1)
    assert b.nodes["anon"] == {0: 131328 * 4096, 1: 393216 * 4096}
    assert b.totals["total"] == 786688 * 4096
    assert b.amounts() == b.nodes


@pytest.mark.parametrize("name", ["v1-root-memory.numa_stat", "v1-child-memory.numa_stat"])
def test_real_v1_files_from_a_host(name: str) -> None:
    r = parse_memory_numa_stat((FIX / "real" / name).read_bytes())
    assert (r.version, r.in_pages, r.error_count) == (1, True, 0)
    assert r.node_ids() == {0}
    assert r.totals["total"] == r.nodes["total"][0]
    assert r.totals["total"] == r.totals["file"] + r.totals["anon"] + r.totals["unevictable"]


def _live_numa_stat_files() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    found = [p for p in (root / "memory.numa_stat", root / "memory" / "memory.numa_stat")
             if p.is_file()]
    found += sorted(root.glob("*/memory.numa_stat"))[:5]
    found += sorted(root.glob("memory/*/memory.numa_stat"))[:5]
    return found


def test_this_hosts_memory_numa_stat_parses_cleanly() -> None:
    files = _live_numa_stat_files()
    if not files:
        pytest.skip("no memory.numa_stat on this host")
    for p in files:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        r = parse_memory_numa_stat(data)
        assert r.error_count == 0, (p, data)
        assert r.version in (1, 2)
        assert r.nodes, p


def test_empty_input() -> None:
    assert parse_memory_numa_stat(b"") == MemoryNumaStat()
    assert parse_memory_numa_stat(b"\n\n  \n").version is None


@pytest.mark.parametrize(
    "bad",
    [
        b"anon N0=1 N1=x\n",
        b"anon N0=1 X1=2\n",
        b"anon N0=1 N0=2\n",
        b"anon N0=-1\n",
        b"anon N0=" + b"9" * 21 + b"\n",
        b"an-on N0=1\n",
        b"total=x N0=1\n",
        b"total= N0=1\n",
        b"anon N0\n",
        b"\xff\xfe N0=1\n",
    ],
)
def test_malformed_line_is_counted_and_skipped(bad: bytes) -> None:
    r = parse_memory_numa_stat(b"file N0=4096\n" + bad + b"shmem N0=8192\n")
    assert r.error_count == 1
    assert r.first_error_line == 2
    assert r.nodes == {"file": {0: 4096}, "shmem": {0: 8192}}


def test_mixed_formats_keep_the_first() -> None:
    r = parse_memory_numa_stat(b"total=2 N0=2\nanon N0=4096\nfile=1 N0=1\n")
    assert (r.version, r.error_count, set(r.nodes)) == (1, 1, {"total", "file"})


def test_duplicate_field_counted() -> None:
    r = parse_memory_numa_stat(b"anon N0=1\nanon N0=2\n")
    assert r.nodes == {"anon": {0: 1}} and r.error_count == 1


def test_new_fields_are_kept() -> None:
    r = parse_memory_numa_stat(b"anon N0=1 N3=2\nzswap_future N0=7 N3=0\n")
    assert r.nodes["zswap_future"] == {0: 7, 3: 0}
    assert r.node_ids() == {0, 3}


TOKENS = st.sampled_from([
    b"anon", b"file", b"total=1", b"N0=1", b"N1=99", b"N=1", b"N0=", b"=", b"N0=1=2",
    b"hierarchical_total=5", b"N99999999=1", b"-", b"\xff", b"", b"N0=" + b"1" * 30,
])
LINE = st.lists(TOKENS, max_size=8).map(lambda t: b" ".join(t))


@settings(max_examples=500)
@given(st.binary(max_size=2000))
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    r = parse_memory_numa_stat(data)
    assert r.error_count >= 0
    assert r.error_count + len(r.nodes) == sum(1 for ln in data.split(b"\n")
                                               if ln.decode("utf-8", "replace").strip())
    assert all(v >= 0 for per in r.nodes.values() for v in per.values())


@settings(max_examples=500)
@given(st.lists(LINE, max_size=20))
def test_never_raises_on_near_valid_lines(lines: list[bytes]) -> None:
    data = b"\n".join(lines)
    r = parse_memory_numa_stat(data)
    assert r.error_count + len(r.nodes) == sum(1 for ln in lines if ln.strip())
    assert r.in_pages == (r.version == 1)
    r.in_bytes(4096)


@settings(max_examples=200)
@given(st.dictionaries(
    st.from_regex(r"[a-z][a-z_]{0,20}", fullmatch=True),
    st.dictionaries(st.integers(0, 1023), st.integers(0, 2**64 - 1), max_size=4),
    max_size=10,
))
def test_v2_round_trip(fields: dict[str, dict[int, int]]) -> None:
    text = "".join(
        name + "".join(f" N{n}={v}" for n, v in per.items()) + "\n" for name, per in fields.items()
    )
    r = parse_memory_numa_stat(text.encode())
    assert r.error_count == 0
    assert r.nodes == fields
