"""The choice between the maps text and PROCMAP_QUERY for one process (readers/sampled/frames.py
``Costs``): the query is tried once, the cheaper way as measured is kept, and the other is
tried again after 8 reads, then after twice as many each time it is confirmed the dearer."""

from __future__ import annotations

import itertools

from numa_exporter.readers.sampled.frames import REPROBE_FIRST, REPROBE_MAX, Costs, Way


def _run(costs: Costs, ns: dict[Way, int], reads: int, mappings: int = 1000) -> list[Way]:
    ways = []
    for _ in range(reads):
        way = costs.choose()
        costs.record(way, ns[way], mappings)
        ways.append(way)
    return ways


def test_the_query_is_tried_after_the_first_text_read() -> None:
    costs = Costs()
    costs.record(Way.TEXT, 70_000_000, 60_000)
    assert costs.choose() is Way.QUERY


def test_the_cheaper_way_is_kept_and_the_other_tried_ever_more_rarely() -> None:
    costs = Costs()
    costs.record(Way.TEXT, 20_000_000, 1000)
    ways = _run(costs, {Way.TEXT: 20_000_000, Way.QUERY: 40_000_000}, 600)
    probes = [i for i, w in enumerate(ways) if w is Way.QUERY]
    assert probes[0] == 0  # the first try
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    # each probe confirms the text: the wait doubles from 8 up to 256 reads
    assert gaps[:6] == [REPROBE_FIRST + 1, 2 * REPROBE_FIRST + 1, 4 * REPROBE_FIRST + 1,
                        8 * REPROBE_FIRST + 1, 16 * REPROBE_FIRST + 1, REPROBE_MAX + 1]
    assert len(probes) < 600 / REPROBE_MAX + 6


def test_a_way_that_became_cheaper_takes_over_at_its_next_try() -> None:
    costs = Costs()
    costs.record(Way.TEXT, 20_000_000, 1000)
    ways = _run(costs, {Way.TEXT: 20_000_000, Way.QUERY: 40_000_000}, 100)
    assert ways[-1] is Way.TEXT
    # the process's mappings became memfds: the text now costs 3x what it did
    ways = _run(costs, {Way.TEXT: 70_000_000, Way.QUERY: 50_000_000}, 300)
    switched = ways.index(Way.QUERY)
    assert switched <= REPROBE_MAX + 1
    assert ways[switched:].count(Way.QUERY) > 0.9 * len(ways[switched:])
    # back to the short wait after a switch: the text is tried again 8 reads after the
    # text read that found it the dearer
    assert ways[switched: switched + REPROBE_FIRST] == [Way.QUERY] * REPROBE_FIRST
    assert ways[switched + REPROBE_FIRST] is Way.TEXT


def test_costs_compare_per_mapping() -> None:
    costs = Costs()
    costs.record(Way.TEXT, 30_000_000, 60_000)  # 500 ns a mapping
    costs.record(Way.QUERY, 20_000_000, 20_000)  # 1000 ns a mapping (a smaller list)
    assert costs.best() is Way.TEXT


def test_a_failing_query_leaves_the_text_and_is_retried_ever_more_rarely() -> None:
    # a process that maps a file whose path is over PATH_MAX makes every query fail
    costs = Costs()
    costs.record(Way.TEXT, 20_000_000, 1000)
    ways = []
    for _ in range(300):
        way = costs.choose()
        if way is Way.QUERY:
            costs.failed(way)
        else:
            costs.record(way, 20_000_000, 1000)
        ways.append(way)
    tries = [i for i, w in enumerate(ways) if w is Way.QUERY]
    assert tries[:3] == [0, REPROBE_FIRST + 1, 3 * REPROBE_FIRST + 2]
    assert len(tries) <= 6
