"""One process read in stages, each with one job:
threads → placement → home → binding → drift.

:class:`ProcessReader` is what a scan runs for each selected process and what ``inspect``
runs for one. Everything kept between reads of a process lives in its
:class:`~numa_exporter.model.process_state.ProcessState`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from numa_exporter.config import Config
from numa_exporter.model.accessors import HostTiers, ProcessTiers, process_tiers
from numa_exporter.model.binding import Binding, analyse
from numa_exporter.model.cadence import Plan, record_hold
from numa_exporter.model.clock import ScanTime
from numa_exporter.model.counters import ThreadSum, advance
from numa_exporter.model.home import Home, home_for, locality
from numa_exporter.model.kubernetes import (
    Assignment,
    ContainerRef,
    kubelet_home,
    kubelet_mismatches,
)
from numa_exporter.model.process_state import ProcessState, ProcessTable
from numa_exporter.model.snapshot import AcceleratorUse, ProcessSample, SystemSample
from numa_exporter.model.thread_binding import ThreadAudit, ThreadCpus, audit, thread_node
from numa_exporter.model.threads import ThreadReading
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.numa_maps import Kind, NumaMaps, fold_nodes
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.parsers.proc_cgroup import ProcCgroup
from numa_exporter.parsers.text import label_text
from numa_exporter.readers.accelerator_use import AcceleratorMap, pinned_home
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.kubernetes import KubernetesScan, cgroup_key
from numa_exporter.readers.page_sizes import probe_page_sizes
from numa_exporter.readers.process_files import (
    Bound,
    read_boot_time,
    read_cgroup,
    read_numa_maps,
    read_stat,
)
from numa_exporter.readers.threads import (
    SchedGate,
    Unfinished,
    read_affinities,
    read_threads,
)
from numa_exporter.scan.select import Candidate, texts
from numa_exporter.sources.cpu_clock import ProcessCpuClock, same_pid_namespace
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.process_fds import Stopped
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

log = structlog.get_logger("numa_exporter.scan.process")

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
DEADLINE_CHECK_EVERY = 1  # numa_maps reads (a page of text each) between looks at the clock


class PlacementReader(Protocol):
    """Reads where a process's resident pages are: the full numa_maps walk by default.

    ``bound`` wraps the chunks of the read; it raises Abandoned at the scan's deadline, so
    every reader (the default and any other) is given up there.
    """

    def __call__(self, files: ProcessFiles, bound: Bound) -> NumaMaps:
        """Return the per-node, per-kind totals of the process."""
        ...


class SampledPlacement(Protocol):
    """What a sampled reader returns (``readers.sampled_placement`` returns the model's
    ``PlacementEstimate``): estimated bytes per (node, kind) and their precision."""

    @property
    def bytes(self) -> Mapping[tuple[int, Kind], int]:
        """Return estimated resident bytes per (node, kind)."""
        ...

    @property
    def samples(self) -> int:
        """Return the number of pages queried."""
        ...

    @property
    def parse_errors(self) -> int:
        """Return the number of malformed maps lines met."""
        ...

    @property
    def largest_mapping(self) -> int:
        """Return the bytes of the largest mapping that can hold pages (from maps)."""
        ...

    @property
    def mappings(self) -> int:
        """Return the number of maps lines read."""
        ...

    @property
    def unsampled_bytes(self) -> int:
        """Return the resident bytes status counts that the estimate could not place."""
        ...

    def remote_ratio_stderr(self, home: frozenset[int]) -> float:
        """Return the standard error of the remote ratio against ``home``."""
        ...


class SampledReader(Protocol):
    """Estimates a process's placement without walking its page tables."""

    def __call__(self, files: ProcessFiles, status: PidStatus, *,
                 max_queries: int | None = None,
                 between: Callable[[], None] | None = None) -> SampledPlacement:
        """Return the estimate; raise Gone/Denied/SourceError like a file read.

        At most ``max_queries`` pages are queried; ``between`` is called before each batch
        of queries and raises Abandoned at the scan's deadline.
        """
        ...


class Abandoned(Exception):
    """A read was given up at the scan deadline (or because the exporter is stopping)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a process's pages are, by the method that found out."""

    bytes: dict[tuple[int, Kind], int]
    policy_bytes: dict[str, int]
    policy_nodes: dict[tuple[str, frozenset[int]], int]
    off_policy_bytes: int
    method: str
    estimate: SampledPlacement | None = None
    mappings: int = 0  # mappings read (numa_maps lines)


