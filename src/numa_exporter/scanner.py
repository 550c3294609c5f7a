"""One scan: select processes, read them under a time budget, and build a Snapshot.

A process read runs in stages, each with one job: threads → placement (full numa_maps read
or sampled estimate, as the cadence planner decides) → home → binding → drift. Everything
kept between scans about a process lives in its :class:`ProcessState`, keyed by
:class:`ProcessKey` (pid + start time).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import structlog

from numa_exporter.cgroups import read_cgroups
from numa_exporter.config import Config
from numa_exporter.errors import ErrorReporter
from numa_exporter.model.binding import Binding, analyse
from numa_exporter.model.cadence import CadencePolicy, Plan, plan
from numa_exporter.model.counters import ThreadSum, advance
from numa_exporter.model.drift import WarmupRule
from numa_exporter.model.home import Home, home_for, locality
from numa_exporter.model.process_state import ProcessKey, ProcessState, ProcessTable
from numa_exporter.model.snapshot import (
    AcceleratorUse,
    CgroupSample,
    ExporterStats,
    ProcessSample,
    Snapshot,
    SystemSample,
)
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.numa_maps import Kind, NumaMaps, parse_numa_maps
from numa_exporter.parsers.pid_stat import PidStat, parse_pid_stat
from numa_exporter.parsers.pid_status import (
    PidStatus,
    parse_pid_status,
    parse_pid_status_resident,
)
from numa_exporter.parsers.proc_cgroup import ProcCgroup, parse_proc_cgroup
from numa_exporter.parsers.stat import parse_btime
from numa_exporter.selfmetrics import SelfMetrics
from numa_exporter.sources.accelerators import AcceleratorSource
from numa_exporter.sources.cgroupfs import CgroupFS
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS
from numa_exporter.sources.sysfs import NodeSysFS
from numa_exporter.sources.threads import ThreadReading, read_threads
from numa_exporter.system import read_system, read_topology
from numa_exporter.usage import AcceleratorMap, pinned_home

log = structlog.get_logger("numa_exporter.scanner")

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MAX_NODE_ID = 1023  # the kernel's MAX_NUMNODES is at most 1 << 10
DEADLINE_CHECK_EVERY = 1  # numa_maps reads (a page of text each) between looks at the clock
DENIED_HINT = ("grant CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (see deploy/systemd), or run "
               "as root; kernel.yama.ptrace_scope=3 denies even those")


class PlacementReader(Protocol):
    """Reads where a process's resident pages are; the full numa_maps walk by default."""

    def __call__(self, files: ProcessFiles) -> NumaMaps:
        """Return the per-node, per-kind totals of the process."""
        ...


class PlacementEstimate(Protocol):
    """What a sampled reader returns: estimated bytes per (node, kind) and their precision."""

    @property
    def bytes(self) -> Mapping[tuple[int, Kind], int]:
        """Return estimated resident bytes per (node, kind)."""
        ...

    @property
    def samples(self) -> int:
        """Return the number of pages queried."""
        ...

    def remote_ratio_stderr(self, home: frozenset[int]) -> float:
        """Return the standard error of the remote ratio against ``home``."""
        ...


class SampledReader(Protocol):
    """Estimates a process's placement without walking its page tables."""

    def __call__(self, files: ProcessFiles, status: PidStatus) -> PlacementEstimate:
        """Return the estimate; raise Gone/Denied/SourceError like a file read."""
        ...


def read_numa_maps(files: ProcessFiles) -> NumaMaps:
    """Return the totals of the process's numa_maps, streamed line by line."""
    return parse_numa_maps(files.numa_maps())


class Abandoned(Exception):
    """A read was given up at the scan deadline (or because the exporter is stopping)."""


Identity = tuple[int, int]  # (pid, starttime in ticks), kept for callers of older versions


@dataclass(slots=True)
class _Candidate:
    pid: int
    status: PidStatus
    files: ProcessFiles
    stat: PidStat | None = None

    @property
    def key(self) -> ProcessKey:
        return ProcessKey(self.pid, self.stat.starttime if self.stat else -1)

    @property
    def resident(self) -> int:
        # hugetlb pages are not in VmRSS: count them for the size threshold
        return (self.status.vm_rss or 0) + (self.status.hugetlb or 0)


