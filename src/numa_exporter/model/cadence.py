"""The cadence planner: which reader each process gets this scan, and when it is read next.

A full read of ``numa_maps`` walks the page table under the target's mmap lock, but not in
one go: ``numa_maps`` is a seq_file whose ``start``/``stop`` take and drop the lock around
each ``read()`` (one page of text: a few dozen mappings), so what can stall the target is the
longest *single* read, bounded by the walk of its largest mapping, not the total. A process
of 60,000 small mappings only ever holds its lock for short spells; a process with one 16 GiB
mapping holds it for that mapping's whole walk.

So the planner estimates that longest hold (:func:`estimate_hold`: the CPU time of the
longest single ``read()`` of the last full reads (:func:`record_hold`), else what a probe of
the page sizes of the largest mappings implies (``model/page_sizes.py``: a huge page is one
step of the walk), or the largest mapping ``maps`` showed times the measured cost per byte,
or, knowing nothing yet, all resident bytes as one mapping) and samples only when it exceeds
``hold_budget``. Below it, the reader that measured cheaper in
CPU time is kept (the sampled reader is tried once when a full read measured above
:data:`PROBE_ABOVE`, where its estimated cost is below the full read's); a measurement is
redone once the resident size has moved by half or more.
Where sampling is unavailable, a process whose full read costs more than ``process_budget``
is read every k-th scan so that its average cost per scan stays within the budget.

A process that would be sampled is read in full instead while its memory policies are due
(``model/policies.py``: only a full read shows them) and the estimated hold is within
``policy_hold_budget``: at discovery, then every policy interval or after its size moved.

A process that would be sampled is also read in full (reason ``quiet``) where the change
evidence says it is unchanged since its last read (``model/change_evidence.py``: it took no
fault, kept its resident sizes, and the host migrated, collapsed, swapped and merged
nothing, with NUMA balancing off) and the estimated hold is within ``policy_hold_budget``.
The hold budget exists because a thread of the target that faults or maps memory waits for
the walk; a process that took no fault and kept its size over the last interval was not
faulting, and one that maps memory it then never touches is the rare case left (it waits
at most the policy hold budget, once). The read is made once: the scanner then serves that
exact placement while the evidence stays unchanged (``scan/process.py``), so one bounded
hold replaces a sampled read every scan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from numa_exporter.model.page_sizes import PageShape, walk_hold

# A full numa_maps read of 4 KiB pages measured 7.9 ms per GiB on a 2-core x86_64 host;
# rounded up so an unmeasured process is never under-estimated by much.
DEFAULT_SECONDS_PER_BYTE = 8.0e-3 / (1 << 30)
#: A full read that measured more CPU time than this has the sampled reader tried once, where
#: its estimated cost is lower (the default of the deprecated --placement.sample-above).
PROBE_ABOVE = 0.005
MAX_SKIP_SCANS = 64  # even the largest process is read exactly at least this often
#: A reader's measured cost stands while the resident size stays within this factor of the
#: size it was measured at; past it, the measurement is stale and is redone.
STALE_FACTOR = 1.5
#: CPU seconds per page query of the sampled reader before one was measured: the drawing,
#: one move_pages call per 256 pages and the tally, in the compiled extension
#: (readers/sampled/_sampled_fast.c), mostly the kernel's own move_pages work. Measured with
#: `python -m benchmarks sampled --cost --rounds 15` (2-core x86_64 VM, kernel 6.x): medians
#: 0.26 us (THP, hugetlb), 0.42-0.48 us (1 GiB of 4 KiB pages), 0.72 us (60,000 mappings);
#: the highest is taken. The pure-Python fallback measured 0.9-1.4 us; a process's own
#: measured sampled read replaces this value.
DEFAULT_QUERY_SECONDS = 0.75e-6
#: CPU seconds per line of ``maps`` the sampled reader reads and parses before it queries a
#: page: its fixed cost, which grows with the mapping count while a full read's grows with
#: resident pages. Same benchmark: 0.30 us a line with 60,000 mappings, compiled (0.22 us of
#: it the kernel writing the text, 0.07 us the parse); the pure-Python fallback 4.5-5.0 us.
DEFAULT_MAPS_LINE_SECONDS = 0.35e-6
#: Pages a sampled read queries at the default precision when every page is resident.
TYPICAL_QUERIES = 10_600
#: Fewest pages a sampled read may query, whatever the full read costs (one batch).
MIN_QUERIES = 256
#: Measured holds kept per process; the hold planned with is their lower median, so one
#: read slowed by noise (thread CPU of a ``read()`` only grows with cache misses, SMT
#: neighbours and interrupt time charged to it) does not decide alone.
HOLDS_KEPT = 3
#: The share of a full read's estimated CPU a sampled read may spend. At the default
#: precision (9,604 resident samples) a sampled read of ~1 GiB costs about what the full
#: read does, so spending all of it buys precision at no saving; and both estimates carry
#: noise (the per-GiB rate is rounded up, a query costs 0.26-0.72 us by shape). Half keeps
#: the sampled reader the cheaper one where the hold budget chose it; what precision that
#: costs is exported (numa_process_remote_ratio_stderr).
SAMPLED_SHARE = 0.5

class Method(StrEnum):
    """How a process's placement is read (the value is the exported label)."""

    FULL = "full"  # numa_maps: the kernel walks the page tables
    SAMPLED = "sampled"  # maps + move_pages: an estimate


