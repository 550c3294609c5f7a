"""Per-thread counters summed into a per-process counter that never falls."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from numa_exporter.model.counters import ThreadSum, advance


def test_exited_thread_keeps_its_pages() -> None:
    s = advance(ThreadSum(), {10: 5, 11: 7}, {10, 11})
    assert s.total == 12
    s = advance(s, {10: 6}, {10})  # thread 11 exited with 7
    assert (s.retired, s.total) == (7, 13)


def test_unreadable_listed_thread_is_not_counted_twice() -> None:
    s = advance(ThreadSum(), {10: 5, 11: 7}, {10, 11})
    s = advance(s, {10: 5}, {10, 11})  # 11 listed but its sched could not be read
    assert (s.retired, s.total) == (0, 12)
    s = advance(s, {10: 5, 11: 9}, {10, 11})
    assert (s.retired, s.total) == (0, 14)


def test_reused_tid_starts_a_new_thread() -> None:
    s = advance(ThreadSum(), {10: 5, 11: 40}, {10, 11})
    s = advance(s, {10: 5, 11: 3}, {10, 11})  # 11 exited, a new thread got tid 11
    assert (s.retired, s.total) == (40, 48)


@given(st.lists(st.dictionaries(st.integers(1, 6), st.integers(0, 1000), max_size=6),
                min_size=1, max_size=12))
def test_total_never_falls(scans: list[dict[int, int]]) -> None:
    state, last = ThreadSum(), 0
    for now in scans:
        state = advance(state, now, set(now))
        assert state.total >= last
        last = state.total
