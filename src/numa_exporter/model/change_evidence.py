"""Change evidence: whether a page of a process can have changed node between two reads.

Pure: counters in, a verdict out. The rule comes from how the kernel counts the only events
that put a process's page on another node (docs/movement.md says the same for operators):

* **A fault of the process.** ``handle_mm_fault()`` ends in ``mm_account_fault()``
  (mm/memory.c), which adds one to ``current->min_flt`` or ``current->maj_flt``: the task
  that took the fault. ``/proc/PID/stat`` fields 10 and 12 (``do_task_stat`` in
  fs/proc/array.c) sum them over the live threads and the exited ones (``signal->min_flt``).
  Every allocation into the process's page tables by the process itself is one: a first
  touch, a re-fault after ``MADV_DONTNEED`` or ``munmap``/``mmap`` (an allocator recycling
  its arenas), a swap-in, a copy-on-write. NUMA balancing's hinting faults are faults too
  (``do_numa_page`` runs inside ``handle_mm_fault``), so a process that balancing migrates
  has faulted.
* **A migration.** ``migrate_pages()`` (mm/migrate.c) ends with
  ``count_vm_events(PGMIGRATE_SUCCESS, nr_succeeded)``, a large folio counting its base
  pages, whoever asked: ``migrate_pages(2)``/``move_pages(2)``/``mbind(MPOL_MF_MOVE)``,
  a cpuset move with ``memory_migrate``, NUMA balancing (``migrate_misplaced_folio``),
  demotion (``demote_folio_list`` in mm/vmscan.c, also ``pgdemote_*``), promotion
  (``pgpromote_success``) and compaction. It needs no fault of the process.
* **A THP collapse.** khugepaged's ``collapse_huge_page()`` (mm/khugepaged.c) copies up to
  512 pages into a new huge page, on the node ``hpage_collapse_find_target_node()`` picks,
  and counts ``thp_collapse_alloc``; the process's resident size need not change.
* **KSM.** ``try_to_merge_one_page()`` (mm/ksm.c) replaces a page by a stable KSM page that
  may be on another node (``merge_across_nodes``); ``pages_shared``/``pages_sharing`` change
  with each merge, ``full_scans`` with each pass of ksmd.
* **Reclaim and swap.** A page reclaimed leaves the resident size (``VmRSS``); one swapped
  back in is a (major) fault of the process, and ``pswpin``/``pswpout`` count swap I/O.

So where none of these moved since the last read — the process took no fault, its resident
size and the size of each kind are the same, and the host migrated, collapsed, merged,
swapped, demoted and promoted nothing — no page of the process can be elsewhere: the last
read is current, and exact (:attr:`Verdict.UNCHANGED`). With NUMA balancing on, hinting
faults and migrations happen all the time; such a host is never judged unchanged.

Movement (pages that changed node) needs a migration: a page freed and faulted again on
another node is recycled memory, counted as moved by neither reader. So a page found on
another node counts as moved only where the host's ``pgmigrate_success`` moved since the
last read (:attr:`Verdict.MOVEMENT_POSSIBLE`), and at most as many bytes as it moved
(:func:`movement_allowance`: the host's count is an upper bound of what any one process
had moved). Where the process faulted and the host migrated nothing, a page on another
node is recycled (:attr:`Verdict.REFAULT_ONLY`). Where an input is missing (a kernel
without the counter, a denied file: :attr:`Verdict.UNKNOWN`), the process is read as
always, and movement counts only with a known, moved migration counter.

Every comparison is against the counters taken at the last read of the same process (never
a baseline from before an unrelated migration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from numa_exporter.model.sample_memory import HOST_MIGRATION, host_migrated_pages

#: Pages that THP collapse allocated (khugepaged ``collapse_huge_page``).
HOST_COLLAPSE = "thp_collapse_alloc"
#: Tiering: demotion (kswapd, direct reclaim, khugepaged, proactive) and promotion.
HOST_TIERING_PREFIXES = ("pgdemote_", "pgpromote_success")
#: Swap I/O.
HOST_SWAP = ("pswpin", "pswpout")
#: NUMA balancing's own migrations, host-wide: ``migrate_misplaced_folio()`` (mm/migrate.c;
#: ``migrate_misplaced_page()`` before 6.6) counts ``NUMA_PAGE_MIGRATE`` for what its
#: ``migrate_pages()`` call moved, which ``pgmigrate_success`` counts as well.
HOST_BALANCING_MIGRATION = "numa_pages_migrated"


class Verdict(StrEnum):
    """What the counters say about a process since its last read."""

    UNCHANGED = "unchanged"  # nothing that can move or add a page of it happened
    MOVEMENT_POSSIBLE = "movement_possible"  # the host migrated pages: movement may count
    # it faulted, changed size, or the host collapsed, merged or swapped pages; the host
    # migrated nothing: a page on another node is recycled memory, not moved
    REFAULT_ONLY = "refault_only"
    UNKNOWN = "unknown"  # an input is missing: read, count movement only with evidence


@dataclass(frozen=True, slots=True)
class HostCounters:
    """The host's counters of events that move or replace pages of any process.

    ``migrated``: ``pgmigrate_success`` (None: vmstat unread, or neither it nor its parts
    shown). ``collapsed``, ``tiering``, ``swapped``: None where vmstat was not read; a
    counter the kernel does not have (no THP, no tiering) counts 0: the event cannot happen
    there, and demotion and promotion are migrations, in ``migrated`` too.
    ``ksm``: KSM's ``run``, ``pages_shared``, ``pages_sharing`` and ``full_scans``; ``(0,)``
    while ksmd is stopped (nothing merges); ``()`` on a kernel without KSM; None where a
    file could not be read.
    ``balancing``: the ``numa_balancing`` mode (None: unknown).
    ``balancing_migrated``: NUMA balancing's part of ``migrated`` (vmstat
    ``numa_pages_migrated``; None: unknown, or ``pgmigrate_success`` absent: no split).
    """

    migrated: int | None
    collapsed: int | None
    tiering: int | None
    swapped: int | None
    ksm: tuple[int, ...] | None
    balancing: int | None
    balancing_migrated: int | None = None

    @property
    def known(self) -> bool:
        """Return whether every counter was read."""
        return (self.migrated is not None and self.collapsed is not None
                and self.tiering is not None and self.swapped is not None
                and self.ksm is not None and self.balancing is not None)


def host_counters(vmstat: Mapping[str, int] | None, ksm: tuple[int, ...] | None,
                  balancing: int | None) -> HostCounters:
    """Return the host's counters from the whole of ``/proc/vmstat`` (None: not read), the
    KSM values (see :class:`HostCounters`) and the ``numa_balancing`` mode."""
    if vmstat is None:
        return HostCounters(None, None, None, None, ksm, balancing)
    return HostCounters(
        migrated=host_migrated_pages(vmstat),
        collapsed=vmstat.get(HOST_COLLAPSE, 0),
        tiering=sum(v for k, v in vmstat.items() if k.startswith(HOST_TIERING_PREFIXES)),
        swapped=sum(vmstat.get(k, 0) for k in HOST_SWAP),
        ksm=ksm,
        balancing=balancing,
        balancing_migrated=(vmstat.get(HOST_BALANCING_MIGRATION)
                            if HOST_MIGRATION in vmstat else None),
    )


@dataclass(frozen=True, slots=True)
class ProcessCounters:
    """One process's counters at one read, and the host's then.

    ``faults``: minor + major faults of ``stat`` (None: unknown). ``sizes``: the resident
    sizes of ``status`` (VmRSS, RssAnon, RssFile, RssShmem, HugetlbPages; None where
    unknown).
    """

    faults: int | None
    sizes: tuple[int | None, ...]
    host: HostCounters

    @property
    def known(self) -> bool:
        """Return whether every input was read."""
        return (self.faults is not None and bool(self.sizes)
                and all(s is not None for s in self.sizes) and self.host.known)


@dataclass(frozen=True, slots=True)
class Judgement:
    """The verdict on one interval, the pages the host migrated in it (None: unknown), and
    whether the process itself took no fault and kept its sizes (:func:`process_quiet`)."""

    verdict: Verdict
    migrated_pages: int | None
    quiet_process: bool = False

    @property
    def unchanged(self) -> bool:
        """Return whether the last read still stands, exactly."""
        return self.verdict is Verdict.UNCHANGED


def _delta(before: int | None, now: int | None) -> int | None:
    """Return how much a counter grew (None: unknown on either side, or it went back)."""
    if before is None or now is None or now < before:
        return None
    return now - before


def judge(before: ProcessCounters | None, now: ProcessCounters) -> Judgement:
    """Return the verdict on the interval from the counters of the last read (``before``;
    None: never read) to ``now`` (see the module for the rule)."""
    return replace(_verdict(before, now), quiet_process=process_quiet(before, now))


def _verdict(before: ProcessCounters | None, now: ProcessCounters) -> Judgement:
    """Return :func:`judge`'s verdict and migrated pages."""
    migrated = (_delta(before.host.migrated, now.host.migrated)
                if before is not None else None)
    if before is None or not before.known or not now.known:
        return Judgement(Verdict.UNKNOWN, migrated)
    bh, nh = before.host, now.host
    others = (_delta(bh.collapsed, nh.collapsed), _delta(bh.tiering, nh.tiering),
              _delta(bh.swapped, nh.swapped), _delta(before.faults, now.faults))
    if migrated is None or any(d is None for d in others):
        return Judgement(Verdict.UNKNOWN, migrated)  # a counter went back: not comparable
    if migrated > 0:
        return Judgement(Verdict.MOVEMENT_POSSIBLE, migrated)
    quiet_host = (not any(others[:3]) and bh.ksm == nh.ksm and nh.balancing == 0
                  and bh.balancing == 0)
    if quiet_host and now.faults == before.faults and now.sizes == before.sizes:
        return Judgement(Verdict.UNCHANGED, 0)
    return Judgement(Verdict.REFAULT_ONLY, 0)