class Reason(StrEnum):
    """Why the method was chosen (the value is the exported label)."""

    HOLD = "hold"  # the full read's longest lock hold is over the budget
    COST = "cost"  # the sampled reader measured cheaper
    PROBE = "probe"  # trying the sampled reader to measure it
    CHEAPER = "cheaper"  # the full read: cheaper, or the only one measured
    INTERVAL = "interval"  # a full read the operator asked for
    ONLY = "only"  # sampling is unavailable
    POLICY = "policy"  # a full read instead of a sampled one: the memory policies were due
    QUIET = "quiet"  # a full read instead of a sampled one: nothing changed since the last


@dataclass(frozen=True, slots=True)
class CadencePolicy:
    """The operator's cost settings (durations in seconds; 0 turns a setting off)."""

    full_interval: float = 0.0  # also read sampled processes in full this often (0: never)
    process_budget: float = 0.5  # average full-read cost one process may take per scan
    interval: float = 15.0  # the scan interval
    hold_budget: float = 0.005  # longest mmap-lock hold a full read may cause (0: no bound)
    # longest hold a full read for memory policies may cause, at its due times (0: none)
    policy_hold_budget: float = 0.1


@dataclass(frozen=True, slots=True)
class ReadCosts:
    """What was measured of a process's reads (seconds are CPU time of the reading thread).

    ``*_resident``: resident bytes when that measurement was taken. ``hold``: CPU time of
    the longest single ``read()`` of the last full read (one mmap-lock hold).
    ``largest_mapping``: virtual bytes of the largest mapping that can hold pages, from the
    last ``maps`` read (an upper bound of that mapping's resident bytes). ``holds``: the
    last :data:`HOLDS_KEPT` measured holds, oldest first (``hold`` is their lower median:
    see :func:`record_hold`). ``pages``: the last page-size probe of the largest mappings
    (None: never probed). ``seconds_per_byte``: wall seconds per resident byte of the
    last full read; ``last_full``, ``next_due``: monotonic times of the last full read and
    of the next planned read.
    """

    full_cpu: float | None = None
    full_resident: int = 0
    hold: float | None = None
    sampled_cpu: float | None = None
    sampled_resident: int = 0
    sampled_queries: int = 0
    largest_mapping: int | None = None
    maps_resident: int = 0
    mappings: int = 0  # mappings of the last read (numa_maps lines or maps lines)
    holds: tuple[float, ...] = ()
    pages: PageShape | None = None
    seconds_per_byte: float | None = None
    last_full: float = 0.0
    next_due: float = 0.0

    def record_full(self, *, cpu: float, elapsed: float, resident: int, hold: float,
                    mappings: int, now: float) -> ReadCosts:
        """Return the costs after a full read that took ``cpu`` seconds of CPU and
        ``elapsed`` seconds of wall time, its longest chunk ``hold``, at ``now``."""
        holds, lower = _kept_holds(self, hold)
        return replace(self, holds=holds, hold=lower, full_cpu=cpu, full_resident=resident,
                       mappings=mappings, seconds_per_byte=elapsed / max(resident, 1),
                       last_full=now)

    def record_policy_read(self, *, hold: float, mappings: int, now: float) -> ReadCosts:
        """Return the costs after a full read made for memory policies or of a quiet
        process (plan reason ``policy`` or ``quiet``): its hold counts, and it is the last
        full read; the full read's CPU and rate, which size the sampled reader's budget and
        choose the reader, stay as they were (no full read was chosen for them)."""
        return replace(record_hold(self, hold), mappings=mappings, last_full=now)

    def record_sampled(self, *, cpu: float, resident: int, queries: int,
                       largest_mapping: int, mappings: int) -> ReadCosts:
        """Return the costs after a sampled read of ``queries`` pages that took ``cpu``."""
        return replace(self, sampled_cpu=cpu, sampled_resident=resident,
                       sampled_queries=queries, largest_mapping=largest_mapping,
                       maps_resident=resident, mappings=mappings)

    def plan(self, policy: CadencePolicy, *, now: float, resident_bytes: int,
             sampling: bool, policies_due: bool = False, quiet: bool = False) -> Plan:
        """Return this scan's plan for the process these costs were measured of
        (``policies_due``, ``quiet``: see :func:`plan`)."""
        return plan(policy, now=now, resident_bytes=resident_bytes,
                    seconds_per_byte=self.seconds_per_byte, next_due=self.next_due,
                    last_full=self.last_full, sampling=sampling, costs=self,
                    policies_due=policies_due, quiet=quiet)


