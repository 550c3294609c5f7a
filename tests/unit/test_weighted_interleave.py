"""Weighted interleave: the sysfs weight parser, numa_maps' weighted lines, the deviation."""

from __future__ import annotations

import pytest

from numa_exporter.model.weighted_interleave import weighted_deviation_ratio
from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.parsers.weighted_interleave import (
    parse_weighted_interleave_auto,
    parse_weighted_interleave_node,
    weighted_interleave_node_id,
)

N01 = frozenset({0, 1})


@pytest.mark.parametrize(("data", "want"), [
    (b"1\n", 1), (b"3\n", 3), (b"255\n", 255), (b"7", 7),
    # the kernel never prints these: 0 resets to the default, the weight is a u8
    (b"0\n", None), (b"256\n", None), (b"-1\n", None), (b"", None), (b"\n", None),
    (b"1\n\n", None), (b" 1\n", None), (b"x\n", None), (b"1000\n", None), (b"\xff\n", None),
])
def test_node_weight(data: bytes, want: int | None) -> None:
    assert parse_weighted_interleave_node(data) == want


def test_auto_and_names() -> None:
    assert parse_weighted_interleave_auto(b"true\n") is True
    assert parse_weighted_interleave_auto(b"false\n") is False
    assert parse_weighted_interleave_auto(b"1\n") is None
    assert [weighted_interleave_node_id(n) for n in
            ("node0", "node12", "node", "node01", "nodex", "auto", "node\uff11", "node12345")
            ] == [0, 12, None, None, None, None, None, None]


def test_numa_maps_weighted_lines_by_policy_nodes() -> None:
    # 6.12 prints the mode with a space; bytes = N<n> x kernelpagesize_kB x 1024
    text = (b"7f0000000000 weighted interleave:0-1 anon=1024 dirty=1024 N0=768 N1=256 "
            b"kernelpagesize_kB=4\n"
            b"7f1000000000 weighted interleave:1 anon=3 dirty=3 N0=1 N1=2 kernelpagesize_kB=4\n"
            b"7f2000000000 interleave:0-1 anon=2 dirty=2 N0=1 N1=1 kernelpagesize_kB=4\n")
    r = parse_numa_maps(text.splitlines(keepends=True))
    assert r.error_count == 0
    assert r.weighted_nodes == {(N01, 0): 768 * 4096, (N01, 1): 256 * 4096,
                                (frozenset({1}), 0): 4096, (frozenset({1}), 1): 2 * 4096}
    assert r.policy_bytes["weighted_interleave"] == 1027 * 4096


def test_deviation_of_the_issue_example() -> None:
    # weights 3:1, pages 1:1: shares (1/2, 1/2) against (3/4, 1/4): (1/4 + 1/4) / 2
    assert weighted_deviation_ratio({(N01, 0): 100, (N01, 1): 100}, {0: 3, 1: 1}) == 0.25
    # weights 2:5 (measured on 6.12: 2/7 of the pages on node 0) conform exactly
    assert weighted_deviation_ratio({(N01, 0): 2 * 7, (N01, 1): 5 * 7}, {0: 2, 1: 5}) == 0.0
    # everything on the node of weight 1 of 3:1: 3/4 would have to move
    assert weighted_deviation_ratio({(N01, 1): 40}, {0: 3, 1: 1}) == 0.75


def test_deviation_with_two_policies() -> None:
    # 0-1 at 3:1 holds 300/100 pages (conforms); policy on node 1 alone holds 100 on node 0
    # and 300 on node 1. Observed: node 0 400, node 1 400; weighted: node 0 300, node 1
    # 100 + 400 = 500; |400-300| + |400-500| = 200 pages of 800, halved: 0.125
    got = weighted_deviation_ratio({(N01, 0): 300, (N01, 1): 100,
                                    (frozenset({1}), 0): 100, (frozenset({1}), 1): 300},
                                   {0: 3, 1: 1})
    assert got == pytest.approx(0.125)


def test_deviation_unknown() -> None:
    assert weighted_deviation_ratio({}, {0: 1}) is None
    assert weighted_deviation_ratio({(N01, 0): 8}, {0: 3}) is None  # node 1's weight unread
    assert weighted_deviation_ratio({(frozenset(), 0): 8}, {0: 3}) is None
