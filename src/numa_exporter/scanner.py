"""One scan: select processes, read them under a time budget, and build a Snapshot."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from numa_exporter.cgroups import read_cgroups
from numa_exporter.config import Config
from numa_exporter.model.binding import analyse
from numa_exporter.model.counters import ThreadSum, advance
from numa_exporter.model.drift import DriftTracker, WarmupRule
from numa_exporter.model.home import home_for, locality
from numa_exporter.model.snapshot import (
    AcceleratorUse,
    CgroupSample,
    ExporterStats,
    ProcessSample,
    Snapshot,
    SystemSample,
)
from numa_exporter.model.topology import Topology
from numa_exporter.parsers.numa_maps import NumaMaps, parse_numa_maps
from numa_exporter.parsers.pid_sched import parse_pid_sched
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.parsers.pid_status import PidStatus, parse_pid_status
from numa_exporter.parsers.proc_cgroup import ProcCgroup, parse_proc_cgroup
from numa_exporter.parsers.stat import parse_btime
from numa_exporter.selfmetrics import SelfMetrics
from numa_exporter.sources.accelerators import AcceleratorSource
from numa_exporter.sources.cgroupfs import CgroupFS
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS
from numa_exporter.sources.sysfs import NodeSysFS
from numa_exporter.system import read_system, read_topology
from numa_exporter.usage import AcceleratorMap, pinned_home

log = structlog.get_logger("numa_exporter.scanner")

MAX_LOGGED = 10_000
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class PlacementReader(Protocol):
    """Reads where a process's resident pages are; the full numa_maps walk by default."""

    def __call__(self, files: ProcessFiles) -> NumaMaps:
        """Return the per-node, per-kind totals of the process."""
        ...


def read_numa_maps(files: ProcessFiles) -> NumaMaps:
    """Return the totals of the process's numa_maps, streamed line by line."""
    return parse_numa_maps(files.numa_maps())


Identity = tuple[int, int]  # (pid, starttime in ticks)


@dataclass(slots=True)
class _Candidate:
    pid: int
    status: PidStatus
    files: ProcessFiles


@dataclass(slots=True)
class ScanState:
    """What a scanner carries from one scan to the next."""

    thread_ticks: dict[Identity, dict[int, int]] = field(default_factory=dict)
    migrated: dict[Identity, ThreadSum] = field(default_factory=dict)
    denied: set[Identity] = field(default_factory=set)
    denied_pids: set[int] = field(default_factory=set)
    pending: list[int] = field(default_factory=list)
    logged: set[tuple[object, ...]] = field(default_factory=set)
    scans: int = 0
    budget_skipped_total: int = 0
    parse_errors: dict[str, int] = field(default_factory=dict)
    read_errors: dict[tuple[str, str], int] = field(default_factory=dict)
    self_metrics: SelfMetrics = field(default_factory=SelfMetrics)


ProcessHook = Callable[[ProcessSample, ProcessFiles, Topology, SystemSample], ProcessSample]


