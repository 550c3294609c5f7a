"""Present runs of ``pagemap`` entries (``parsers/pid_pagemap.py``: ``present_runs``), against
the entry-by-entry parse."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from numa_exporter.parsers.pid_pagemap import parse_pagemap_entry, present_runs

PRESENT = 1 << 63


def _reference(values: list[int], first: int) -> list[tuple[int, int]]:
    """Return the present runs by parsing each entry."""
    runs: list[tuple[int, int]] = []
    for i, v in enumerate(values):
        if parse_pagemap_entry(v).present:
            if runs and runs[-1][1] == first + i:
                runs[-1] = (runs[-1][0], first + i + 1)
            else:
                runs.append((first + i, first + i + 1))
    return runs


values = st.lists(st.one_of(st.just(0), st.just(PRESENT), st.just(PRESENT | 12345),
                            st.just(1 << 62), st.integers(0, (1 << 64) - 1)), max_size=300)


@given(values, st.integers(0, 1 << 36), st.integers(0, 7))
def test_present_runs_are_the_entries_present_bits(vals: list[int], first: int,
                                                   tail: int) -> None:
    data = b"".join(v.to_bytes(8, "little") for v in vals) + b"\xff" * tail
    assert present_runs(data, first) == _reference(vals, first)  # a partial entry: none


def test_swapped_and_empty_entries_are_not_present() -> None:
    data = b"".join(v.to_bytes(8, "little")
                    for v in (PRESENT, PRESENT | 7, 1 << 62, 0, PRESENT))
    assert present_runs(data, 100) == [(100, 102), (104, 105)]
    assert present_runs(b"", 5) == []