def process_quiet(before: ProcessCounters | None, now: ProcessCounters) -> bool:
    """Return whether the process itself took no fault and kept every resident size since
    ``before`` (False where either side is unknown)."""
    return (before is not None and before.faults is not None and now.faults is not None
            and before.faults == now.faults and before.sizes == now.sizes
            and all(v is not None for v in now.sizes))


def movement_allowance(j: Judgement, page_size: int) -> int:
    """Return the most bytes of one process that may count as moved in the interval: what
    the host migrated (``migrated_pages`` base pages of ``page_size`` bytes), an upper bound
    of any one process's share; 0 where it migrated nothing or is unknown (movement counts
    only with evidence of a migration)."""
    if j.migrated_pages is None or j.migrated_pages <= 0:
        return 0
    return j.migrated_pages * page_size


def migration_evidence(host_migrated: int | None, host_balancing: int | None,
                       own_migrated: int | None) -> int | None:
    """Return the counter one process's movement is bounded by (pages; None: unknown): its
    growth between two reads of the process is the most pages of it that can have migrated.

    NUMA balancing migrates a page only from a hinting fault on it: ``do_numa_page()``
    (mm/memory.c; ``do_huge_pmd_numa_page()`` in mm/huge_memory.c for a huge page) calls
    ``migrate_misplaced_folio()`` and then ``task_numa_fault()`` (kernel/sched/fair.c) with
    ``TNF_MIGRATED``, which adds the pages to ``current->numa_pages_migrated``: the faulting
    task, a thread of the process whose page table holds the page (``own_migrated``: summed
    over its threads, those that exited included). So the host's balancing migrations
    (``host_balancing``: ``numa_pages_migrated`` of vmstat, the part of ``host_migrated``
    that balancing made) are another process's unless they are its own; every
    other migration (``migrate_pages(2)``, ``move_pages(2)``, ``mbind``, cpusets, demotion,
    compaction) needs no fault of the process and stays bounded by the host's count.

    The counter is ``pgmigrate_success - numa_pages_migrated + own_migrated``; where the
    process's own count or the host's split is unknown (no ``sched``, no balancing in the
    kernel, or ``pgmigrate_success`` absent) it is the host's ``host_migrated`` alone, the
    looser bound. (A process whose form changes between two reads gets a looser bound, or,
    where the counter went back, none counted, for that one interval.)"""
    if host_migrated is None:
        return None
    if own_migrated is None or host_balancing is None:
        return host_migrated
    return max(host_migrated - host_balancing, 0) + own_migrated


def bounded_moves(moves: Mapping[tuple[int, int], int], allowance: int
                  ) -> dict[tuple[int, int], int]:
    """Return ``moves`` (bytes per (from, to) node) scaled down so that they sum to at most
    ``allowance`` bytes, each pair in proportion (integer bytes, rounded down)."""
    total = sum(b for b in moves.values() if b > 0)
    if total <= allowance:
        return {k: b for k, b in moves.items() if b > 0}
    if allowance <= 0:
        return {}
    out = {k: b * allowance // total for k, b in moves.items() if b > 0}
    return {k: b for k, b in out.items() if b}
