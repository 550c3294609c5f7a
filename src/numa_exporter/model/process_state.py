"""Per-process state carried between scans, owned in one place and keyed by one identity.

A process is its pid together with its start time (clock ticks since boot, from
``/proc/<pid>/stat``): a pid the kernel hands out again is a new process with fresh state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from numa_exporter.model.cadence import ReadCosts
from numa_exporter.model.counters import ThreadSum
from numa_exporter.model.drift import DriftTrack, WarmupRule
from numa_exporter.model.sample_memory import SampleMemory
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.model.threads import ThreadReading


@dataclass(frozen=True, slots=True, order=True)
class ProcessKey:
    """The identity of a process: pid and start time in clock ticks since boot."""

    pid: int
    start_ticks: int


@dataclass(slots=True)
class ProcessState:
    """Everything the exporter remembers about one process between scans.

    One owner writes it: the process reader (``scan/process.py``), whose stages each update
    their own part; the scanner only reads it (to plan, and to serve last values).
    """

    key: ProcessKey
    drift: DriftTrack
    threads: dict[int, ThreadReading] = field(default_factory=dict)
    # threads read so far in a pass stopped at a deadline, by tid (the next read resumes)
    threads_partial: dict[int, ThreadReading] = field(default_factory=dict)
    # the process's CPU clock (ns) read just before ``threads`` was read in full; None:
    # unknown (no clock, or a pass resumed after a deadline)
    threads_clock: int | None = None
    migrated: ThreadSum | None = None
    denied: bool = False
    last: ProcessSample | None = None  # the last sample served for the process
    reads: int = 0  # completed reads
    abandoned: int = 0  # consecutive reads abandoned at the scan deadline
    # measured costs of its reads and the cadence's times (last full read, next due)
    costs: ReadCosts = field(default_factory=ReadCosts)
    # memory policies as the last full read saw them (sampling does not see policies)
    policy_bytes: dict[str, int] = field(default_factory=dict)
    policy_nodes: dict[tuple[str, frozenset[int]], int] = field(default_factory=dict)
    # what its sampled reads learned (followed pages, carried counts); None until one
    sampled: SampleMemory | None = None


class ProcessTable:
    """The states of the processes seen recently; one state per pid at a time."""

    def __init__(self, rule: WarmupRule) -> None:
        self.rule = rule
        self._by_pid: dict[int, ProcessState] = {}

    def get(self, key: ProcessKey) -> ProcessState:
        """Return the state of ``key``, replacing any state of an older process with its pid."""
        st = self._by_pid.get(key.pid)
        if st is None or st.key != key:
            st = ProcessState(key=key, drift=DriftTrack.new(self.rule))
            self._by_pid[key.pid] = st
        return st

    def peek(self, key: ProcessKey) -> ProcessState | None:
        """Return the state of ``key`` if there is one."""
        st = self._by_pid.get(key.pid)
        return st if st is not None and st.key == key else None

    def retain(self, listed: frozenset[int]) -> None:
        """Drop the state of every process whose pid is no longer listed."""
        for pid in [p for p in self._by_pid if p not in listed]:
            del self._by_pid[pid]

    def __iter__(self) -> Iterator[ProcessState]:
        return iter(list(self._by_pid.values()))

    def __len__(self) -> int:
        return len(self._by_pid)
