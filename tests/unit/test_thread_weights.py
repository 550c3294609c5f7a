"""Home weights of a process's threads (``model.threads.thread_weights``).

The case below is the real-kernel ``split_threads`` guest on 6.1 (CI, 2026-12-05): the main
thread and one worker confined to node 0, one worker to node 1, all asleep after touching
their memory; a wake-up of the main thread charged it one tick between two scans, and the
home read ``0`` instead of ``0-1``.
"""

from __future__ import annotations

from numa_exporter.model.home import thread_nodes
from numa_exporter.model.threads import QUIET_TICKS, ThreadReading, thread_weights

NODE_OF_CPU = {0: 0, 1: 0, 2: 1, 3: 1}


def _reading(tid: int, cpu: int, ticks: int) -> ThreadReading:
    return ThreadReading(tid=tid, processor=cpu, ticks=ticks, run_ns=None, pages_migrated=None)


def _home(now: list[ThreadReading], before: list[ThreadReading]) -> frozenset[int]:
    weights, _ = thread_weights(now, {t.tid: t for t in before}, NODE_OF_CPU)
    return thread_nodes(weights)


BEFORE = [_reading(10, 0, 4), _reading(11, 1, 310), _reading(12, 2, 295)]


def test_a_stray_tick_on_one_sleeping_thread_does_not_make_its_node_the_only_home() -> None:
    now = [_reading(10, 0, 5), _reading(11, 1, 310), _reading(12, 2, 295)]
    assert _home(now, BEFORE) == {0, 1}


def test_threads_that_ran_since_the_last_scan_decide_the_home() -> None:
    # the node-1 worker ran 2 s since the last scan, the others slept: node 1 is home
    now = [_reading(10, 0, 4), _reading(11, 1, 310), _reading(12, 2, 295 + 200)]
    assert _home(now, BEFORE) == {1}


def test_just_under_the_quiet_threshold_weighs_by_lifetime_and_at_it_by_the_interval() -> None:
    quiet = [_reading(10, 0, 4 + QUIET_TICKS - 1), _reading(11, 1, 310), _reading(12, 2, 295)]
    assert _home(quiet, BEFORE) == {0, 1}
    busy = [_reading(10, 0, 4 + QUIET_TICKS), _reading(11, 1, 310), _reading(12, 2, 295)]
    assert _home(busy, BEFORE) == {0}


def test_threads_that_never_ran_count_once_each() -> None:
    idle = [_reading(10, 0, 0), _reading(11, 1, 0), _reading(12, 2, 0)]
    weights, by_node = thread_weights(idle, {t.tid: t for t in idle}, NODE_OF_CPU)
    assert sorted(weights) == [(0, 1.0), (0, 1.0), (1, 1.0)]
    assert by_node == {0: 2, 1: 1}
