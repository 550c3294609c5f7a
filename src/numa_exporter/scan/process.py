"""One process read in stages, each returning one value: identity → threads → placement →
Kubernetes → home → binding → tiers → drift, put together by ``model.stages.assemble``.

:class:`ProcessReader` is what a scan runs for each selected process and what ``inspect``
runs for one. Everything kept between reads of a process lives in its
:class:`~numa_exporter.model.process_state.ProcessState`, which only this reader writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

import structlog

from numa_exporter.config import Config
from numa_exporter.model.binding import Binding, analyse
from numa_exporter.model.cadence import Method, Plan, Reason
from numa_exporter.model.change_evidence import (
    HOST_BALANCING_MIGRATION,
    HostCounters,
    Judgement,
    ProcessCounters,
    judge,
    migration_evidence,
)
from numa_exporter.model.clock import ScanTime
from numa_exporter.model.counters import ThreadSum, advance
from numa_exporter.model.home import home_for, locality
from numa_exporter.model.kubernetes import Assignment, kubelet_home, kubelet_mismatches
from numa_exporter.model.policies import PolicyView, current, scaled
from numa_exporter.model.process_state import ProcessKey, ProcessState, ProcessTable
from numa_exporter.model.sample_memory import (
    CARRY_READS,
    PANEL_FILL,
    SampleMemory,
    host_migrated_pages,
)
from numa_exporter.model.snapshot import AcceleratorUse, Drift, ProcessSample, SystemSample
from numa_exporter.model.stages import (
    Homing,
    Identity,
    Placement,
    Pod,
    SampledPlacement,
    Threads,
    Timing,
    assemble,
)
from numa_exporter.model.thread_binding import ThreadAudit, ThreadCpus, audit, thread_node
from numa_exporter.model.threads import ThreadReading, thread_weights
from numa_exporter.model.tiers.host import HostTiers
from numa_exporter.model.tiers.process import ProcessTiers, process_tiers
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.numa_maps import Kind, NumaMaps, fold_nodes
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.parsers.proc_cgroup import ProcCgroup
from numa_exporter.parsers.text import label_text
from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.readers.accelerator_use import AcceleratorMap, pinned_home
from numa_exporter.readers.accelerators import nvidia_memory_nodes
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.kubernetes import KubernetesScan, cgroup_key
from numa_exporter.readers.page_sizes import probe_page_sizes
from numa_exporter.readers.process_files import (
    HoldMeter,
    read_boot_time,
    read_cgroup,
    read_numa_maps,
    read_resident_pages,
    read_stat,
)
from numa_exporter.readers.sampled.reader import SampledRequest
from numa_exporter.readers.threads import SchedGate, read_affinities, read_threads
from numa_exporter.scan.select import Candidate, texts
from numa_exporter.sources.cpu_clock import ProcessCpuClock, same_pid_namespace
from numa_exporter.sources.deadline import NEVER, Deadline, Expired
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

log = structlog.get_logger("numa_exporter.scan.process")

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: A placement served again while the change evidence says nothing changed is verified by a
#: real read once it is this old (monotonic seconds) ...
VERIFY_AGE = 300.0
#: ... at most this many processes a scan (the oldest due first, in the scan's order: the
#: others wait their turn, so every kept placement is verified within
#: max(VERIFY_AGE, processes / VERIFY_PER_SCAN scans)).
VERIFY_PER_SCAN = 2
#: Pages the sampled read that gives a kept full placement its panel may query (four times
#: what a panel takes in one read: the reader keeps a quarter of its queries for the panel).
SEED_QUERIES = 4 * PANEL_FILL
UNKNOWN_HOST = HostCounters(None, None, None, None, None, None)

__all__ = ["Placement", "PlacementReader", "ProcessReader", "SampledPlacement",
           "SampledReader"]


class PlacementReader(Protocol):
    """Reads where a process's resident pages are: the full numa_maps walk by default.

    It checks ``deadline`` between the chunks of its read (``Expired`` past it) and times
    each chunk into ``hold`` when given.
    """

    def __call__(self, files: ProcessFiles, deadline: Deadline = NEVER,
                 hold: HoldMeter | None = None) -> NumaMaps:
        """Return the per-node, per-kind totals of the process."""
        ...


class SampledReader(Protocol):
    """Estimates a process's placement without walking its page tables, and keeps what it
    learns of each process until the scanner's table drops the process
    (``readers/sampled/reader.py``)."""

    def __call__(self, files: ProcessFiles, status: PidStatus,
                 request: SampledRequest | None = None) -> SampledPlacement:
        """Return the estimate; raise Gone/Denied/SourceError like a file read.

        At most ``request.max_queries`` pages are queried; its ``deadline`` is checked
        before each batch of queries (``Expired`` past it). Its ``memory`` is what earlier
        reads of the process learned (updated by the read), its ``host_migrated`` the
        host's migrated-pages counter now (None: unknown).
        """
        ...

    def retain(self, keys: Iterable[ProcessKey]) -> None:
        """Drop what is kept of every process not among ``keys``."""
        ...


def unchanged(st: ProcessState, clock: int | None) -> bool:
    """Return whether the process's last complete thread reading still stands: its CPU
    clock has not moved since just before that reading (no thread was on a CPU since, so
    none started, ran, moved or exited) and no thread was then waiting for a CPU (a queued
    thread can be moved to another CPU's queue without running)."""
    return (clock is not None and clock == st.threads_clock and bool(st.threads)
            and not st.threads_partial and not any(t.runnable for t in st.threads.values()))


def accelerator_cpu_nodes(uses: Iterable[AcceleratorUse], topo: Topology) -> frozenset[int]:
    """Return the nodes of the accelerators a process uses: each device's ``numa_node``,
    else (firmware left it at -1, as on Grace Hopper) the nodes of its nearest CPUs
    (``local_cpulist``) where those name fewer than all CPUs."""
    out: set[int] = set()
    every = topo.all_cpus()
    for u in uses:
        if u.node >= 0:
            out.add(u.node)
        elif u.local_cpus and u.local_cpus != every:
            out |= topo.nodes_of_cpus(u.local_cpus)
    return frozenset(out)


def log_sampled(pid: int, est: SampledPlacement) -> None:
    """Log (debug) how a sampled read found the pages, how sure it is and what moved."""
    log.debug("sampled placement", pid=pid, path=est.path, maps=est.maps_way,
              samples=est.samples,
              node_bytes_stderr=round(est.node_bytes_stderr()),
              moved=({f"{a}->{b}": v for (a, b), v in est.moved.items()}
                     if est.moved is not None else None))


def process_counters(cand: Candidate, host: HostCounters | None) -> ProcessCounters:
    """Return the change evidence of a candidate now: its faults (``stat``), resident sizes
    (``status``) and the host's counters (None: unread)."""
    st = cand.status
    return ProcessCounters(cand.stat.faults if cand.stat is not None else None,
                           (st.vm_rss, st.rss_anon, st.rss_file, st.rss_shmem, st.hugetlb),
                           host or UNKNOWN_HOST)


@dataclass(slots=True)
class EvidenceCounts:
    """What the change evidence saved and how often a verification disagreed, since start.

    ``skipped``: placement reads not made, by reason (``unchanged``: the evidence said the
    last read stands); ``verified``: real reads made to check a placement the evidence
    would have kept; ``disagreed``: those whose full read differed from the kept one while
    the process's own counters stayed the same across the read; ``left``: verifications
    left this scan (set by the scanner)."""

    skipped: dict[str, int] = field(default_factory=dict)
    verified: int = 0
    disagreed: int = 0
    left: int = VERIFY_PER_SCAN


class ProcessReader:
    """Reads one process in stages; shares the scanner's error reporter, process table and
    accelerator map."""

    def __init__(self, config: Config, errors: ErrorReporter, table: ProcessTable,
                 accel: AcceleratorMap, topology: Callable[[], Topology], proc: ProcFS,
                 placement: PlacementReader = read_numa_maps,
                 sampled: SampledReader | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 cpu: Callable[[], float] = time.thread_time,
                 cpu_clock: Callable[[int], int | None] | None = None) -> None:
        self.config = config
        self.errors = errors
        self.table = table
        self.accel = accel
        self.topology = topology
        self.proc = proc
        self.placement_reader = placement
        self.sampled = sampled
        self.clock = clock
        self.wall = wall
        self.cpu = cpu  # the reading thread's CPU time: what each read costs
        # a process's CPU clock by pid (ns; None: unknown): unchanged means no thread ran
        self.cpu_clock = cpu_clock if cpu_clock is not None else ProcessCpuClock(proc.root).read
        self._btime: int | None = None
        # the scan's Kubernetes look-ups (set by the scanner for one scan; None: off)
        self.kube: KubernetesScan | None = None
        self.gate = SchedGate()  # closed for good on kernels whose sched read resets counters
        # thread masks by sched_getaffinity where the root is our own PID namespace
        self.affinity_syscall = same_pid_namespace(proc.root)
        self._host: tuple[object, object, HostTiers] | None = None
        self.evidence = EvidenceCounts()

    # --- stage 1: identity ---------------------------------------------------------------
    def identity(self, cand: Candidate) -> Identity | None:
        """Return who the process is (None when its stat is malformed, reported)."""
        if cand.stat is None:
            cand.stat = read_stat(cand.files, self.errors)
            if cand.stat is None:
                return None
        stat, status = cand.stat, cand.status
        btime = self.boot_time()
        return Identity(cand.pid, stat.comm or status.name,
                        (btime or 0) + stat.starttime / CLK_TCK, status.vm_rss or 0,
                        status.cpus_allowed, status.mems_allowed)

    def boot_time(self) -> int | None:
        """Return the boot time (None while /proc/stat cannot be read: retried next time)."""
        if self._btime is None:
            self._btime = read_boot_time(self.proc, self.errors)
        return self._btime

    # --- stage 2: threads ----------------------------------------------------------------
    def threads(self, files: ProcessFiles, st: ProcessState, deadline: Deadline = NEVER
                ) -> Threads:
        """Return the process's threads: their readings (None if unlisted), home weights,
        threads per node and each thread's allowed and last CPU. The masks are read every
        time, whatever the CPU clock says (they change while a thread sleeps).

        Raises Expired past ``deadline``; the threads read by then are kept and the next
        read goes on from there.
        """
        self.gate.faults = self.config.enabled("tiers")
        clock = self.process_clock(files.pid)
        resumed = bool(st.threads_partial)
        try:
            readings: list[ThreadReading] | None
            if unchanged(st, clock):
                readings = list(st.threads.values())  # no thread was on a CPU since
            else:
                readings = read_threads(files, st.threads, self.errors.parse, self.gate,
                                        deadline=deadline, done=st.threads_partial)
        except Expired as part:
            st.threads_partial = part.partial if isinstance(part.partial, dict) else {}
            st.threads_clock = None
            raise
        except Gone:
            raise
        except SourceError as err:
            self.errors.read(err)
            readings = None
        # a resumed pass mixes readings from before this clock reading: not a baseline
        st.threads_clock = clock if readings is not None and not resumed else None
        st.threads_partial = {}
        masks = self.affinities(files, readings)
        places = {t.tid: ThreadCpus(t.tid, masks.get(t.tid), t.processor)
                  for t in readings or ()}
        weights, by_node = thread_weights(readings, st.threads, self.topology().node_of_cpu(),
                                          places)
        if self.gate.refused and self.errors.once("note", "sched-legacy"):
            log.warning("this kernel prints the 3.13-4.1 NUMA form in sched and resets "
                        "numa_pages_migrated on every read; sched is not read again (no "
                        "hinting faults or migrated pages per process)")
        if readings is not None:
            st.threads = {t.tid: t for t in readings}
            now = {t.tid: t.pages_migrated for t in readings if t.pages_migrated is not None}
            if now or st.migrated is not None:
                st.migrated = advance(st.migrated or ThreadSum(), now,
                                      frozenset(t.tid for t in readings))
        return Threads(readings, weights, by_node,
                       st.migrated.total if st.migrated is not None else None, places)

    def affinities(self, files: ProcessFiles, readings: list[ThreadReading] | None
                   ) -> dict[int, frozenset[int] | None]:
        """Return the allowed CPUs of the threads read, by tid ({} without threads or with
        the binding collector off; a read error is counted)."""
        if not readings or not self.config.enabled("binding"):
            return {}
        try:
            return read_affinities(files, (t.tid for t in readings), self.affinity_syscall,
                                   self.errors.parse)
        except Gone:
            raise
        except SourceError as err:
            self.errors.read(err)
            return {}

    def process_clock(self, pid: int) -> int | None:
        """Return process ``pid``'s CPU clock in ns (None: unknown; an error is counted)."""
        try:
            return self.cpu_clock(pid)
        except SourceError as err:
            self.errors.read(err)
            return None

    # --- stage 3: placement --------------------------------------------------------------
    def probe_pages(self, cand: Candidate, now: float, deadline: Deadline = NEVER) -> bool:
        """Probe the page sizes of the process's largest mappings unless a probe still
        stands; return whether its costs changed (the plan is then made again).

        Raises Gone/Denied/SourceError of maps and pagemap like a read, Expired past
        ``deadline``; page frames that cannot be seen are said once and count as small.
        """
        st = self.table.get(cand.key)
        shape = st.costs.pages
        if shape is not None and shape.fresh(cand.resident, now):
            return False
        shape, problem = probe_page_sizes(cand.files, self.proc, cand.resident, now,
                                          page_size=PAGE_SIZE, deadline=deadline)
        if shape.errors:
            self.errors.parse("pagemap", str(cand.files.path), shape.errors)
        if problem is not None:
            if not isinstance(problem, (Denied, Gone)):  # no CAP_SYS_ADMIN, no such file
                self.errors.read(problem)
            if self.errors.once("note", "page-sizes"):
                log.info("page sizes of big mappings unknown: their lock hold is estimated "
                         "as 4 KiB pages", reason=str(problem))
        st.costs = replace(st.costs, pages=shape)
        return True

    def placement(self, cand: Candidate, st: ProcessState, plan: Plan | None,
                  deadline: Deadline, t0: float, mono: float,
                  host_migrated: int | None = None,
                  judged: Judgement | None = None) -> Placement:
        """Return where the process's pages are, by the planned method, and record what the
        read cost in the process's costs (``t0``: when the process's read began).

        Where the change evidence ``judged`` says nothing changed since the last read, that
        read is served again (not for a read of memory policies that are due): a full one
        whatever reader the plan picks (it is exact), a sampled one where the plan samples
        too, after :data:`CARRY_READS` sampled reads in a row that found nothing changed
        (its carried counts have converged as far as they go) — unless it is
        :data:`VERIFY_AGE` old and a verification is left this scan: then it is read and
        compared (:meth:`verify`). A quiet process the plan would sample gets one full read
        (plan reason ``quiet``) and keeps it. A kept full placement of a process the plan
        would sample is given a panel to follow (:meth:`seed_panel`) where it has none, so
        that movement after it is counted by the sampled read the next change brings.

        Raises the read's SourceError (a denied read marks the process denied) or Expired.
        """
        verifying: Placement | None = None
        method = plan.method if plan is not None else Method.FULL
        unchanged = judged is not None and judged.unchanged
        kept = st.placed
        if (unchanged and kept is not None
                and (kept.method == Method.FULL
                     or (kept.method == method and st.quiet_sampled >= CARRY_READS))
                and (plan is None or plan.reason != Reason.POLICY)):
            if mono - st.placed_at < VERIFY_AGE or self.evidence.left <= 0:
                skipped = self.evidence.skipped
                skipped["unchanged"] = skipped.get("unchanged", 0) + 1
                if kept.method == Method.FULL:
                    self.seed_panel(cand, st, plan, deadline, host_migrated)
                return kept
            self.evidence.left -= 1
            verifying = kept
        placed = self.read_placement(cand, st, plan, deadline, t0, mono, host_migrated,
                                     faulted=judged is None or not judged.quiet_process,
                                     unchanged=unchanged)
        if verifying is not None:
            self.verify(cand, verifying, placed)
        st.placed = replace(placed, kept=True)  # served again, it is no new read
        st.placed_at = mono
        st.quiet_sampled = st.quiet_sampled + 1 if unchanged and placed.estimate else 0
        return placed

    def seed_panel(self, cand: Candidate, st: ProcessState, plan: Plan | None,
                   deadline: Deadline, host_migrated: int | None) -> None:
        """Give a process whose kept full placement is served, and that the plan would
        sample (``plan.max_queries`` set), a panel of pages to follow where it has none: a
        sampled read of at most :data:`SEED_QUERIES` pages whose estimate is dropped. The
        evidence says nothing changed since the full read, so the pages' nodes now are
        theirs then; the sampled read after the next change counts what moved from there
        (``docs/movement.md``). A read that fails leaves no panel (counted, tried again
        next scan); Gone and Expired are raised."""
        if (st.sampled is not None or plan is None or plan.max_queries is None
                or self.sampled is None):
            return
        memory = SampleMemory()
        try:
            self.sampled(cand.files, cand.status, SampledRequest(
                key=st.key, max_queries=min(plan.max_queries, SEED_QUERIES),
                deadline=deadline, memory=memory, host_migrated=host_migrated,
                faulted=False))
        except (Gone, Expired):
            raise
        except SourceError as err:
            self.errors.read(err)
            return
        st.sampled = memory

    def verify(self, cand: Candidate, kept: Placement, read: Placement) -> None:
        """Count a verification of a kept placement against the one just read, and a
        disagreement where both are full reads, they differ, and the process's faults and
        resident size are the same after the read as before it (else it changed while
        read: no verdict)."""
        self.evidence.verified += 1
        if kept.method != "full" or read.method != "full" or kept.bytes == read.bytes:
            return
        try:
            after = read_stat(cand.files, self.errors)
            pages = read_resident_pages(cand.files)
        except SourceError:
            return
        before = cand.stat
        if (after is None or before is None or after.faults != before.faults
                or pages is None or pages * PAGE_SIZE != cand.status.vm_rss):
            return
        self.evidence.disagreed += 1
        log.info("change evidence disagreed: a placement it kept differs from a read",
                 pid=cand.pid, kept=sum(kept.bytes.values()), read=sum(read.bytes.values()))

    def read_placement(self, cand: Candidate, st: ProcessState, plan: Plan | None,
                       deadline: Deadline, t0: float, mono: float,
                       host_migrated: int | None = None, faulted: bool = True,
                       unchanged: bool = False) -> Placement:
        """Return where the process's pages are, read by the planned method, and record the
        read's cost (see :meth:`placement`; ``faulted``, ``unchanged``: see :meth:`place`)."""
        hold = HoldMeter(self.cpu)
        c0 = self.cpu()
        try:
            placed = self.place(cand, st, plan, deadline, hold, host_migrated, faulted,
                                unchanged)
        except Denied:
            st.denied = True
            raise
        cpu = self.cpu() - c0
        placed = self.policies(placed, st, cand.resident, mono)
        if (placed.method == Method.FULL and plan is not None
                and plan.reason in (Reason.POLICY, Reason.QUIET)):
            st.costs = st.costs.record_policy_read(hold=hold.longest,
                                                   mappings=placed.mappings, now=mono)
        elif placed.method == Method.FULL:
            st.costs = st.costs.record_full(cpu=cpu, elapsed=self.clock() - t0,
                                            resident=cand.resident, hold=hold.longest,
                                            mappings=placed.mappings, now=mono)
        elif placed.estimate is not None:
            est = placed.estimate
            st.costs = st.costs.record_sampled(cpu=cpu, resident=cand.resident,
                                               queries=est.samples,
                                               largest_mapping=est.largest_mapping,
                                               mappings=est.mappings)
        return placed

    def place(self, cand: Candidate, st: ProcessState, plan: Plan | None,
              deadline: Deadline = NEVER, hold: HoldMeter | None = None,
              host_migrated: int | None = None, faulted: bool = True,
              unchanged: bool = False) -> Placement:
        """Return where the process's pages are, by the planned method (full without one).

        A sampled estimate carries no memory policies (only numa_maps shows them): see
        :meth:`policies`. It uses and updates what the process's earlier sampled reads
        learned (``st.sampled``), with the host's migrated-pages counter ``host_migrated``
        and ``faulted``: whether the process took a fault or changed size since its last
        read (True: or unknown). A full read drops what they learned unless ``unchanged``
        (the change evidence says nothing changed since the last read: the followed pages
        are where they were, and nothing moved that either reader would count twice).
        """
        files = cand.files
        if plan is not None and plan.method == Method.SAMPLED and self.sampled is not None:
            if st.sampled is None:
                st.sampled = SampleMemory()
            est = self.sampled(files, cand.status, SampledRequest(
                key=st.key, max_queries=plan.max_queries, deadline=deadline,
                memory=st.sampled, host_migrated=host_migrated, faulted=faulted))
            log_sampled(cand.pid, est)
            if est.parse_errors:
                self.errors.parse("maps", f"{files.path}/maps", est.parse_errors)
            memory = self.known_nodes(est.bytes, f"{files.path}/maps")
            return Placement(memory, {}, {}, 0, Method.SAMPLED, est, policies_known=False)
        maps = self.placement_reader(files, deadline, hold)
        if maps.error_count:
            first = maps.errors[0] if maps.errors else None
            self.errors.parse("numa_maps", f"{files.path}/numa_maps", maps.error_count,
                              line=first.lineno if first else None,
                              reason=first.reason if first else None)
        memory = self.known_nodes(maps.bytes, f"{files.path}/numa_maps")
        # the full read counts movement from here on; a panel kept across it would count
        # the moves between two full reads a second time (none where nothing changed). Not
        # across a read of the policies of a process sampled before it either: that read
        # compares nothing (the read before it was sampled), and the sampled reads go on with
        # their panel and carried counts (a process whose size keeps moving has its policies
        # due again and again: each read would else start the estimate afresh)
        policy_after_sampled = (plan is not None and plan.reason == Reason.POLICY
                                and st.placed is not None
                                and st.placed.method == Method.SAMPLED)
        if not unchanged and not policy_after_sampled:
            st.sampled = None
        st.weighted_nodes = dict(maps.weighted_nodes)
        return Placement(memory, maps.policy_bytes, maps.policy_nodes,
                         maps.off_policy_bytes, Method.FULL, mappings=maps.mappings,
                         weighted_nodes=maps.weighted_nodes)

    def policies(self, placed: Placement, st: ProcessState, resident: int, now: float
                 ) -> Placement:
        """Return ``placed`` with the memory policies its sample carries: a full read's own
        (kept as the process's policy view), else the standing view's applied to the
        sampled bytes, else none and ``policies_known`` False (``model/policies.py``)."""
        if placed.method == Method.FULL:
            st.policies = PolicyView(placed.policy_bytes, placed.policy_nodes,
                                     placed.off_policy_bytes, sum(placed.bytes.values()),
                                     resident, now)
            return placed
        view = current(st.policies, now, resident, self.config.policy_interval)
        if view is None:
            return placed
        got = scaled(view, sum(placed.bytes.values()))
        return replace(placed, policy_bytes=got.policy_bytes, policy_nodes=got.policy_nodes,
                       off_policy_bytes=got.off_policy_bytes, policies_known=True,
                       weighted_nodes=dict(st.weighted_nodes))

    def known_nodes(self, memory: Mapping[tuple[int, Kind], int], where: str
                    ) -> dict[tuple[int, Kind], int]:
        """Return ``memory`` without nodes the topology does not have (counted as errors)."""
        known = self.topology().nodes
        out: dict[tuple[int, Kind], int] = {}
        bad = 0
        for (node, kind), b in memory.items():
            if node < 0 or node > MAX_NODE_ID or (known and node not in known):
                bad += 1
                continue
            out[(node, kind)] = b
        if bad:
            self.errors.parse("numa_maps", f"{where}: node not in topology", bad)
        return out

    # --- stage 4: cgroup and Kubernetes --------------------------------------------------
    def pod(self, files: ProcessFiles, groups: list[ProcCgroup] | None) -> Pod:
        """Return the process's memory cgroup and pod (the parsed cgroup file is appended
        to ``groups`` when given)."""
        cgroup_path, cg = self.cgroup(files)
        if cg is not None and groups is not None:
            groups.append(cg)
        if self.kube is None or cg is None:
            return Pod(cgroup_path)
        try:
            ref = self.kube.container(cg)
            kubelet = self.kube.assignment(ref) if ref is not None else None
        except Exception as exc:  # a bug here costs the process its pod, not its sample
            where = label_text(cg.v2_path or cg.path_for("memory") or "", 200)
            self.errors.bug("kubernetes", where, exc)
            return Pod(cgroup_path)
        return Pod(cgroup_path, ref, cgroup_key(cg) if ref is not None else None, kubelet)

    def cgroup(self, files: ProcessFiles) -> tuple[str | None, ProcCgroup | None]:
        """Return the process's memory cgroup path (None with the cgroup collector off) and
        its parsed cgroup file (None when neither the cgroup collector nor the Kubernetes
        look-ups want it, or the file is unreadable)."""
        wanted = self.config.enabled("cgroup")
        if not wanted and self.kube is None:
            return None, None
        cg = read_cgroup(files, self.errors)
        if cg is None:
            return None, None
        return (cg.path_for("memory") if wanted else None), cg

    # --- stage 5: home -------------------------------------------------------------------
    def texts(self, cand: Candidate) -> tuple[str, ...]:
        """Return the texts config pins match: comm, and the command line when a pin is
        configured."""
        comm = cand.stat.comm if cand.stat is not None else ""
        if self.config.home_pins or self.config.accelerator_pins:
            return texts(cand.files, comm)
        return (comm,)

    def accelerators(self, cand: Candidate, found: tuple[str, ...],
                     deadline: Deadline = NEVER) -> tuple[AcceleratorUse, ...]:
        """Return the accelerators the process uses (none with the collector off); raises
        Gone, or Expired past ``deadline``; other failed reads are counted by the map."""
        if not self.config.enabled("accelerator"):
            return ()
        return self.accel.uses(cand.files, found, deadline)

    def homing(self, cand: Candidate, system: SystemSample, threads: Threads,
               placed: Placement, uses: tuple[AcceleratorUse, ...],
               kubelet: Assignment | None, found: tuple[str, ...]) -> Homing:
        """Return the process's home and locality, from its threads, affinity, config pins,
        accelerators and kubelet assignment."""
        topo = system.topology
        allowed = cand.status.cpus_allowed
        affinity = topo.nodes_of_cpus(allowed) if allowed else None
        if affinity is not None:
            # status shows the leader's affinity only; a node a thread ran on is allowed too
            affinity = affinity | frozenset(threads.by_node)
        accel_nodes = accelerator_cpu_nodes(uses, topo)
        host = self.host(system)
        pinned = pinned_home(self.config, found)
        escapes = self.audit(cand.pid, threads.places, topo, pinned, kubelet)
        home = home_for(threads.weights, affinity, pinned,
                        accel_nodes, kubelet_home(kubelet),
                        host.cpu_nodes if host is not None else topo.cpu_nodes(),
                        binding_nodes=escapes.nodes if escapes is not None else None)
        node_bytes = fold_nodes(placed.bytes)
        return Homing(home, locality(node_bytes, home), uses, affinity, node_bytes, escapes)

    def audit(self, pid: int, places: Mapping[int, ThreadCpus], topo: Topology,
              config_nodes: frozenset[int] | None, kubelet: Assignment | None
              ) -> ThreadAudit | None:
        """Return the binding as intended and the threads outside it (None with the binding
        collector off)."""
        if not self.config.enabled("binding"):
            return None
        node_of_cpu = topo.node_of_cpu()
        kube_cpus = None
        if kubelet is not None:
            kube_cpus = kubelet.cpus or (
                frozenset(c for c, n in node_of_cpu.items() if n in kubelet.memory_nodes)
                if kubelet.memory_nodes else None)
        return audit(places, pid, node_of_cpu, config_nodes=config_nodes,
                     kubelet_cpus=kube_cpus)

    # --- stage 6: binding ----------------------------------------------------------------
    def binding(self, cand: Candidate, system: SystemSample, placed: Placement,
                homing: Homing, threads: Threads, kubelet: Assignment | None
                ) -> Binding | None:
        """Return the binding analysis, with the kubelet's mismatches (None with the
        binding collector off)."""
        if not self.config.enabled("binding"):
            return None
        topo = system.topology
        thread_nodes = frozenset(threads.by_node)
        binding = analyse(
            online=frozenset(topo.nodes),
            memory_nodes=system.memory_nodes,
            cpu_nodes_online=topo.cpu_nodes(),
            policy_nodes=placed.policy_nodes if placed.policies_known else None,
            mems_allowed=cand.status.mems_allowed,
            affinity_nodes=homing.affinity,
            thread_nodes=thread_nodes,
            accelerator_nodes=frozenset(u.node for u in homing.accelerators if u.node >= 0),
            balancing_mode=system.balancing_mode,
            off_policy_bytes=placed.off_policy_bytes,
        )
        mismatches = dict(binding.mismatches)
        if homing.audit is not None:
            mismatches["threads_outside_binding"] = homing.audit.outside > 0
        if kubelet is None:
            return replace(binding, mismatches=mismatches)
        mismatches.update(kubelet_mismatches(kubelet, homing.node_bytes, thread_nodes))
        return replace(binding, mismatches=mismatches)

    def interleave_weights(self, system: SystemSample) -> Mapping[int, int] | None:
        """Return the weighted-interleave node weights a sample's deviation is computed
        from (None with the binding collector off or without weights)."""
        wi = system.weighted_interleave
        if not self.config.enabled("binding") or wi is None:
            return None
        return wi.weights

    # --- stage 7: tiers, accessors, faults -----------------------------------------------
    def host(self, system: SystemSample) -> HostTiers | None:
        """Return the host's tier facts for per-process views (None without them), built
        once per system tiers value and config."""
        tiers = system.tiers
        if tiers is None:
            return None
        cached = self._host
        if cached is None or cached[0] is not tiers or cached[1] is not self.config:
            cached = (tiers, self.config,
                      tiers.host(system.topology, self.accelerator_memory()))
            self._host = cached
        return cached[2]

    def accelerator_memory(self) -> dict[str, frozenset[int]]:
        """Return each accelerator's own memory nodes by PCI address: what the NVIDIA
        driver shows online (``numa_status``), with the config file's ``memory_nodes``
        overriding it per address (malformed driver lines are counted)."""
        found, bad = nvidia_memory_nodes(self.proc.root)
        if bad:
            self.errors.parse("nvidia_numa_status",
                              f"{self.proc.root}/driver/nvidia/gpus/*/numa_status", bad)
        return {**found, **self.config.accelerator_memory()}

    def tiers(self, system: SystemSample, homing: Homing, status: PidStatus,
              threads: Threads) -> ProcessTiers | None:
        """Return the process's tiers view (None with the tiers collector off); each
        thread's faults are judged against its own node too."""
        host = self.host(system)
        if host is None or not self.config.enabled("tiers"):
            return None
        node_of_cpu = system.topology.node_of_cpu()
        readings = threads.readings or ()
        own = [(t.faults, thread_node(threads.places.get(t.tid)
                                      or ThreadCpus(t.tid, None, t.processor), node_of_cpu))
               for t in readings if t.faults is not None]
        return process_tiers(homing.node_bytes, homing.home.nodes, host,
                             (u.pci_address for u in homing.accelerators),
                             status.cpus_allowed, status.mems_allowed,
                             (t.faults for t in readings), own)

    # --- stage 8: drift ------------------------------------------------------------------
    def drift(self, st: ProcessState, who: Identity, homing: Homing, now: ScanTime,
              placed: Placement, host_migrated: int | None, cand: Candidate,
              own_migrated: int | None = None, host_split: bool = False) -> Drift | None:
        """Return the process's drift after this read (None with the drift collector off):
        a full read's movement from its bytes per node, a sampled read's from the pages it
        followed, both gated on the migration counter ``host_migrated`` (``host_split``: it
        has balancing's part taken out and ``own_migrated`` added, the form a re-read of it
        keeps)."""
        if not self.config.enabled("drift"):
            return None
        age = (now.steady - st.program_start(who.start_time, now.steady)
               if self.boot_time() is not None else None)
        est = placed.estimate
        return st.drift.observe(self.table.rule, age, who.rss_bytes, homing.node_bytes,
                                homing.locality.remote_ratio, host_migrated=host_migrated,
                                moved=est.moved if est is not None and not placed.kept
                                else None,
                                exact=est is None, page_size=PAGE_SIZE,
                                own_migrated=own_migrated,
                                faults=partial(self.faults_through, cand, st),
                                refresh=partial(self.migration_evidence_now, host_split,
                                                own_migrated))

    def faults_through(self, cand: Candidate, st: ProcessState) -> int | None:
        """Return the faults the process took from the start of its previous read to now
        (its stat read again; None where unknown, or where none and its resident sizes
        changed from then to this read's start: pages left or came without a fault of its
        own, so none says nothing)."""
        before = st.counters
        if before is None or before.faults is None:
            return None
        try:
            after = read_stat(cand.files, self.errors)
        except SourceError:
            return None
        if after is None or after.faults < before.faults:
            return None
        if after.faults == before.faults and before.sizes != process_counters(cand, None).sizes:
            return None
        return after.faults - before.faults

    def migration_evidence_now(self, split: bool, own_migrated: int | None) -> int | None:
        """Return the counter a process's movement is bounded by (``migration_evidence``),
        from vmstat read now and the process's own balancing migrations ``own_migrated``,
        in the form the scan's reading had (``split``: with balancing's part taken out);
        None where vmstat is unreadable or malformed (the scan's own reading of the file
        reports that)."""
        try:
            parsed = parse_vmstat(self.proc.vmstat())
        except SourceError:
            return None
        if parsed.error_count:
            return None
        balancing = parsed.values.get(HOST_BALANCING_MIGRATION) if split else None
        if split and balancing is None:
            return None  # no longer comparable with the scan's reading
        return migration_evidence(host_migrated_pages(parsed.values), balancing,
                                  own_migrated if split else None)

    # --- the stages together -------------------------------------------------------------
    def read(self, cand: Candidate, system: SystemSample, plan: Plan | None = None,
             deadline: Deadline = NEVER, now: ScanTime | None = None,
             groups: list[ProcCgroup] | None = None) -> ProcessSample | None:
        """Return the sample of one process (None when its stat is malformed), assembled
        from the values of its stages; the process's state records the read.

        Raises Gone/Denied/SourceError from the files, Expired past ``deadline`` (the
        process counts one more abandoned read). The parsed cgroup file is appended to
        ``groups`` when given.
        """
        t0 = self.clock()
        now = ScanTime.unanchored(self.wall(), t0) if now is None else now
        who = self.identity(cand)
        if who is None:
            return None
        st = self.table.get(cand.key)
        host = system.change_counters
        host_migrated = (host.migrated if host is not None
                         else host_migrated_pages(system.vmstat))
        counters = process_counters(cand, host)
        judged = judge(st.counters, counters)
        try:
            threads = self.threads(cand.files, st, deadline)
            # the bound of this process's movement: the host's migrations but balancing's,
            # and balancing's of its own threads' hinting faults (docs/movement.md)
            migrated = migration_evidence(
                host_migrated, host.balancing_migrated if host is not None else None,
                threads.pages_migrated)
            placed = self.placement(cand, st, plan, deadline, t0, now.mono, migrated,
                                    judged)
            found = self.texts(cand)
            uses = self.accelerators(cand, found, deadline)
        except Expired:
            st.abandoned += 1
            raise
        pod = self.pod(cand.files, groups)
        homing = self.homing(cand, system, threads, placed, uses, pod.kubelet, found)
        binding = self.binding(cand, system, placed, homing, threads, pod.kubelet)
        tiers = self.tiers(system, homing, cand.status, threads)
        drift = self.drift(st, who, homing, now, placed, migrated, cand,
                           threads.pages_migrated,
                           host_split=(host is not None and host.balancing_migrated is not None
                                       and threads.pages_migrated is not None))
        st.counters = counters
        st.reads += 1
        st.abandoned = 0
        next_due = plan.next_due if plan is not None else None
        timing = Timing(self.clock() - t0, now.wall,
                        now.wall_of(next_due) if next_due is not None else now.wall,
                        plan, st.costs)
        sample = assemble(who, threads, placed, pod, homing, binding, tiers, drift, timing,
                          self.interleave_weights(system))
        if next_due is not None:
            st.costs = replace(st.costs, next_due=next_due)
        st.last = sample
        return sample

    def kept(self, cand: Candidate, next_scan: float | None = None) -> ProcessSample | None:
        """Return the process's last sample to serve again (not read this scan; None when
        there is none), with its next planned read at wall time ``next_scan`` when given."""
        st = self.table.peek(cand.key)
        if st is None or st.last is None:
            return None
        if next_scan is not None:
            st.last = replace(st.last, next_scan_timestamp=next_scan)
        return st.last