@dataclass(frozen=True, slots=True)
class _Placement:
    bytes: dict[tuple[int, Kind], int]
    policy_bytes: dict[str, int]
    policy_nodes: dict[tuple[str, frozenset[int]], int]
    off_policy_bytes: int
    method: str
    estimate: PlacementEstimate | None = None


@dataclass(slots=True)
class ScanState:
    """What a scanner carries from one scan to the next besides the per-process table."""

    pending: list[int] = field(default_factory=list)
    scans: int = 0
    budget_skipped_total: int = 0
    self_metrics: SelfMetrics = field(default_factory=SelfMetrics)


class Scanner:
    """Runs scans; owns the per-process table and the error counts."""

    def __init__(
        self,
        config: Config,
        placement: PlacementReader = read_numa_maps,
        clock: Callable[[], float] = time.monotonic,
        procfs: ProcFS | None = None,
        accelerators: AcceleratorSource | None = None,
        sampled: SampledReader | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.errors = ErrorReporter()
        self.accel = AcceleratorMap(accelerators, config)
        self.cgroupfs = CgroupFS(config.roots.sysfs) if config.enabled("cgroup") else None
        self._groups: list[ProcCgroup] = []
        self.proc = procfs or ProcFS(config.roots.procfs)
        self.nodes = NodeSysFS(config.roots.sysfs)
        self.placement = placement
        self.sampled = sampled
        self.clock = clock
        self.wall = wall
        self.stop_event = threading.Event()
        self.state = ScanState()
        self.table = ProcessTable(WarmupRule(config.warmup_age, config.warmup_scans,
                                             config.warmup_rss_tolerance))
        self.topology = self.refresh_topology()
        self._btime: int | None = None

    # --- error bookkeeping (sinks for system.py / cgroups.py) --------------------------
    def parse_error(self, source: str, detail: str) -> None:
        """Count a malformed file or line and log it once per (source, detail)."""
        self.errors.parse(source, detail)

    def read_error(self, err: SourceError) -> None:
        """Count an unreadable file; gone logs at debug, denied and other errors log once."""
        self.errors.read(err)

    def refresh_topology(self) -> Topology:
        """Return the topology read anew from sysfs (start-up and hotplug)."""
        try:
            self.topology = read_topology(self.nodes, self.errors)
        except Exception as exc:  # a parser bug must not stop the exporter
            self.errors.bug("topology", str(self.nodes.root), exc)
            self.topology = getattr(self, "topology", None) or read_topology_empty()
        if self.config.enabled("accelerator"):
            self.accel.refresh()
        return self.topology

    # --- selection ---------------------------------------------------------------------
    @staticmethod
    def _texts(files: ProcessFiles, comm: str) -> tuple[str, str]:
        """Return (comm, cmdline) for matching patterns; cmdline is empty when unreadable."""
        cmdline = ""
        with contextlib.suppress(SourceError):
            cmdline = files.cmdline().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        return comm, cmdline

    def _matches(self, files: ProcessFiles, comm: str) -> bool:
        inc, exc = self.config.include, self.config.exclude
        if inc is None and exc is None:
            return True
        texts = self._texts(files, comm)
        if inc is not None and not any(inc.search(t) for t in texts if t):
            return False
        return not (exc is not None and any(exc.search(t) for t in texts if t))

    def _screen(self, pid: int, states: dict[str, int]) -> _Candidate | None:
        files = self.proc.process(pid)
        try:
            raw = files.status()
        except Gone:
            states["gone"] += 1
            return None
        except SourceError as err:
            self.read_error(err)
            states["denied" if isinstance(err, Denied) else "skipped"] += 1
            return None
        vm_rss, hugetlb = parse_pid_status_resident(raw)
        if vm_rss is not None and vm_rss + hugetlb < self.config.min_resident:
            states["skipped"] += 1  # the common case: decided from two lines
            return None
        status = parse_pid_status(raw)
        if status.error_count:
            self.parse_error("status", f"{files.path}/status")
        if status.vm_rss is None:  # kernel thread: no user memory
            return None
        cand = _Candidate(pid, status, files)
        if cand.resident < self.config.min_resident or not self._matches(files, status.name):
            states["skipped"] += 1
            return None
        return cand

    def _candidates(self, states: dict[str, int]) -> tuple[list[_Candidate], frozenset[int]]:
        out: list[_Candidate] = []
        pids = self.proc.pids()
        for pid in pids:
            try:
                cand = self._screen(pid, states)
            except Exception as exc:  # one bad file costs one process, never the scan
                self.errors.bug("status", f"{self.proc.root}/{pid}/status", exc)
                states["skipped"] += 1
                continue
            if cand is not None:
                out.append(cand)
        out.sort(key=lambda c: (-c.resident, c.pid))
        if self.config.top and len(out) > self.config.top:
            states["skipped"] += len(out) - self.config.top
            out = out[: self.config.top]
        # processes left over by the last scan's budget go first
        pending = {p: i for i, p in enumerate(self.state.pending)}
        out.sort(key=lambda c: (0, pending[c.pid]) if c.pid in pending else (1, 0))
        keyed: list[_Candidate] = []
        for cand in out:
            try:
                cand.stat = parse_pid_stat(cand.files.stat())
            except Gone:
                states["gone"] += 1
                continue
            except SourceError as err:
                self.read_error(err)
                states["skipped"] += 1
                continue
            if cand.stat is None:
                self.parse_error("stat", f"{cand.files.path}/stat")
                states["skipped"] += 1
                continue
            keyed.append(cand)
        return keyed, frozenset(pids)

    # --- stages of one process ---------------------------------------------------------
    def _boot_time(self) -> int | None:
        """Return the boot time (None while /proc/stat cannot be read: retried next time)."""
        if self._btime is None:
            try:
                self._btime = parse_btime(self.proc.stat())
            except SourceError as err:
                self.read_error(err)
            if self._btime is None:
                self.parse_error("stat", f"{self.proc.root}/stat")
        return self._btime

    def _threads(self, files: ProcessFiles, st: ProcessState
                 ) -> tuple[list[ThreadReading] | None, list[tuple[int, float]], dict[int, int]]:
        """Return the thread readings (None if unlisted), home weights and threads per node.

        A thread's weight is its CPU time since the previous scan; a thread that started
        since then is weighted by all of its CPU time (it all happened since).
        """
        try:
            threads: list[ThreadReading] | None = read_threads(files, st.threads,
                                                               self.parse_error)
        except Gone:
            raise
        except SourceError as err:
            self.read_error(err)
            threads = None
        node_of_cpu = self.topology.node_of_cpu()
        by_node: dict[int, int] = {}
        weights: list[tuple[int, float]] = []
        for t in threads or ():
            if t.processor is None or t.processor not in node_of_cpu:
                continue
            node = node_of_cpu[t.processor]
            by_node[node] = by_node.get(node, 0) + 1
            prev = st.threads.get(t.tid)
            delta = t.ticks - prev.ticks if prev is not None and t.ticks >= prev.ticks else t.ticks
            weights.append((node, float(delta)))
        if not any(w > 0 for _, w in weights):  # nothing ran: every thread counts once
            weights = [(n, 1.0) for n, _ in weights]
        if threads is not None:
            st.threads = {t.tid: t for t in threads}
            now = {t.tid: t.pages_migrated for t in threads if t.pages_migrated is not None}
            if now or st.migrated is not None:
                st.migrated = advance(st.migrated or ThreadSum(), now,
                                      frozenset(t.tid for t in threads))
        return threads, weights, by_node

    def _bounded(self, lines: Iterable[bytes], deadline: float | None) -> Iterator[bytes]:
        """Yield ``lines``, raising Abandoned past ``deadline`` or when the exporter stops."""
        clock, stop = self.clock, self.stop_event
        for i, line in enumerate(lines):
            if i % DEADLINE_CHECK_EVERY == 0 and (
                stop.is_set() or (deadline is not None and clock() >= deadline)
            ):
                raise Abandoned
            yield line

    def _placement(self, cand: _Candidate, st: ProcessState, method: str,
                   deadline: float | None) -> _Placement:
        """Return where the process's pages are, by the planned method.

        A sampled estimate carries the memory policies of the last full read, if any (only
        numa_maps shows policies; they change only with mbind/set_mempolicy).
        """
        files = cand.files
        if method == "sampled" and self.sampled is not None:
            est = self.sampled(files, cand.status)
            errs = getattr(est, "parse_errors", 0)
            if errs:
                self.errors.parse("maps", f"{files.path}/maps", errs)
            memory = self._known_nodes(est.bytes, f"{files.path}/maps")
            return _Placement(memory, dict(st.policy_bytes), dict(st.policy_nodes), 0,
                              "sampled", est)
        if self.placement is read_numa_maps:
            maps = parse_numa_maps(self._bounded(files.numa_maps(), deadline))
        else:
            maps = self.placement(files)
        if maps.error_count:
            first = maps.errors[0] if maps.errors else None
            self.errors.parse("numa_maps", f"{files.path}/numa_maps", maps.error_count,
                              line=first.lineno if first else None,
                              reason=first.reason if first else None)
        memory = self._known_nodes(maps.bytes, f"{files.path}/numa_maps")
        st.policy_bytes, st.policy_nodes = dict(maps.policy_bytes), dict(maps.policy_nodes)
        return _Placement(memory, maps.policy_bytes, maps.policy_nodes,
                          maps.off_policy_bytes, "full")

    def _known_nodes(self, memory: Mapping[tuple[int, Kind], int], where: str
                     ) -> dict[tuple[int, Kind], int]:
        """Return ``memory`` without nodes the topology does not have (counted as errors)."""
        known = self.topology.nodes
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

    def _accelerators(self, cand: _Candidate, texts: tuple[str, ...]
                      ) -> tuple[AcceleratorUse, ...]:
        if not self.config.enabled("accelerator"):
            return ()
        try:
            return self.accel.uses(cand.pid, texts)
        except Gone:
            raise
        except SourceError as err:
            self.read_error(err)
            return ()

    def _cgroup(self, files: ProcessFiles) -> str | None:
        if not self.config.enabled("cgroup"):
            return None
        try:
            cg = parse_proc_cgroup(files.cgroup())
        except Gone:
            raise
        except SourceError as err:
            self.read_error(err)
            return None
        if cg.error_count:
            self.parse_error("cgroup", f"{files.path}/cgroup")
        self._groups.append(cg)
        return cg.path_for("memory")

    def _binding(self, cand: _Candidate, system: SystemSample, pl: _Placement,
                 affinity: frozenset[int] | None, thread_nodes: frozenset[int],
                 accel_nodes: frozenset[int]) -> Binding | None:
        if not self.config.enabled("binding"):
            return None
        topo = system.topology
        return analyse(
            online=frozenset(topo.nodes),
            cpu_nodes_online=topo.cpu_nodes(),
            policy_nodes=pl.policy_nodes,
            mems_allowed=cand.status.mems_allowed,
            affinity_nodes=affinity,
            thread_nodes=thread_nodes,
            accelerator_nodes=accel_nodes,
            balancing_mode=system.balancing_mode,
            off_policy_bytes=pl.off_policy_bytes,
        )

    def read_process(self, cand: _Candidate, system: SystemSample, plan_: Plan | None = None,
                     deadline: float | None = None, now: float | None = None
                     ) -> ProcessSample | None:
        """Return the sample of one process; raises Gone/Denied/SourceError from the files,
        Abandoned past ``deadline``."""
        files = cand.files
        t0 = self.clock()
        now = self.wall() if now is None else now
        if cand.stat is None:
            cand.stat = parse_pid_stat(files.stat())
            if cand.stat is None:
                self.parse_error("stat", f"{files.path}/stat")
                return None
        stat = cand.stat
        st = self.table.get(cand.key)
        method = plan_.method if plan_ is not None else "full"
        # stage 1: threads (weights for the home, migration counter)
        _threads, weights, by_node = self._threads(files, st)
        # stage 2: placement
        try:
            pl = self._placement(cand, st, method, deadline)
        except Denied:
            st.denied = True
            raise
        elapsed = self.clock() - t0
        if pl.method == "full":
            st.full_seconds_per_byte = elapsed / max(cand.resident, 1)
            st.last_full = now
        # stage 3: home
        topo = system.topology
        allowed = cand.status.cpus_allowed
        affinity = topo.nodes_of_cpus(allowed) if allowed else None
        if affinity is not None:
            # status shows the leader's affinity only; a node a thread ran on is allowed too
            affinity = affinity | frozenset(by_node)
        cfg = self.config
        texts: tuple[str, ...] = (stat.comm,)
        if cfg.home_pins or cfg.accelerator_pins:
            texts = self._texts(files, stat.comm)
        uses = self._accelerators(cand, texts)
        accel_nodes = frozenset(u.node for u in uses if u.node >= 0)
        home: Home = home_for(weights, affinity, pinned_home(cfg, texts), accel_nodes)
        cgroup_path = self._cgroup(files)
        node_bytes: dict[int, int] = {}
        for (node, _), b in pl.bytes.items():
            node_bytes[node] = node_bytes.get(node, 0) + b
        loc = locality(node_bytes, home)
        # stage 4: binding
        binding = self._binding(cand, system, pl, affinity, frozenset(by_node), accel_nodes)
        # stage 5: drift
        btime = self._boot_time()
        start_time = (btime or 0) + stat.starttime / CLK_TCK
        drift = None
        if cfg.enabled("drift"):
            age = now - start_time if btime is not None else None
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
            mismatches=binding.mismatches if binding else {},
            drift=drift,
            last_scan_timestamp=now,
            method=pl.method,
            samples=est.samples if est is not None else None,
            remote_ratio_stderr=est.remote_ratio_stderr(home.nodes) if est is not None
            else None,
            next_scan_timestamp=plan_.next_due if plan_ is not None else now,
        )

    def _read_system(self) -> SystemSample:
        cfg = self.config
        try:
            return read_system(
                self.proc, self.nodes, self.topology, self.errors,
                vmstat=cfg.enabled("vmstat"), node=cfg.enabled("node"),
                balancing=cfg.enabled("balancing"),
            )
        except Exception as exc:  # a parser bug: serve the processes without system counters
            self.errors.bug("system", str(self.proc.root), exc)
            return SystemSample(topology=self.topology)

    def sample_one(self, pid: int) -> tuple[ProcessSample | None, SystemSample]:
        """Return one process's sample (None if it is a kernel thread) and the system state.

        Raises Gone, Denied or another SourceError when the process cannot be read.
        """
        system = self._read_system()
        files = self.proc.process(pid)
        status = parse_pid_status(files.status())
        if status.vm_rss is None:
            return None, system
        return self.read_process(_Candidate(pid, status, files), system), system

    # --- the scan ----------------------------------------------------------------------
    def _cadence(self) -> CadencePolicy:
        cfg = self.config
        return CadencePolicy(sample_above=cfg.sample_above, full_interval=cfg.full_interval,
                             process_budget=cfg.process_budget, interval=cfg.scan_interval)

    def _keep(self, st: ProcessState | None, samples: list[ProcessSample],
              states: dict[str, int], next_due: float | None = None) -> None:
        """Serve a process's last values again (not read this scan); its timestamp stays."""
        if st is None or st.last is None:
            return
        if next_due is not None:
            st.last = replace(st.last, next_scan_timestamp=next_due)
        samples.append(st.last)
        states["kept"] += 1

    def _process_scan(self, cands: list[_Candidate], system: SystemSample, now: float,
                      states: dict[str, int]) -> tuple[list[ProcessSample], list[int]]:
        cfg = self.config
        policy = self._cadence()
        sampling = self.sampled is not None
        samples: list[ProcessSample] = []
        pending: list[int] = []
        # the budget counts time spent on processes, as its flag says
        deadline = self.clock() + cfg.scan_budget
        for i, cand in enumerate(cands):
            prev = self.table.peek(cand.key)
            if prev is not None and prev.denied:
                states["denied"] += 1  # known denied: not read again, not counted again
                continue
            if self.clock() >= deadline or self.stop_event.is_set():
                pending.append(cand.pid)
                self._keep(prev, samples, states)
                continue
            p = plan(policy, now=now, resident_bytes=cand.resident,
                     seconds_per_byte=prev.full_seconds_per_byte if prev else None,
                     next_due=prev.next_due if prev else 0.0,
                     last_full=prev.last_full if prev else 0.0, sampling=sampling)
            if not p.read_now:
                self._keep(prev, samples, states, p.next_due)
                continue
            # a read abandoned last time and first now runs to the end: progress is certain
            first_again = i == 0 and prev is not None and prev.abandoned > 0
            t1 = self.clock()
            try:
                sample = self.read_process(cand, system, p, None if first_again else deadline,
                                           now)
            except Abandoned:
                st = self.table.get(cand.key)
                st.abandoned += 1
                pending.append(cand.pid)
                self._keep(prev, samples, states)
                log.debug("read abandoned at the scan deadline", pid=cand.pid)
                continue
            except Gone as err:
                states["gone"] += 1
                log.debug("process gone", pid=cand.pid, file=err.path)
                continue
            except Denied as err:
                states["denied"] += 1
                self.read_error(err)
                continue
            except SourceError as err:
                states["skipped"] += 1
                self.read_error(err)
                continue
            except Exception as exc:  # one bad file costs one process, never the scan
                states["skipped"] += 1
                self.errors.bug("process", str(cand.files.path), exc)
                continue
            finally:
                self.state.self_metrics.observe_process_read(self.clock() - t1)
            if sample is None:
                states["skipped"] += 1
                continue
            st = self.table.get(cand.key)
            st.next_due = p.next_due
            st.last = sample
            states["scanned"] += 1
            samples.append(sample)
        return samples, pending

    def scan(self, wall: Callable[[], float] | None = None) -> Snapshot:
        """Return a new snapshot; never raises for bad input, unreadable or vanished files."""
        cfg = self.config
        wall = wall or self.wall
        now = wall()  # one wall clock per scan: drift ages and cadence use this reading
        t0 = self.clock()
        states = {"scanned": 0, "kept": 0, "skipped": 0, "denied": 0, "gone": 0}
        system = self._read_system()
        samples: list[ProcessSample] = []
        pending: list[int] = []
        self._groups = []
        listed: frozenset[int] | None = None
        if cfg.enabled("process"):
            try:
                cands, listed = self._candidates(states)
            except SourceError as err:
                self.read_error(err)
                cands = []
            except Exception as exc:
                self.errors.bug("proc", str(self.proc.root), exc)
                cands = []
            samples, pending = self._process_scan(cands, system, now, states)
        cgroups: tuple[CgroupSample, ...] = ()
        if self.cgroupfs is not None:
            try:
                cgroups = read_cgroups(self.cgroupfs, self._groups, self.errors)
            except Exception as exc:
                self.errors.bug("cgroup", str(self.config.roots.sysfs), exc)
        states["skipped"] += len(pending)
        self.state.budget_skipped_total += len(pending)
        self.state.pending = pending
        if listed is not None:
            self.table.retain(listed)
        self.state.scans += 1
        self._once_notes(system, states, len(samples))
        duration = self.clock() - t0
        stats = self._stats(duration, wall(), states)
        fields: dict[str, object] = {}
        if states["denied"]:
            fields["hint"] = DENIED_HINT
        log.info("scan", processes=states["scanned"], kept=states["kept"],
                 skipped=states["skipped"], denied=states["denied"], gone=states["gone"],
                 pending=len(pending), seconds=round(duration, 4), **fields)
        return Snapshot(system=system, processes=tuple(samples), stats=stats,
                        accelerators=self.accel.exported(), cgroups=cgroups)

    def _once_notes(self, system: SystemSample, states: dict[str, int], served: int) -> None:
        """Log, once each, the conditions that make every value look the same."""
        if len(system.topology.nodes) <= 1 and self.errors.once("note", "one-node"):
            log.info("one NUMA node: every resident byte counts as local",
                     nodes=list(system.topology.nodes))
        if (self.config.enabled("process") and not served and not states["denied"]
                and states["skipped"] and self.errors.once("note", "none-selected")):
            log.info("no process passes --process.min-resident (and the include/exclude "
                     "patterns); nothing per process is exported",
                     min_resident_bytes=self.config.min_resident)

    def _stats(self, duration: float, timestamp: float, states: dict[str, int]
               ) -> ExporterStats:
        st = self.state
        return ExporterStats(
            scans=st.scans,
            duration_seconds=duration,
            timestamp=timestamp,
            states=states,
            budget_skipped_total=st.budget_skipped_total,
            parse_errors=dict(self.errors.parse_errors),
            read_errors=dict(self.errors.read_errors),
            self_metrics=st.self_metrics.collect(),
        )


def read_topology_empty() -> Topology:
    """Return the topology of a host whose sysfs says nothing."""
    from numa_exporter.model.topology import build_topology

    return build_topology(None, {}, {})
