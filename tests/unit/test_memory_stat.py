"""memory.stat parser and the NUMA balancing counter selection."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.memory_stat import (
    MemoryStat,
    numa_balancing_counters,
    parse_memory_stat,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
V2_FILE = FIX / "v2/sys/fs/cgroup/system.slice/foo.service/memory.stat"


def test_v2_fixture_all_fields() -> None:
    r = parse_memory_stat(V2_FILE.read_bytes())
    assert r.error_count == 0
    assert r.values["anon"] == 2148847616
    assert r.values["pgfault"] == 1049123
    assert len(r.values) == len(V2_FILE.read_bytes().splitlines())


def test_v2_numa_balancing_counters() -> None:
    r = parse_memory_stat(V2_FILE.read_bytes())
    assert r.numa_balancing_counters() == {
        "numa_pages_migrated": 262144,
        "numa_pte_updates": 1048576,
        "numa_hint_faults": 524288,
        "pgpromote_success": 0,
        "pgdemote_kswapd": 0,
        "pgdemote_direct": 0,
        "pgdemote_khugepaged": 0,
        "pgdemote_proactive": 0,
    }


def test_counter_selection_prefixes() -> None:
    values = {"numa_task_migrated": 1, "pgpromote_candidate": 2, "pgdemote_x": 3,
              "pgmigrate_success": 4, "anon": 5, "thp_migration_success": 6, "xnuma_": 7}
    assert numa_balancing_counters(values) == {
        "numa_task_migrated": 1, "pgpromote_candidate": 2, "pgdemote_x": 3}


@pytest.mark.parametrize("name", ["v1-root-memory.stat", "v1-child-memory.stat"])
def test_real_v1_files(name: str) -> None:
    r = parse_memory_stat((FIX / "real" / name).read_bytes())
    assert r.error_count == 0
    assert {"cache", "rss", "total_rss"} <= set(r.values)
    assert r.numa_balancing_counters() == {}


def test_this_hosts_memory_stat_parses_cleanly() -> None:
    root = Path("/sys/fs/cgroup")
    files = [p for p in (root / "memory" / "memory.stat",) if p.is_file()]
    files += sorted(root.glob("*/memory.stat"))[:5]
    files += sorted(root.glob("memory/*/memory.stat"))[:5]
    if not files:
        pytest.skip("no memory.stat on this host")
    for p in files:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        r = parse_memory_stat(data)
        assert r.error_count == 0, p
        assert r.values


@pytest.mark.parametrize("bad", [b"anon\n", b"anon 1 2\n", b"anon -1\n", b"anon x\n",
                                 b"an/on 1\n", b"anon " + b"1" * 21 + b"\n", b"file 5\n",
                                 b"\xff 1\n", b"anon \xd9\xa3\n"])
def test_malformed_counted(bad: bytes) -> None:
    r = parse_memory_stat(b"file 4096\n" + bad + b"shmem 0\n")
    assert r.error_count == 1 and r.first_error_line == 2
    assert r.values == {"file": 4096, "shmem": 0}


def test_empty() -> None:
    assert parse_memory_stat(b"") == MemoryStat()


@settings(max_examples=500)
@given(st.binary(max_size=2000))
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    r = parse_memory_stat(data)
    non_blank = sum(1 for ln in data.split(b"\n") if ln.decode("utf-8", "replace").strip())
    assert r.error_count + len(r.values) == non_blank
    assert all(v >= 0 for v in r.values.values())


@settings(max_examples=300)
@given(st.lists(st.lists(st.sampled_from(
    [b"numa_pte_updates", b"anon", b"1", b"-1", b"99999999999999999999999", b"x", b"\xff", b""]),
    max_size=4).map(b" ".join), max_size=20))
def test_never_raises_on_near_valid_lines(lines: list[bytes]) -> None:
    r = parse_memory_stat(b"\n".join(lines))
    assert set(r.numa_balancing_counters()) <= {"numa_pte_updates"}