class Scanner:
    """Runs scans; keeps the state (thread CPU times, denied processes, error counts)."""

    def __init__(
        self,
        config: Config,
        placement: PlacementReader = read_numa_maps,
        clock: Callable[[], float] = time.monotonic,
        procfs: ProcFS | None = None,
        accelerators: AcceleratorSource | None = None,
    ) -> None:
        self.config = config
        self.accel = AcceleratorMap(accelerators, config)
        self.cgroupfs = CgroupFS(config.roots.sysfs) if config.enabled("cgroup") else None
        self._groups: list[ProcCgroup] = []
        self.proc = procfs or ProcFS(config.roots.procfs)
        self.nodes = NodeSysFS(config.roots.sysfs)
        self.placement = placement
        self.clock = clock
        self.state = ScanState()
        self.hooks: list[ProcessHook] = []
        self.drift = DriftTracker(WarmupRule(config.warmup_age, config.warmup_scans,
                                             config.warmup_rss_tolerance))
        self.wall = time.time
        self.topology = self.refresh_topology()
        self._btime: int | None = None
        self._listed: frozenset[int] = frozenset()

    # --- error bookkeeping -----------------------------------------------------------
    def parse_error(self, source: str, detail: str) -> None:
        """Count a malformed file or line and log it once per (source, detail)."""
        self.state.parse_errors[source] = self.state.parse_errors.get(source, 0) + 1
        key = ("parse", source, detail)
        if key not in self.state.logged:
            self.state.logged.add(key)
            log.warning("malformed input", source=source, file=detail)

    def read_error(self, err: SourceError) -> None:
        """Count an unreadable file; gone logs at debug, denied and other errors log once."""
        k = (err.source, err.reason)
        self.state.read_errors[k] = self.state.read_errors.get(k, 0) + 1
        if isinstance(err, Gone):
            log.debug("file vanished", source=err.source, file=err.path)
            return
        key = (err.reason, err.source, err.path, err.errno)
        if key in self.state.logged:
            return
        self.state.logged.add(key)
        if isinstance(err, Denied):
            log.warning("permission denied", source=err.source, file=err.path)
        else:
            log.error("read failed", source=err.source, file=err.path, errno=err.errno,
                      error=str(err))

    def refresh_topology(self) -> Topology:
        """Return the topology read anew from sysfs (start-up and hotplug)."""
        self.topology = read_topology(self.nodes, self.parse_error, self.read_error)
        if self.config.enabled("accelerator"):
            self.accel.refresh()
        return self.topology

    # --- selection ---------------------------------------------------------------------
    @staticmethod
    def _texts(files: ProcessFiles, comm: str) -> tuple[str, str]:
        """Return (comm, cmdline) for matching regexes; cmdline is empty when unreadable."""
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

    def _candidates(self, states: dict[str, int]) -> list[_Candidate]:
        out: list[_Candidate] = []
        pids = self.proc.pids()
        self._listed = frozenset(pids)
        for pid in pids:
            files = self.proc.process(pid)
            try:
                raw = files.status()
            except Gone:
                states["gone"] += 1
                continue
            except SourceError as err:
                self.read_error(err)
                states["denied" if isinstance(err, Denied) else "skipped"] += 1
                continue
            status = parse_pid_status(raw)
            if status.error_count:
                self.parse_error("status", f"{files.path}/status")
            if status.vm_rss is None:  # kernel thread: no user memory
                continue
            # hugetlb pages are not in VmRSS: count them for the size threshold
            resident = status.vm_rss + (status.hugetlb or 0)
            if resident < self.config.min_resident or not self._matches(files, status.name):
                states["skipped"] += 1
                continue
            out.append(_Candidate(pid, status, files))
        out.sort(key=lambda c: (-((c.status.vm_rss or 0) + (c.status.hugetlb or 0)), c.pid))
        if self.config.top and len(out) > self.config.top:
            states["skipped"] += len(out) - self.config.top
            out = out[: self.config.top]
        # processes left over by the last scan's budget go first
        pending = {p: i for i, p in enumerate(self.state.pending)}
        out.sort(key=lambda c: (0, pending[c.pid]) if c.pid in pending else (1, 0))
        return out

    # --- one process -------------------------------------------------------------------
    def _boot_time(self) -> int:
        if self._btime is None:
            try:
                self._btime = parse_btime(self.proc.stat()) or 0
            except SourceError as err:
                self.read_error(err)
                self._btime = 0
        return self._btime

    def read_process(self, cand: _Candidate, system: SystemSample) -> ProcessSample | None:
        """Return the sample of one process; raises Gone/Denied/SourceError from the files."""
        files = cand.files
        t0 = self.clock()
        stat = parse_pid_stat(files.stat())
        if stat is None:
            self.parse_error("stat", f"{files.path}/stat")
            return None
        ident = (cand.pid, stat.starttime)
        if ident in self.state.denied:
            raise Denied("numa_maps", f"{files.path}/numa_maps")
        try:
            maps = self.placement(files)
        except Denied:
            self.state.denied.add(ident)
            raise
        if maps.error_count:
            self.state.parse_errors["numa_maps"] = (
                self.state.parse_errors.get("numa_maps", 0) + maps.error_count
            )
            key = ("parse", "numa_maps", ident)
            if key not in self.state.logged:
                self.state.logged.add(key)
                first = maps.errors[0]
                log.warning("malformed input", source="numa_maps",
                            file=f"{files.path}/numa_maps", line=first.lineno,
                            reason=first.reason, errors=maps.error_count)
        topo = system.topology
        node_of_cpu = topo.node_of_cpu()
        threads_by_node: dict[int, int] = {}
        weights: list[tuple[int, float]] = []
        ticks_now: dict[int, int] = {}
        prev = self.state.thread_ticks.get(ident, {})
        migrated_now: dict[int, int] = {}
        try:
            tids = files.tids()
        except Gone:
            raise
        except SourceError as err:
            self.read_error(err)
            tids = None
        for tid in tids or ():
            try:
                tstat = parse_pid_stat(files.task_stat(tid))
            except Gone:
                continue  # thread exited between listing and reading
            if tstat is None:
                self.parse_error("task_stat", f"{files.path}/task/{tid}/stat")
                continue
            ticks = tstat.utime + tstat.stime
            ticks_now[tid] = ticks
            if tstat.processor is not None and tstat.processor in node_of_cpu:
                node = node_of_cpu[tstat.processor]
                threads_by_node[node] = threads_by_node.get(node, 0) + 1
                delta = ticks - prev[tid] if tid in prev else None
                weights.append((node, float(delta) if delta is not None else -1.0))
            try:
                sched_raw = files.task_sched(tid)
            except Gone:
                continue
            if sched_raw is not None:
                sched = parse_pid_sched(sched_raw)
                if sched.error_count:
                    self.parse_error("sched", f"{files.path}/task/{tid}/sched")
                if sched.numa_pages_migrated is not None:
                    migrated_now[tid] = sched.numa_pages_migrated
        self.state.thread_ticks[ident] = ticks_now
        migrated: int | None = None
        prev_migrated = self.state.migrated.get(ident)
        if tids is None:  # thread list unreadable: keep the counter where it was
            migrated = prev_migrated.total if prev_migrated is not None else None
        elif migrated_now or prev_migrated is not None:
            counter = advance(prev_migrated or ThreadSum(), migrated_now, frozenset(tids))
            self.state.migrated[ident] = counter
            migrated = counter.total
        # weight by recent CPU time when there is some, else every thread counts once
        if any(w > 0 for _, w in weights):
            use = [(n, max(w, 0.0)) for n, w in weights]
        else:
            use = [(n, 1.0) for n, _ in weights]
        allowed = cand.status.cpus_allowed
        affinity = topo.nodes_of_cpus(allowed) if allowed else None
        if affinity is not None:
            # status shows the leader's affinity only; a node a thread ran on is allowed too
            affinity = affinity | frozenset(threads_by_node)
        cfg = self.config
        texts: tuple[str, ...] = (stat.comm,)
        if cfg.home_pins or cfg.accelerator_pins:
            texts = self._texts(files, stat.comm)
        uses: tuple[AcceleratorUse, ...] = ()
        if cfg.enabled("accelerator"):
            try:
                uses = self.accel.uses(cand.pid, texts)
            except Gone:
                raise
            except SourceError as err:
                self.read_error(err)
        accel_nodes = frozenset(u.node for u in uses if u.node >= 0)
        home = home_for(use, affinity, pinned_home(cfg, texts), accel_nodes)
        if cfg.enabled("cgroup"):
            try:
                cg = parse_proc_cgroup(files.cgroup())
                if cg.error_count:
                    self.parse_error("cgroup", f"{files.path}/cgroup")
                self._groups.append(cg)
                cgroup_path: str | None = cg.path_for("memory")
            except Gone:
                raise
            except SourceError as err:
                self.read_error(err)
                cgroup_path = None
        else:
            cgroup_path = None
        node_bytes = maps.node_bytes()
        loc = locality(node_bytes, home)
        start_time = self._boot_time() + stat.starttime / CLK_TCK
        binding = None
        if self.config.enabled("binding"):
            binding = analyse(
                online=frozenset(topo.nodes),
                cpu_nodes_online=topo.cpu_nodes(),
                policy_nodes=maps.policy_nodes,
                mems_allowed=cand.status.mems_allowed,
                affinity_nodes=affinity,
                thread_nodes=frozenset(threads_by_node),
                accelerator_nodes=accel_nodes,
                balancing_mode=system.balancing_mode,
            )
        drift = None
        if self.config.enabled("drift"):
            drift = self.drift.observe(cand.pid, self.wall(), start_time, cand.status.vm_rss or 0,
                                       node_bytes, loc.remote_ratio)
        sample = ProcessSample(
            pid=cand.pid,
            comm=stat.comm or cand.status.name,
            start_time=start_time,
            rss_bytes=cand.status.vm_rss or 0,
            memory=maps.bytes,
            policy_bytes=maps.policy_bytes,
            policy_nodes=maps.policy_nodes,
            threads_by_node=threads_by_node,
            home=home,
            locality=loc,
            pages_migrated=migrated,
            scan_seconds=self.clock() - t0,
            cpus_allowed=cand.status.cpus_allowed,
            mems_allowed=cand.status.mems_allowed,
            cgroup=cgroup_path,
            accelerators=uses,
            memory_bound=binding.memory_bound if binding else None,
            cpus_bound=binding.cpus_bound if binding else None,
            mismatches=binding.mismatches if binding else {},
            drift=drift,
        )
        for hook in self.hooks:
            sample = hook(sample, files, topo, system)
        return sample

    def _read_system(self) -> SystemSample:
        cfg = self.config
        return read_system(
            self.proc, self.nodes, self.topology, self.parse_error, self.read_error,
            vmstat=cfg.enabled("vmstat"), node=cfg.enabled("node"),
            balancing=cfg.enabled("balancing"),
        )

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
    def scan(self, wall: Callable[[], float] = time.time) -> Snapshot:
        """Return a new snapshot; never raises for bad input, unreadable or vanished files."""
        cfg = self.config
        t0 = self.clock()
        states = {"scanned": 0, "skipped": 0, "denied": 0, "gone": 0}
        system = self._read_system()
        samples: list[ProcessSample] = []
        pending: list[int] = []
        self._groups = []
        if cfg.enabled("process"):
            try:
                cands = self._candidates(states)
            except SourceError as err:
                self.read_error(err)
                cands = []
            for cand in cands:
                if self.clock() - t0 >= cfg.scan_budget:
                    pending.append(cand.pid)
                    continue
                t1 = self.clock()
                try:
                    sample = self.read_process(cand, system)
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
                finally:
                    self.state.self_metrics.observe_process_read(self.clock() - t1)
                if sample is None:
                    states["skipped"] += 1
                    continue
                states["scanned"] += 1
                samples.append(sample)
        cgroups: tuple[CgroupSample, ...] = ()
        if self.cgroupfs is not None:
            cgroups = read_cgroups(self.cgroupfs, self._groups, self.parse_error, self.read_error)
        states["skipped"] += len(pending)
        self.state.budget_skipped_total += len(pending)
        self.state.pending = pending
        self._forget()
        self.state.scans += 1
        duration = self.clock() - t0
        st = self.state
        stats = ExporterStats(
            scans=st.scans,
            duration_seconds=duration,
            timestamp=wall(),
            states=states,
            budget_skipped_total=st.budget_skipped_total,
            parse_errors=dict(st.parse_errors),
            read_errors=dict(st.read_errors),
            self_metrics=st.self_metrics.collect(),
        )
        log.info("scan", processes=states["scanned"], skipped=states["skipped"],
                 denied=states["denied"], gone=states["gone"], pending=len(pending),
                 seconds=round(duration, 4))
        return Snapshot(system=system, processes=tuple(samples), stats=stats,
                        accelerators=self.accel.exported(), cgroups=cgroups)

    def _forget(self) -> None:
        """Drop per-process state of processes that are no longer listed."""
        alive = self._listed
        self.state.thread_ticks = {
            i: t for i, t in self.state.thread_ticks.items() if i[0] in alive
        }
        self.state.migrated = {i: c for i, c in self.state.migrated.items() if i[0] in alive}
        self.state.denied = {i for i in self.state.denied if i[0] in alive}
        self.drift.forget_except(alive)
        if len(self.state.logged) > MAX_LOGGED:  # "log once" memory stays bounded
            self.state.logged.clear()