def unchanged(st: ProcessState, clock: int | None) -> bool:
    """Return whether the process's last complete thread reading still stands: its CPU
    clock has not moved since just before that reading (no thread was on a CPU since, so
    none started, ran, moved or exited) and no thread was then waiting for a CPU (a queued
    thread can be moved to another CPU's queue without running)."""
    return (clock is not None and clock == st.threads_clock and bool(st.threads)
            and not st.threads_partial and not any(t.runnable for t in st.threads.values()))


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
        self.placement = placement
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

    # --- stage 1: threads ----------------------------------------------------------------
    def threads(self, files: ProcessFiles, st: ProcessState,
                stop: Callable[[], bool] | None = None
                ) -> tuple[list[ThreadReading] | None, list[tuple[int, float]], dict[int, int],
                           dict[int, ThreadCpus]]:
        """Return the thread readings (None if unlisted), home weights, threads per node
        and each thread's allowed and last CPU.

        Each thread's mask is read every time, whatever the process's CPU clock says (it
        changes while the thread sleeps), and a thread is counted on the node its mask
        now confines it to (:func:`~numa_exporter.model.thread_binding.thread_node`).
        A thread's weight is its CPU time since the previous scan; a thread that started
        since then is weighted by all of its CPU time (it all happened since). Raises
        Abandoned when ``stop`` says so; the threads read by then are kept and the next
        read goes on from there.
        """
        self.gate.faults = self.config.enabled("tiers")
        clock = self.process_clock(files.pid)
        resumed = bool(st.threads_partial)
        try:
            threads: list[ThreadReading] | None
            if unchanged(st, clock):
                threads = list(st.threads.values())  # no thread was on a CPU since
            else:
                threads = read_threads(files, st.threads, self.errors.parse, self.gate,
                                       stop=stop, done=st.threads_partial)
        except Unfinished as part:
            st.threads_partial = part.readings
            st.threads_clock = None
            raise Abandoned from None
        except Gone:
            raise
        except SourceError as err:
            self.errors.read(err)
            threads = None
        # a resumed pass mixes readings from before this clock reading: not a baseline
        st.threads_clock = clock if threads is not None and not resumed else None
        st.threads_partial = {}
        node_of_cpu = self.topology().node_of_cpu()
        masks = self.affinities(files, threads)
        places = {t.tid: ThreadCpus(t.tid, masks.get(t.tid), t.processor)
                  for t in threads or ()}
        by_node: dict[int, int] = {}
        weights: list[tuple[int, float]] = []
        for t in threads or ():
            node = thread_node(places[t.tid], node_of_cpu)
            if node is None:
                continue
            by_node[node] = by_node.get(node, 0) + 1
            prev = st.threads.get(t.tid)
            delta = t.ticks - prev.ticks if prev is not None and t.ticks >= prev.ticks else t.ticks
            weights.append((node, float(delta)))
        if not any(w > 0 for _, w in weights):  # nothing ran: every thread counts once
            weights = [(n, 1.0) for n, _ in weights]
        if self.gate.refused and self.errors.once("note", "sched-legacy"):
            log.warning("this kernel prints the 3.13-4.1 NUMA form in sched and resets "
                        "numa_pages_migrated on every read; sched is not read again (no "
                        "hinting faults or migrated pages per process)")
        if threads is not None:
            st.threads = {t.tid: t for t in threads}
            now = {t.tid: t.pages_migrated for t in threads if t.pages_migrated is not None}
            if now or st.migrated is not None:
                st.migrated = advance(st.migrated or ThreadSum(), now,
                                      frozenset(t.tid for t in threads))
        return threads, weights, by_node, places

    def affinities(self, files: ProcessFiles, threads: list[ThreadReading] | None
                   ) -> dict[int, frozenset[int] | None]:
        """Return the allowed CPUs of the threads read, by tid ({} without threads or
        with the binding collector off; a read error is counted)."""
        if not threads or not self.config.enabled("binding"):
            return {}
        try:
            return read_affinities(files, (t.tid for t in threads), self.affinity_syscall,
                                   self.errors.parse)
        except Gone:
            raise
        except SourceError as err:
            self.errors.read(err)
            return {}

    def audit(self, pid: int, places: Mapping[int, ThreadCpus], topo: Topology,
              config_nodes: frozenset[int] | None, kubelet: Assignment | None
              ) -> ThreadAudit | None:
        """Return the binding and the threads outside it (None with the binding collector
        off)."""
        if not self.config.enabled("binding"):
            return None
        kube_cpus = None
        if kubelet is not None:
            kube_cpus = kubelet.cpus or (
                frozenset(c for c, n in topo.node_of_cpu().items()
                          if n in kubelet.memory_nodes) if kubelet.memory_nodes else None)
        return audit(places, pid, topo.node_of_cpu(), config_nodes=config_nodes,
                     kubelet_cpus=kube_cpus)

    def process_clock(self, pid: int) -> int | None:
        """Return process ``pid``'s CPU clock in ns (None: unknown; an error is counted)."""
        try:
            return self.cpu_clock(pid)
        except SourceError as err:
            self.errors.read(err)
            return None

    # --- stage 2: placement --------------------------------------------------------------
    def over(self, deadline: float | None, stop: threading.Event | None) -> Callable[[], bool]:
        """Return a test that says True past ``deadline`` or once ``stop`` is set."""
        clock = self.clock

        def over() -> bool:
            return (stop is not None and stop.is_set()) or (
                deadline is not None and clock() >= deadline)

        return over

    def past(self, deadline: float | None, stop: threading.Event | None) -> Callable[[], None]:
        """Return a check that raises Abandoned past ``deadline`` or once ``stop`` is set."""
        over = self.over(deadline, stop)

        def check() -> None:
            if over():
                raise Abandoned

        return check

    def bounded(self, deadline: float | None, stop: threading.Event | None,
                hold: list[float] | None = None) -> Bound:
        """Return a Bound that raises Abandoned past ``deadline`` or once ``stop`` is set.

        With ``hold`` given, its first item is raised to the longest CPU time one chunk took
        to arrive: one ``read()`` of a seq_file, so one hold of the target's mmap lock.
        """
        check = self.past(deadline, stop)
        cpu = self.cpu

        def bound(chunks: Iterable[bytes]) -> Iterator[bytes]:
            it = iter(chunks)
            i = 0
            while True:
                if i % DEADLINE_CHECK_EVERY == 0:
                    check()
                i += 1
                if hold is None:
                    chunk = next(it, None)
                else:
                    t = cpu()
                    chunk = next(it, None)
                    hold[0] = max(hold[0], cpu() - t)
                if chunk is None:
                    return
                yield chunk

        return bound

    def probe_pages(self, cand: Candidate, now: float, deadline: float | None = None,
                    stop: threading.Event | None = None) -> bool:
        """Probe the page sizes of the process's largest mappings unless a probe still
        stands; return whether its costs changed (the plan is then made again).

        Raises Gone/Denied/SourceError of maps and pagemap like a read, Abandoned past
        ``deadline``; page frames that cannot be seen are said once and count as small.
        """
        st = self.table.get(cand.key)
        shape = st.costs.pages
        if shape is not None and shape.fresh(cand.resident, now):
            return False
        shape, problem = probe_page_sizes(cand.files, self.proc, cand.resident, now,
                                          page_size=PAGE_SIZE,
                                          check=self.past(deadline, stop))
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

    def place(self, cand: Candidate, st: ProcessState, method: str, bound: Bound,
              max_queries: int | None = None, between: Callable[[], None] | None = None
              ) -> Placement:
        """Return where the process's pages are, by the planned method.

        A sampled estimate carries the memory policies of the last full read, if any (only
        numa_maps shows policies; they change only with mbind/set_mempolicy).
        """
        files = cand.files
        if method == "sampled" and self.sampled is not None:
            est = self.sampled(files, cand.status, max_queries=max_queries, between=between)
            if est.parse_errors:
                self.errors.parse("maps", f"{files.path}/maps", est.parse_errors)
            memory = self.known_nodes(est.bytes, f"{files.path}/maps")
            return Placement(memory, dict(st.policy_bytes), dict(st.policy_nodes), 0,
                             "sampled", est)
        maps = self.placement(files, bound)
        if maps.error_count:
            first = maps.errors[0] if maps.errors else None
            self.errors.parse("numa_maps", f"{files.path}/numa_maps", maps.error_count,
                              line=first.lineno if first else None,
                              reason=first.reason if first else None)
        memory = self.known_nodes(maps.bytes, f"{files.path}/numa_maps")
        st.policy_bytes, st.policy_nodes = dict(maps.policy_bytes), dict(maps.policy_nodes)
        return Placement(memory, maps.policy_bytes, maps.policy_nodes,
                         maps.off_policy_bytes, "full", mappings=maps.mappings)

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

    # --- stage 3: home -------------------------------------------------------------------
    def accelerators(self, cand: Candidate, found: tuple[str, ...],
                     stop: Callable[[], bool] | None = None) -> tuple[AcceleratorUse, ...]:
        """Return the accelerators the process uses (none with the collector off); raises
        Abandoned when ``stop`` ends its fd scan."""
        if not self.config.enabled("accelerator"):
            return ()
        try:
            return self.accel.uses(cand.pid, found, stop, cand.files.via)
        except Stopped:
            raise Abandoned from None
        except Gone:
            raise
        except SourceError as err:
            self.errors.read(err)
            return ()

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

    def kubernetes(self, cg: ProcCgroup | None
                   ) -> tuple[ContainerRef | None, Assignment | None]:
        """Return the pod container of cgroup ``cg`` and the kubelet's assignment of it
        (None, None outside a pod or with the collector off)."""
        if self.kube is None or cg is None:
            return None, None
        try:
            ref = self.kube.container(cg)
            return ref, (self.kube.assignment(ref) if ref is not None else None)
        except Exception as exc:  # a bug here costs the process its pod, not its sample
            where = label_text(cg.v2_path or cg.path_for("memory") or "", 200)
            self.errors.bug("kubernetes", where, exc)
            return None, None

    # --- stage 4: binding ----------------------------------------------------------------
    def binding(self, cand: Candidate, system: SystemSample, pl: Placement,
                affinity: frozenset[int] | None, thread_nodes: frozenset[int],
                accel_nodes: frozenset[int]) -> Binding | None:
        """Return the binding analysis (None with the binding collector off)."""
        if not self.config.enabled("binding"):
            return None
        topo = system.topology
        return analyse(
            online=frozenset(topo.nodes),
            memory_nodes=system.memory_nodes,
            cpu_nodes_online=topo.cpu_nodes(),
            policy_nodes=pl.policy_nodes,
            mems_allowed=cand.status.mems_allowed,
            affinity_nodes=affinity,
            thread_nodes=thread_nodes,
            accelerator_nodes=accel_nodes,
            balancing_mode=system.balancing_mode,
            off_policy_bytes=pl.off_policy_bytes,
        )

    # --- stage 4b: tiers, accessors, faults ------------------------------------------------
    def host(self, system: SystemSample) -> HostTiers | None:
        """Return the host's tier facts for per-process views (None without them), built
        once per system tiers value and config."""
        tiers = system.tiers
        if tiers is None:
            return None
        cached = self._host
        if cached is None or cached[0] is not tiers or cached[1] is not self.config:
            cached = (tiers, self.config,
                      tiers.host(system.topology, self.config.accelerator_memory()))
            self._host = cached
        return cached[2]

    def tiers(self, system: SystemSample, node_bytes: Mapping[int, int], home: Home,
              uses: tuple[AcceleratorUse, ...], status: PidStatus,
              threads: list[ThreadReading] | None,
              places: Mapping[int, ThreadCpus] | None = None) -> ProcessTiers | None:
        """Return the process's tiers view (None with the tiers collector off)."""
        host = self.host(system)
        if host is None or not self.config.enabled("tiers"):
            return None
        node_of_cpu = system.topology.node_of_cpu()
        places = places or {}
        return process_tiers(node_bytes, home.nodes, host, (u.pci_address for u in uses),
                             status.cpus_allowed, status.mems_allowed,
                             (t.faults for t in threads or ()),
                             [(t.faults, thread_node(places.get(t.tid) or ThreadCpus(
                                 t.tid, None, t.processor), node_of_cpu))
                              for t in threads or () if t.faults is not None])

    # --- stage 5: drift needs the boot time ----------------------------------------------
    def boot_time(self) -> int | None:
        """Return the boot time (None while /proc/stat cannot be read: retried next time)."""
        if self._btime is None:
            self._btime = read_boot_time(self.proc, self.errors)
        return self._btime

    # --- the stages together -------------------------------------------------------------
    def read(self, cand: Candidate, system: SystemSample, plan_: Plan | None = None,
             deadline: float | None = None, now: ScanTime | None = None,
             stop: threading.Event | None = None, groups: list[ProcCgroup] | None = None
             ) -> ProcessSample | None:
        """Return the sample of one process (None when its stat is malformed).

        Raises Gone/Denied/SourceError from the files, Abandoned past ``deadline`` or once
        ``stop`` is set. The parsed cgroup file is appended to ``groups`` when given.
        """
        files = cand.files
        t0 = self.clock()
        now = ScanTime.unanchored(self.wall(), t0) if now is None else now
        if cand.stat is None:
            cand.stat = read_stat(files, self.errors)
            if cand.stat is None:
                return None
        stat = cand.stat
        st = self.table.get(cand.key)
        method = plan_.method if plan_ is not None else "full"
        threads, weights, by_node, places = self.threads(files, st, self.over(deadline, stop))
        hold = [0.0]
        c0 = self.cpu()
        try:
            pl = self.place(cand, st, method, self.bounded(deadline, stop, hold),
                            plan_.max_queries if plan_ is not None else None,
                            self.past(deadline, stop))
        except Denied:
            st.denied = True
            raise
        cpu = self.cpu() - c0
        elapsed = self.clock() - t0
        if pl.method == "full":
            st.full_seconds_per_byte = elapsed / max(cand.resident, 1)
            st.last_full = now.mono
            st.costs = replace(record_hold(st.costs, hold[0]), full_cpu=cpu,
                               full_resident=cand.resident, mappings=pl.mappings)
        elif pl.estimate is not None:
            st.costs = replace(st.costs, sampled_cpu=cpu, sampled_resident=cand.resident,
                               sampled_queries=pl.estimate.samples,
                               largest_mapping=pl.estimate.largest_mapping,
                               maps_resident=cand.resident,
                               mappings=pl.estimate.mappings)
        topo = system.topology
        allowed = cand.status.cpus_allowed
        affinity = topo.nodes_of_cpus(allowed) if allowed else None
        if affinity is not None:
            # status shows the leader's affinity only; a node a thread ran on is allowed too
            affinity = affinity | frozenset(by_node)
        cfg = self.config
        found: tuple[str, ...] = (stat.comm,)
        if cfg.home_pins or cfg.accelerator_pins:
            found = texts(files, stat.comm)
        uses = self.accelerators(cand, found, self.over(deadline, stop))
        accel_nodes = frozenset(u.node for u in uses if u.node >= 0)
        cgroup_path, cg = self.cgroup(files)
        if cg is not None and groups is not None:
            groups.append(cg)
        pod, kubelet = self.kubernetes(cg)
        host = self.host(system)
        pinned = pinned_home(cfg, found)
        escapes = self.audit(cand.pid, places, topo, pinned, kubelet)
        home: Home = home_for(weights, affinity, pinned, accel_nodes,
                              kubelet_home(kubelet),
                              host.cpu_nodes if host is not None else topo.cpu_nodes(),
                              binding_nodes=escapes.nodes if escapes is not None else None)
        node_bytes = fold_nodes(pl.bytes)
        loc = locality(node_bytes, home)
        binding = self.binding(cand, system, pl, affinity, frozenset(by_node), accel_nodes)
        mismatches = dict(binding.mismatches) if binding else {}
        if binding is not None and escapes is not None:
            mismatches["threads_outside_binding"] = escapes.outside > 0
        if binding is not None and kubelet is not None:
            mismatches.update(kubelet_mismatches(kubelet, node_bytes, frozenset(by_node)))
        tiers = self.tiers(system, node_bytes, home, uses, cand.status, threads, places)
        btime = self.boot_time()
        start_time = (btime or 0) + stat.starttime / CLK_TCK
        drift = None
        if cfg.enabled("drift"):
            age = now.steady - start_time if btime is not None else None
            drift = st.drift.observe(self.table.rule, age, cand.status.vm_rss or 0,
                                     node_bytes, loc.remote_ratio)
        st.reads += 1
        st.abandoned = 0
        est = pl.estimate
        return ProcessSample(
            pid=cand.pid,
            comm=stat.comm or cand.status.name,
            start_time=start_time,
            rss_bytes=cand.status.vm_rss or 0,
            memory=pl.bytes,
            policy_bytes=pl.policy_bytes,
            policy_nodes=pl.policy_nodes,
            threads_by_node=by_node,
            home=home,
            locality=loc,
            pages_migrated=st.migrated.total if st.migrated is not None else None,
            scan_seconds=self.clock() - t0,
            cpus_allowed=cand.status.cpus_allowed,
            mems_allowed=cand.status.mems_allowed,
            cgroup=cgroup_path,
            accelerators=uses,
            memory_bound=binding.memory_bound if binding else None,
            cpus_bound=binding.cpus_bound if binding else None,
            mismatches=mismatches,
            drift=drift,
            last_scan_timestamp=now.wall,
            method=pl.method,
            samples=est.samples if est is not None else None,
            remote_ratio_stderr=est.remote_ratio_stderr(home.nodes) if est is not None
            else None,
            next_scan_timestamp=(now.wall_of(plan_.next_due) if plan_ is not None
                                 else now.wall),
            full_read_cpu=st.costs.full_cpu,
            sampled_read_cpu=st.costs.sampled_cpu,
            hold_seconds=plan_.hold_seconds if plan_ is not None else st.costs.hold,
            placement_reason=plan_.reason if plan_ is not None else None,
            unsampled_bytes=est.unsampled_bytes if est is not None else None,
            kubernetes=pod,
            kubernetes_cgroup=cgroup_key(cg) if pod is not None and cg is not None else None,
            kubelet=kubelet,
            tiers=tiers,
            thread_audit=escapes,
        )