@dataclass(frozen=True, slots=True)
class Plan:
    """The decision for one process in one scan."""

    method: Method
    read_now: bool
    estimated_seconds: float  # estimated CPU time of a full read
    next_due: float  # monotonic time of the next read (same as now when read every scan)
    hold_seconds: float = 0.0  # estimated longest mmap-lock hold of a full read
    reason: Reason = Reason.CHEAPER
    # pages a sampled read may query (None: not sampled; a quiet plan keeps the budget the
    # sampled read would have had, for the panel a kept full placement is given)
    max_queries: int | None = None


def estimate_full_seconds(resident_bytes: int, seconds_per_byte: float | None) -> float:
    """Return the estimated cost of a full numa_maps read of a process."""
    return max(resident_bytes, 0) * (seconds_per_byte or DEFAULT_SECONDS_PER_BYTE)


def _growth(resident: int, then: int) -> float:
    """Return how many times bigger the process is than when measured (at least 1)."""
    return max(1.0, resident / then) if then > 0 else 1.0


def _fresh(resident: int, then: int) -> bool:
    """Return whether a measurement taken at ``then`` resident bytes still stands."""
    if then <= 0:
        return resident <= 0
    return then / STALE_FACTOR <= resident <= then * STALE_FACTOR


def _kept_holds(costs: ReadCosts, hold: float) -> tuple[tuple[float, ...], float]:
    """Return the last :data:`HOLDS_KEPT` holds with ``hold`` added, and their lower median."""
    holds = (*costs.holds, hold)[-HOLDS_KEPT:]
    return holds, sorted(holds)[(len(holds) - 1) // 2]


def record_hold(costs: ReadCosts, hold: float) -> ReadCosts:
    """Return ``costs`` with one more measured hold: the last :data:`HOLDS_KEPT` are kept
    and ``hold`` becomes their lower median (the one measurement while there is one, the
    smaller of two, the middle of three)."""
    holds, lower = _kept_holds(costs, hold)
    return replace(costs, holds=holds, hold=lower)


def page_hold(costs: ReadCosts, resident_bytes: int,
              seconds_per_byte: float | None) -> float | None:
    """Return the hold the page-size probe estimates (None without a probe)."""
    if costs.pages is None:
        return None
    return walk_hold(costs.pages, resident_bytes, seconds_per_byte or DEFAULT_SECONDS_PER_BYTE)


def estimate_hold(costs: ReadCosts, resident_bytes: int,
                  seconds_per_byte: float | None) -> float:
    """Return the estimated longest mmap-lock hold (seconds) of a full read.

    The smallest of: the measured hold (:func:`record_hold`), scaled up by the growth
    since, else the page-size probe's estimate (huge pages walked a step per 2 MiB); the
    largest mapping of ``maps`` (scaled up likewise, at most all resident bytes) at the
    cost per 4 KiB byte; with none known, all resident bytes walked under one hold.
    """
    resident = max(resident_bytes, 0)
    rate = seconds_per_byte or DEFAULT_SECONDS_PER_BYTE
    bounds: list[float] = []
    probed = page_hold(costs, resident, rate)
    if costs.hold is not None:
        bounds.append(costs.hold * _growth(resident, costs.full_resident))
    elif probed is not None:
        bounds.append(probed)
    if costs.largest_mapping is not None:
        biggest = costs.largest_mapping * _growth(resident, costs.maps_resident)
        bounds.append(min(biggest, resident) * rate)
    return min(bounds) if bounds else resident * rate


def query_budget(full_seconds: float, costs: ReadCosts) -> int:
    """Return the pages a sampled read may query so that it costs at most
    :data:`SAMPLED_SHARE` of what the full read is estimated to (``full_seconds`` of CPU),
    at least :data:`MIN_QUERIES`.

    The fixed part, parsing ``maps``, is taken off first (so a process of many mappings
    gets fewer queries); the cost per query is what the last sampled read measured beyond
    that fixed part, else :data:`DEFAULT_QUERY_SECONDS`.
    """
    fixed = costs.mappings * DEFAULT_MAPS_LINE_SECONDS
    per = DEFAULT_QUERY_SECONDS
    if costs.sampled_cpu is not None and costs.sampled_queries > 0:
        per = max((costs.sampled_cpu - fixed) / costs.sampled_queries, DEFAULT_QUERY_SECONDS / 4)
    return max(MIN_QUERIES, int(max(full_seconds * SAMPLED_SHARE - fixed, 0.0) / per))


def estimate_sampled_seconds(costs: ReadCosts) -> float:
    """Return the estimated CPU of a sampled read before one was measured: its ``maps``
    parse plus a full sample's queries."""
    return costs.mappings * DEFAULT_MAPS_LINE_SECONDS + TYPICAL_QUERIES * DEFAULT_QUERY_SECONDS


def _sampled(est: float, now: float, hold: float, reason: Reason, costs: ReadCosts) -> Plan:
    return Plan(Method.SAMPLED, True, est, now, hold, reason, query_budget(est, costs))


def plan(policy: CadencePolicy, *, now: float, resident_bytes: int,
         seconds_per_byte: float | None, next_due: float, last_full: float,
         sampling: bool, costs: ReadCosts | None = None,
         policies_due: bool = False, quiet: bool = False) -> Plan:
    """Return which reader to use for a process this scan, when to read it next, and why.

    ``now``, ``next_due`` and ``last_full`` are monotonic seconds, never wall time.
    ``policies_due``: its memory policies are due (``model/policies.py``); a sampled read
    becomes a full one (reason ``policy``) where the hold is within the policy budget.
    ``quiet``: the change evidence says nothing of the process changed since its last read;
    a sampled read becomes a full one (reason ``quiet``, the sampled budget kept in
    ``max_queries``) where the hold is within the policy budget (see the module)."""
    p = _plan(policy, now=now, resident_bytes=resident_bytes,
              seconds_per_byte=seconds_per_byte, next_due=next_due, last_full=last_full,
              sampling=sampling, costs=costs or ReadCosts())
    if (p.method != Method.SAMPLED or policy.policy_hold_budget <= 0
            or p.hold_seconds > policy.policy_hold_budget):
        return p
    if policies_due:
        return replace(p, method=Method.FULL, reason=Reason.POLICY, max_queries=None)
    if quiet:
        return replace(p, method=Method.FULL, reason=Reason.QUIET)
    return p


def _plan(policy: CadencePolicy, *, now: float, resident_bytes: int,
          seconds_per_byte: float | None, next_due: float, last_full: float,
          sampling: bool, costs: ReadCosts) -> Plan:
    """Return the plan without regard to memory policies (see :func:`plan`)."""
    est = estimate_full_seconds(resident_bytes, seconds_per_byte)
    if costs.full_cpu is not None:  # measured CPU, scaled to the current size
        est = costs.full_cpu * max(resident_bytes, 1) / max(costs.full_resident, 1)
    hold = estimate_hold(costs, resident_bytes, seconds_per_byte)
    if sampling:
        if policy.hold_budget > 0 and hold > policy.hold_budget:
            probed = page_hold(costs, resident_bytes, seconds_per_byte)
            if len(costs.holds) == 1 and probed is not None and probed <= policy.hold_budget:
                # one measured hold over the budget against a probe that says huge pages
                # keep it under: a second full read confirms before sampling takes over
                return Plan(Method.FULL, True, est, now, hold, Reason.CHEAPER)
            full_due = policy.full_interval > 0 and (last_full <= 0  # never read in full
                                                    or now - last_full >= policy.full_interval)
            if full_due:
                return Plan(Method.FULL, True, est, now, hold, Reason.INTERVAL)
            return _sampled(est, now, hold, Reason.HOLD, costs)
        full_known = costs.full_cpu is not None and _fresh(resident_bytes, costs.full_resident)
        sampled_known = (costs.sampled_cpu is not None
                         and _fresh(resident_bytes, costs.sampled_resident))
        if full_known and sampled_known:
            assert costs.sampled_cpu is not None
            if costs.sampled_cpu < est:
                return _sampled(est, now, hold, Reason.COST, costs)
            return Plan(Method.FULL, True, est, now, hold, Reason.CHEAPER)
        if full_known and est > PROBE_ABOVE and estimate_sampled_seconds(costs) < est:
            return _sampled(est, now, hold, Reason.PROBE, costs)
        return Plan(Method.FULL, True, est, now, hold, Reason.CHEAPER)
    if now + policy.interval / 2 < next_due:  # scans drift by a little: due within half
        return Plan(Method.FULL, False, est, next_due, hold, Reason.ONLY)
    if policy.process_budget > 0 and est > policy.process_budget:
        skip = min(math.ceil(est / policy.process_budget) - 1, MAX_SKIP_SCANS)
        return Plan(Method.FULL, True, est, now + skip * policy.interval, hold, Reason.ONLY)
    return Plan(Method.FULL, True, est, now, hold, Reason.ONLY)
