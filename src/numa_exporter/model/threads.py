"""One thread as read in one scan (kept between scans in the process's state), and the
home weights of a process's threads (:func:`thread_weights`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from numa_exporter.model.thread_binding import ThreadCpus, thread_node
from numa_exporter.parsers.pid_sched import SchedFaults

# Threads that ran fewer clock ticks than this since the last scan, together, are treated as
# idle for the home: 5 ticks is 50 ms at the usual USER_HZ of 100, the size of the noise a
# timer tick charged to a waking thread makes (one tick per wake-up that straddles it).
QUIET_TICKS = 5


@dataclass(frozen=True, slots=True)
class ThreadReading:
    """One thread as read in one scan."""

    tid: int
    processor: int | None  # last CPU (stat field 39)
    ticks: int  # utime + stime, clock ticks
    run_ns: int | None  # schedstat field 1 (ns on CPU); None if unavailable
    pages_migrated: int | None  # numa_pages_migrated from task/<tid>/sched, None if absent
    timeslices: int | None = None  # schedstat field 3 (times put on a CPU)
    runnable: bool = False  # stat state R (running or waiting for a CPU) when last read
    faults: SchedFaults | None = None  # the NUMA fault block of its sched; None: not read


def thread_weights(readings: list[ThreadReading] | None, previous: Mapping[int, ThreadReading],
                   node_of_cpu: Mapping[int, int],
                   places: Mapping[int, ThreadCpus] | None = None
                   ) -> tuple[list[tuple[int, float]], dict[int, int]]:
    """Return the home weights (node, CPU time since ``previous``) and threads per node.

    A thread counts on the node its mask now confines it to (``places``: its allowed CPUs,
    read every scan; :func:`~numa_exporter.model.thread_binding.thread_node`), else on its
    last CPU's. A thread that started since the previous reading is weighted by all of its
    CPU time (it all happened since). When the threads together ran less than
    ``QUIET_TICKS`` since the previous reading, that CPU time is tick-sampling noise (a wake-up
    charged a whole tick would make its thread's node the only home): each thread then
    weighs by its CPU time since it started, and when none has any, every thread counts once.
    """
    by_node: dict[int, int] = {}
    weights: list[tuple[int, float]] = []
    lifetime: list[tuple[int, float]] = []
    places = places or {}
    for t in readings or ():
        node = thread_node(places.get(t.tid) or ThreadCpus(t.tid, None, t.processor),
                           node_of_cpu)
        if node is None:
            continue
        by_node[node] = by_node.get(node, 0) + 1
        prev = previous.get(t.tid)
        delta = t.ticks - prev.ticks if prev is not None and t.ticks >= prev.ticks else t.ticks
        weights.append((node, float(delta)))
        lifetime.append((node, float(t.ticks)))
    if sum(w for _, w in weights) < QUIET_TICKS:  # (nearly) nothing ran since the last scan
        weights = lifetime
    if not any(w > 0 for _, w in weights):  # nothing ever ran: every thread counts once
        weights = [(n, 1.0) for n, _ in weights]
    return weights, by_node
