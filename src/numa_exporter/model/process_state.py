"""Per-process state carried between scans, owned in one place and keyed by one identity.

A process is its pid together with its start time (clock ticks since boot, from
``/proc/<pid>/stat``): a pid the kernel hands out again is a new process with fresh state.
A program that replaces itself with ``exec()`` keeps both, and starts with fresh state too
(its drift warm-up counted from when it was first seen). Two markers tell an exec, either
one enough where both sides know it:

* ``mm``: the generation of the process's address space (``sources/exec_probe.py``: a held
  ``environ`` descriptor reads nothing once the mm it was opened on is gone). Every exec
  replaces the mm, so this sees an exec that lays the new program out where the old one
  was (address randomisation off, the same binary);
* ``image``: the image fields in ``stat`` (``PidStat.image``: where exec() put the code and
  the stack), the fallback where the probe cannot tell (no environment, no room for a
  descriptor, a fixture root without ``environ``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from numa_exporter.model.cadence import ReadCosts
from numa_exporter.model.change_evidence import ProcessCounters
from numa_exporter.model.counters import ThreadSum
from numa_exporter.model.detail_level import DetailTrack
from numa_exporter.model.drift import DriftTrack, WarmupRule
from numa_exporter.model.policies import PolicyView
from numa_exporter.model.sample_memory import SampleMemory
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.model.stages import Placement
from numa_exporter.model.threads import ThreadReading


@dataclass(frozen=True, slots=True, order=True)
class ProcessKey:
    """The identity of a process: pid and start time in clock ticks since boot, the image
    exec() last laid out and the generation of its address space (None: not known). The
    two markers are not compared here: where one side does not know one, the other and the
    pid and start time decide (see :func:`execd`)."""

    pid: int
    start_ticks: int
    image: tuple[int, ...] | None = field(default=None, compare=False)
    mm: int | None = field(default=None, compare=False)


def execd(old: ProcessKey, new: ProcessKey) -> bool:
    """Return whether ``new`` is the same process as ``old`` after an exec(): the address
    space generations, or the images, both known and different."""
    return ((old.mm is not None and new.mm is not None and old.mm != new.mm)
            or (old.image is not None and new.image is not None and old.image != new.image))


@dataclass(slots=True)
class ProcessState:
    """Everything the exporter remembers about one process between scans.

    One owner writes it: the process reader (``scan/process.py``), whose stages each update
    their own part; the scanner only reads it (to plan, and to serve last values).
    """

    key: ProcessKey
    drift: DriftTrack
    execd: bool = False  # the state of a program that replaced another by exec()
    since: float | None = None  # steady time an exec'd program was first read (its age)
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
    policies: PolicyView | None = None
    # what its sampled reads learned (followed pages, carried counts); None until one
    sampled: SampleMemory | None = None
    # bytes of weighted-interleave mappings by (policy nodes, node), from the last full read
    weighted_nodes: dict[tuple[frozenset[int], int], int] = field(default_factory=dict)
    # its detail level across scans (the scanner advances it once a scan it is served)
    detail: DetailTrack = field(default_factory=DetailTrack)
    # the change evidence at the last read (model/change_evidence.py); None: never read
    counters: ProcessCounters | None = None
    # the last placement read (served again while the evidence says nothing changed) and
    # when it was read (monotonic seconds)
    placed: Placement | None = None
    placed_at: float = 0.0
    # sampled reads in a row that the change evidence found nothing changed before
    quiet_sampled: int = 0

    def program_start(self, start_time: float, now: float) -> float:
        """Return when the program now running started (steady seconds): the process's
        ``start_time``, or for one that exec'd, when it was first read after (``now`` the
        first time asked: at most one scan late, so its warm-up is never cut short)."""
        if not self.execd:
            return start_time
        if self.since is None:
            self.since = now
        return max(start_time, self.since)


class ProcessTable:
    """The states of the processes seen recently; one state per pid at a time."""

    def __init__(self, rule: WarmupRule) -> None:
        self.rule = rule
        self._by_pid: dict[int, ProcessState] = {}

    def get(self, key: ProcessKey) -> ProcessState:
        """Return the state of ``key``, replacing any state of an older process with its pid
        or of the program it replaced by exec()."""
        st = self._by_pid.get(key.pid)
        if st is None or st.key != key or execd(st.key, key):
            new = ProcessState(key=key, drift=DriftTrack.new(self.rule),
                               execd=st is not None and st.key == key)
            self._by_pid[key.pid] = st = new
        elif ((st.key.image is None and key.image is not None)
              or (st.key.mm is None and key.mm is not None)):
            # seen now: an exec from here is new
            st.key = replace(st.key, image=st.key.image if key.image is None else key.image,
                             mm=st.key.mm if key.mm is None else key.mm)
        return st

    def peek(self, key: ProcessKey) -> ProcessState | None:
        """Return the state of ``key`` if there is one (none after an exec())."""
        st = self._by_pid.get(key.pid)
        return st if st is not None and st.key == key and not execd(st.key, key) else None

    def by_pid(self, pid: int) -> ProcessState | None:
        """Return the state held for ``pid`` (the process the last read or keep served),
        or None."""
        return self._by_pid.get(pid)

    def retain(self, listed: frozenset[int]) -> None:
        """Drop the state of every process whose pid is no longer listed."""
        for pid in [p for p in self._by_pid if p not in listed]:
            del self._by_pid[pid]

    def __iter__(self) -> Iterator[ProcessState]:
        return iter(list(self._by_pid.values()))

    def __len__(self) -> int:
        return len(self._by_pid)
