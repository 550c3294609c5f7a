"""The detail level's rule (model/detail_level.py): the largest processes get full detail
whatever their size, and neither the floor nor the rank flaps."""

from __future__ import annotations

from itertools import pairwise

from numa_exporter.model.detail_level import (
    HOLD_SCANS,
    DetailRule,
    DetailTrack,
    assign,
    exit_rank,
)

MiB = 1 << 20
GiB = 1 << 30


def _run(rule: DetailRule, scans: list[dict[int, int]]) -> dict[int, list[bool]]:
    """Return each pid's level scan after scan, its track kept across scans."""
    tracks: dict[int, DetailTrack] = {}
    out: dict[int, list[bool]] = {}
    for placed in scans:
        full = assign(rule, placed, lambda pid: tracks.setdefault(pid, DetailTrack()))
        for pid in placed:
            out.setdefault(pid, []).append(pid in full)
    return out


def _changes(levels: list[bool]) -> int:
    return sum(a != b for a, b in pairwise(levels))


def test_the_ten_largest_get_full_detail_whatever_their_size() -> None:
    placed = {pid: (300 - pid) * MiB for pid in range(100, 130)}  # 300 MiB .. 171 MiB
    full = assign(DetailRule(GiB, 10), placed, lambda _pid: None)
    assert full == frozenset(range(100, 110))
    placed[200] = 2 * GiB  # one above the floor: the ten largest include it, nothing more
    assert assign(DetailRule(GiB, 10), placed, lambda _pid: None) == frozenset(
        {200, *range(100, 109)})
    small = {pid: (300 - pid) * MiB for pid in range(100, 130)}
    assert assign(DetailRule(GiB, 0), small, lambda _pid: None) == frozenset()
    assert assign(DetailRule(0, 0), small, lambda _pid: None) == frozenset(small)


def test_processes_trading_places_around_the_tenth_rank_do_not_flap() -> None:
    # nine steady large processes; three of 200 MiB swap their order every scan, so one of
    # them is tenth (full detail) and the next scan another is
    base = {pid: (2000 - pid) * MiB for pid in range(1, 10)}
    scans = []
    for i in range(40):
        swing = {101: 200 * MiB + (i % 3) * MiB, 102: 200 * MiB + ((i + 1) % 3) * MiB,
                 103: 200 * MiB + ((i + 2) % 3) * MiB}
        scans.append({**base, **swing, **{pid: 50 * MiB for pid in range(200, 220)}})
    levels = _run(DetailRule(GiB, 10), scans)
    assert all(_changes(levels[pid]) <= 2 for pid in levels), {
        pid: _changes(v) for pid, v in levels.items() if _changes(v) > 2}
    # stateless, the same scans change the three swinging processes' level every scan or two
    flapping = [assign(DetailRule(GiB, 10), s, lambda _pid: None) for s in scans]
    assert sum(a != b for a, b in pairwise(flapping)) > 20


def test_a_process_that_falls_far_down_the_ranks_gives_its_detail_up_after_the_hold() -> None:
    top = {pid: (500 - pid) * MiB for pid in range(1, 11)}
    fallen = {**top, 10: 1 * MiB, **{pid: 100 * MiB for pid in range(20, 40)}}
    levels = _run(DetailRule(GiB, 10), [top] * 2 + [fallen] * (HOLD_SCANS + 3))[10]
    assert levels[:2 + HOLD_SCANS - 1] == [True] * (2 + HOLD_SCANS - 1)
    assert levels[2 + HOLD_SCANS:] == [False] * 3


def test_the_exit_rank_is_half_as_many_again() -> None:
    assert exit_rank(0) == 0
    assert exit_rank(1) == 2
    assert exit_rank(10) == 15
