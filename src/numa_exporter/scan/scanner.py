"""One scan: select processes, read them under a time budget, and build a Snapshot.

The loop over the candidates is here (budget, cadence, keeping last values, retention of the
per-process table, the scan's notes and stats); selection is ``scan/select.py`` and the
read of one process, in stages, ``scan/process.py``.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from numa_exporter.config import Config
from numa_exporter.model.cadence import CadencePolicy, Plan, ReadCosts, Reason
from numa_exporter.model.change_evidence import judge
from numa_exporter.model.clock import ScanTime, SteadyClock
from numa_exporter.model.detail_level import DetailTrack, assign, rule_of
from numa_exporter.model.drift import WarmupRule
from numa_exporter.model.kubernetes import KubernetesView
from numa_exporter.model.policies import policies_due
from numa_exporter.model.process_state import ProcessTable
from numa_exporter.model.read_times import ReadTimeHistogram
from numa_exporter.model.snapshot import (
    CgroupSample,
    ExporterStats,
    Outcome,
    ProcessSample,
    Snapshot,
    SystemSample,
    new_outcomes,
)
from numa_exporter.model.tiers.host import SystemTiers
from numa_exporter.model.topology import Topology, build_topology
from numa_exporter.parsers.proc_cgroup import ProcCgroup
from numa_exporter.readers.accelerator_use import AcceleratorMap
from numa_exporter.readers.accelerators import AcceleratorSource
from numa_exporter.readers.cgroups import read_cgroups
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.kernel_features import damon_stat_running
from numa_exporter.readers.kernel_features import describe as describe_features
from numa_exporter.readers.kernel_features import detect as detect_features
from numa_exporter.readers.kubernetes import KubernetesReader
from numa_exporter.readers.node_reclaim import read_node_vmstat_values, reclaim_counters
from numa_exporter.readers.process_files import (
    read_live_thread,
    read_numa_maps,
    read_stat,
    read_status,
)
from numa_exporter.readers.system import read_system, read_topology
from numa_exporter.readers.tiers import (
    read_demotion_enabled,
    read_node_vmstat,
    read_system_tiers,
    tier_counters,
)
from numa_exporter.readers.weighted_interleave import read_weighted_interleave
from numa_exporter.scan.damon import HotMemoryMonitor, join_cgroup_hot, join_hot
from numa_exporter.scan.fairness import order, read_deadline
from numa_exporter.scan.process import (
    VERIFY_PER_SCAN,
    PlacementReader,
    ProcessReader,
    SampledReader,
    process_counters,
)
from numa_exporter.scan.select import Candidate, Outcomes, ScreenMemo, select
from numa_exporter.scan.stages import StageTimer
from numa_exporter.sources.cgroupfs import CgroupFS
from numa_exporter.sources.deadline import Deadline, Expired
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.rootfs import RootFS
from numa_exporter.sources.sysfs import (
    DeviceNumberSysFS,
    KsmSysFS,
    MemoryTierSysFS,
    NodeSysFS,
    WeightedInterleaveSysFS,
)

log = structlog.get_logger("numa_exporter.scan.scanner")

DENIED_HINT = ("grant CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (see deploy/systemd), or run "
               "as root; kernel.yama.ptrace_scope=3 denies even those")


@dataclass(slots=True)
class ScanState:
    """What a scanner carries from one scan to the next besides the per-process table."""

    pending: list[int] = field(default_factory=list)
    scans: int = 0
    budget_skipped_total: int = 0
    read_times: ReadTimeHistogram = field(default_factory=ReadTimeHistogram)


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
        cpu: Callable[[], float] = time.thread_time,
        hot: HotMemoryMonitor | None = None,
    ) -> None:
        self._config = config
        self.hot = hot  # --collector.damon: the hot-memory worker (its own thread)
        self.cpu = cpu
        self.errors = ErrorReporter()
        self.cgroupfs = CgroupFS(config.roots.sysfs) if config.enabled("cgroup") else None
        self.proc = procfs or ProcFS(config.roots.procfs)
        self.accel = AcceleratorMap(accelerators, config, self.proc, self.errors)
        self.proc.hold_files()  # statm/status/cmdline read by pread on a live procfs
        self.nodes = NodeSysFS(config.roots.sysfs)
        self.memory_tiers = MemoryTierSysFS(config.roots.sysfs)
        self.weights = WeightedInterleaveSysFS(config.roots.sysfs)
        self.ksm = KsmSysFS(config.roots.sysfs)
        self.system_tiers = SystemTiers()
        self.clock = clock
        self.wall = wall
        self.steady = SteadyClock()
        self.stop_event = threading.Event()
        self.state = ScanState()
        self.table = ProcessTable(WarmupRule(config.warmup_age, config.warmup_scans,
                                             config.warmup_rss_tolerance))
        self.topology = empty_topology()
        self.kube = KubernetesReader(RootFS(config.roots.rootfs, config.kubelet_root_dir),
                                     sysfs=DeviceNumberSysFS(config.roots.sysfs),
                                     accelerators=accelerators)
        self.kubernetes_view = KubernetesView()  # of the last scan (or sample_one)
        self.screened = ScreenMemo()  # processes screened out, while they have not run
        self.reader = ProcessReader(config, self.errors, self.table, self.accel,
                                    lambda: self.topology, self.proc, placement, sampled,
                                    clock, wall)
        self.refresh_topology()
        self.kernel_features = self._detect_features()

    def _detect_features(self) -> tuple[tuple[str, bool], ...]:
        """Return the kernel features found at start, (name, offered) for each that could
        be told; say them once in the log, the absent ones with what goes without them."""
        try:
            found = detect_features(self.proc, self.config.roots.sysfs)
        except Exception as exc:  # a probe's bug must not stop the exporter
            self.errors.bug("kernel_features", str(self.proc.root), exc)
            return ()
        log.info("kernel features", **describe_features(found))
        if self.config.damon and damon_stat_running(self.config.roots.sysfs):
            log.warning("DAMON_STAT's own kdamond runs (module damon_stat, enabled=Y): no "
                        "kdamond of DAMON's sysfs interface can start while it does (EBUSY), "
                        "so --collector.damon cannot monitor; the exporter leaves the module "
                        "alone (echo N > /sys/module/damon_stat/parameters/enabled frees it)")
        return tuple((n, v) for n, v in found.items() if v is not None)

    @property
    def config(self) -> Config:
        """Return the config scans run with."""
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        """Hand every part the new config (taken up by the next scan as a whole)."""
        self._config = config
        self.accel.config = config
        self.reader.config = config

    def refresh_topology(self) -> Topology:
        """Return the topology read anew from sysfs (start-up and hotplug)."""
        try:
            self.topology = read_topology(self.nodes, self.errors)
        except Exception as exc:  # a parser bug must not stop the exporter
            self.errors.bug("topology", str(self.nodes.root), exc)
        try:  # static between topology changes; the release also gates sched reads
            self.system_tiers = read_system_tiers(self.proc, self.nodes, self.memory_tiers,
                                                  self.topology, self.errors)
        except Exception as exc:
            self.errors.bug("tiers", str(self.nodes.root), exc)
        if self.system_tiers.sched_resets():
            self.reader.gate.read = False
        if self.config.enabled("accelerator"):
            self.accel.refresh()
        return self.topology

    def _read_system(self) -> SystemSample:
        cfg = self.config
        try:
            sample = read_system(
                self.proc, self.nodes, self.topology, self.errors,
                vmstat=cfg.enabled("vmstat"), node=cfg.enabled("node"),
                balancing=cfg.enabled("balancing"),
                ksm=self.ksm if cfg.enabled("process") else None,
            )
        except Exception as exc:  # a parser bug: serve the processes without system counters
            self.errors.bug("system", str(self.proc.root), exc)
            sample = SystemSample(topology=self.topology)
        # binding checks compare memory bindings with the nodes that have memory
        sample = replace(sample, memory_nodes=self.system_tiers.classes.memory)
        if cfg.enabled("node") or cfg.enabled("binding"):
            try:
                sample = replace(sample, weighted_interleave=read_weighted_interleave(
                    self.weights, self.errors))
            except Exception as exc:
                self.errors.bug("weighted_interleave", str(self.weights.root), exc)
        node_vm: dict[int, dict[str, int]] | None = None
        if cfg.enabled("node") and dict(self.kernel_features).get("node_reclaim"):
            try:  # one read of the node vmstat files serves the tiers collector too
                node_vm = read_node_vmstat_values(self.nodes, self.topology, self.errors)
                sample = replace(sample, node_reclaim=reclaim_counters(node_vm))
            except Exception as exc:
                self.errors.bug("node_reclaim", str(self.nodes.root), exc)
        if not cfg.enabled("tiers"):
            return sample
        try:
            return replace(sample, tiers=self.system_tiers,
                           node_vmstat=(tier_counters(node_vm) if node_vm is not None else
                                        read_node_vmstat(self.nodes, self.topology,
                                                         self.errors)),
                           demotion_enabled=read_demotion_enabled(self.memory_tiers,
                                                                  self.errors))
        except Exception as exc:
            self.errors.bug("tiers", str(self.nodes.root), exc)
            return replace(sample, tiers=self.system_tiers)

    def sample_one(self, pid: int) -> tuple[ProcessSample | None, SystemSample]:
        """Return one process's sample (None if it is a kernel thread) and the system state.

        Raises Gone, Denied or another SourceError when the process cannot be read.
        """
        system = self._read_system()
        files = self.proc.process(pid)
        status = read_status(files, 0, self.errors)
        if status is not None and status.vm_rss is None:  # kernel thread or zombie leader
            if status.kthread:
                return None, system
            stat = read_stat(files, self.errors)
            if stat is None or stat.kernel_thread:
                return None, system
            found = read_live_thread(files, 0, self.errors)
            if found is None:
                raise Gone("task", f"{files.path}/task",
                           OSError(errno.ESRCH, "every thread has exited"))
            files, status = found
        if status is None:
            return None, system
        self._begin_kubernetes(system)
        try:
            sample = self.reader.read(Candidate(pid, status, files), system)
        finally:
            self.kubernetes_view = self._end_kubernetes([])
        return sample, system

    # --- Kubernetes look-ups, one session per scan ----------------------------------------
    def _begin_kubernetes(self, system: SystemSample) -> None:
        """Hand the process reader a new session of Kubernetes look-ups (collector on)."""
        self.reader.kube = None
        if self.config.enabled("kubernetes"):
            topo = system.topology
            self.reader.kube = self.kube.scan(topo.node_of_cpu(), frozenset(topo.nodes),
                                              self.errors,
                                              Deadline(self.clock() + self.config.scan_budget,
                                                       self.stop_event, self.clock))

    def _end_kubernetes(self, samples: list[ProcessSample]) -> KubernetesView:
        """Return the session's view, with the pods of processes kept from earlier scans."""
        session, self.reader.kube = self.reader.kube, None
        if session is None:
            return KubernetesView()
        for s in samples:
            if s.kubernetes is not None and s.kubernetes_cgroup is not None:
                session.keep(s.kubernetes_cgroup, s.kubernetes)
        try:
            return session.view()
        except Exception as exc:  # a bug here costs the Kubernetes families, not the scan
            self.errors.bug("kubernetes", str(self.config.roots.rootfs), exc)
            return KubernetesView()

    # --- the scan ----------------------------------------------------------------------
    def _cadence(self) -> CadencePolicy:
        cfg = self.config
        return CadencePolicy(full_interval=cfg.full_interval,
                             process_budget=cfg.process_budget, interval=cfg.scan_interval,
                             hold_budget=cfg.hold_budget,
                             policy_hold_budget=cfg.policy_hold_budget)

    def _probed(self, cand: Candidate, now: ScanTime, deadline: Deadline) -> bool:
        """Return whether a page-size probe of ``cand`` changed its costs (see
        ``ProcessReader.probe_pages``); a probe that fails or runs past ``deadline`` changes
        nothing (the read that follows meets the same file or deadline and says so)."""
        try:
            return self.reader.probe_pages(cand, now.mono, deadline)
        except (Expired, SourceError):
            return False

    def _keep(self, cand: Candidate, samples: list[ProcessSample],
              next_scan: float | None = None) -> Outcome:
        """Serve a process's last values again (not read this scan; its timestamp stays);
        return the outcome: kept, or skipped when there are none to serve."""
        last = self.reader.kept(cand, next_scan)
        if last is None:
            return Outcome.SKIPPED
        samples.append(last)
        return Outcome.KEPT

    def _plan(self, cand: Candidate, policy: CadencePolicy, now: ScanTime,
              deadline: Deadline, system: SystemSample) -> Plan:
        """Return this scan's plan for ``cand``: made again after a page-size probe when
        the planned hold is over budget (huge pages walk faster). The change evidence
        against its last read (``system``'s host counters) says whether it is quiet."""
        sampling = self.reader.sampled is not None and self.config.sampling
        prev = self.table.peek(cand.key)
        costs = prev.costs if prev is not None else ReadCosts()
        due = policies_due(prev.policies if prev is not None else None, now.mono,
                           cand.resident, self.config.policy_interval)
        quiet = prev is not None and judge(
            prev.counters, process_counters(cand, system.change_counters)).unchanged
        p = costs.plan(policy, now=now.mono, resident_bytes=cand.resident, sampling=sampling,
                       policies_due=due, quiet=quiet)
        if p.reason == Reason.HOLD and self._probed(cand, now, deadline):
            costs = self.table.get(cand.key).costs
            p = costs.plan(policy, now=now.mono, resident_bytes=cand.resident,
                           sampling=sampling, policies_due=due, quiet=quiet)
        return p

    def _read_one(self, cand: Candidate, system: SystemSample, p: Plan, now: ScanTime,
                  deadline: Deadline, groups: list[ProcCgroup],
                  samples: list[ProcessSample], t1: float) -> Outcome:
        """Read one process under ``deadline`` (begun at monotonic ``t1``); return its
        outcome (an abandoned read serves its last values, if any, and ends in
        ``pending``)."""
        try:
            sample = self.reader.read(cand, system, p, deadline, now, groups)
        except Expired:
            self.state.pending.append(cand.pid)
            log.debug("read abandoned at the scan deadline", pid=cand.pid)
            return self._keep(cand, samples)
        except Gone as err:
            log.debug("process gone", pid=cand.pid, file=err.path)
            return Outcome.GONE
        except Denied as err:
            self.errors.read(err)
            return Outcome.DENIED
        except SourceError as err:
            self.errors.read(err)
            return Outcome.SKIPPED
        except Exception as exc:  # one bad file costs one process, never the scan
            self.errors.bug("process", str(cand.files.path), exc)
            return Outcome.SKIPPED
        finally:
            self.state.read_times.observe(self.clock() - t1)
        if sample is None:
            return Outcome.SKIPPED
        samples.append(sample)
        return Outcome.SCANNED

    def _process_scan(self, cands: list[Candidate], system: SystemSample, now: ScanTime,
                      states: Outcomes, groups: list[ProcCgroup]) -> list[ProcessSample]:
        """Return the samples served (read or kept); the pids left for the next scan are
        in ``self.state.pending``.

        Every candidate ends in exactly one outcome: scanned, kept (last values served),
        skipped (not read and nothing to keep), denied or gone.
        """
        cfg = self.config
        policy = self._cadence()
        samples: list[ProcessSample] = []
        # the budget counts time spent on processes, as its flag says
        deadline = self.clock() + cfg.scan_budget
        ordered, unbounded = order(cands, lambda c: self.table.peek(c.key))
        left = len(ordered)
        for cand in ordered:
            left -= 1
            prev = self.table.peek(cand.key)
            if prev is not None and prev.denied:
                states[Outcome.DENIED] += 1  # known denied: not read again, not counted again
                continue
            # a process given up before is read to the end after the others: progress is
            # certain for it and it cannot starve them
            to_end = cand is unbounded
            if (self.clock() >= deadline and not to_end) or self.stop_event.is_set():
                self.state.pending.append(cand.pid)
                states[self._keep(cand, samples)] += 1
                continue
            scan_end = Deadline(deadline, self.stop_event, self.clock)
            p = self._plan(cand, policy, now, scan_end, system)
            if not p.read_now:
                states[self._keep(cand, samples, now.wall_of(p.next_due))] += 1
                continue
            t1 = self.clock()
            mine = None if to_end else read_deadline(t1, deadline, left + 1,
                                                     cfg.process_budget)
            states[self._read_one(cand, system, p, now,
                                  Deadline(mine, self.stop_event, self.clock), groups,
                                  samples, t1)] += 1
        return samples

    def scan(self, wall: Callable[[], float] | None = None) -> Snapshot:
        """Return a new snapshot; never raises for bad input, unreadable or vanished files."""
        cfg = self.config
        wall = wall or self.wall
        t0 = self.clock()
        # one reading per scan: the cadence schedules on its monotonic part, drift ages on
        # its steady part, timestamps are its wall part
        now = self.steady.read(wall(), t0)
        stages = StageTimer(self.cpu)
        states = new_outcomes()
        system = self._read_system()
        stages.done("system")
        samples: list[ProcessSample] = []
        groups: list[ProcCgroup] = []
        listed: frozenset[int] | None = None
        self._begin_kubernetes(system)
        first, self.state.pending = self.state.pending, []  # this scan's leftovers go here
        evidence = self.reader.evidence
        evidence.left = VERIFY_PER_SCAN
        before = (sum(evidence.skipped.values()), evidence.verified, evidence.disagreed)
        if cfg.enabled("process"):
            cands: list[Candidate] = []
            try:
                cands, listed = select(self.proc, cfg, self.errors, first, states,
                                       no_hugetlb_in_use(system), self.screened,
                                       self.reader.cpu_clock)
            except SourceError as err:
                self.errors.read(err)
            except Exception as exc:
                self.errors.bug("proc", str(self.proc.root), exc)
            stages.done("select")
            samples = self._process_scan(cands, system, now, states, groups)
            stages.done("processes")
        self.kubernetes_view = view = self._end_kubernetes(samples)
        cgroups: tuple[CgroupSample, ...] = ()
        if self.cgroupfs is not None:
            try:
                cgroups = read_cgroups(self.cgroupfs, groups, self.errors)
            except Exception as exc:
                self.errors.bug("cgroup", str(self.config.roots.sysfs), exc)
            stages.done("cgroups")
        pending = self.state.pending
        self.state.budget_skipped_total += len(pending)
        if listed is not None:
            self.table.retain(listed)
            self.proc.retain(listed)
        if self.reader.sampled is not None:  # its kept state goes with the table's
            self.reader.sampled.retain(st.key for st in self.table)
        self.state.scans += 1
        self._once_notes(system, states, len(samples))
        duration = self.clock() - t0
        stats = replace(self._stats(duration, wall(), states), stage_seconds=stages.seconds())
        fields: dict[str, object] = {f"cpu_{k}": round(v, 5) for k, v in stages.seconds()}
        if states[Outcome.DENIED]:
            fields["hint"] = DENIED_HINT
        fields["placement_kept"] = sum(evidence.skipped.values()) - before[0]
        fields["verified"] = evidence.verified - before[1]
        fields["disagreed"] = evidence.disagreed - before[2]
        log.info("scan", processes=states[Outcome.SCANNED], kept=states[Outcome.KEPT],
                 skipped=states[Outcome.SKIPPED], denied=states[Outcome.DENIED],
                 gone=states[Outcome.GONE],
                 pending=len(pending), seconds=round(duration, 4), **fields)
        full = self._detail(samples) if cfg.enabled("process") else None
        damon = None
        if self.hot is not None:
            samples, damon = join_hot(self.hot, samples)
            damon = join_cgroup_hot(self.hot, samples, damon, system.topology,
                                    system.memory_nodes)
        return Snapshot(system=system, processes=tuple(samples), stats=stats,
                        accelerators=self.accel.exported(), cgroups=cgroups,
                        kubernetes=view, damon=damon, full_detail=full)

    def _detail(self, samples: list[ProcessSample]) -> frozenset[int]:
        """Return the pids of the served processes at full detail this scan, each one's
        level advanced in its state (hysteresis: ``model/detail_level.py``)."""
        placed = {p.pid: p.locality.local_bytes + p.locality.remote_bytes for p in samples}

        def track(pid: int) -> DetailTrack | None:
            st = self.table.by_pid(pid)
            return st.detail if st is not None else None

        return assign(rule_of(self.config), placed, track)

    def _once_notes(self, system: SystemSample, states: Outcomes, served: int) -> None:
        """Log, once each, the conditions that make every value look the same."""
        if len(system.topology.nodes) <= 1 and self.errors.once("note", "one-node"):
            log.info("one NUMA node: every resident byte counts as local",
                     nodes=list(system.topology.nodes))
        if (self.config.enabled("process") and not served and not states[Outcome.DENIED]
                and states[Outcome.SKIPPED] and self.errors.once("note", "none-selected")):
            log.info("no process passes --process.min-resident (and the include/exclude "
                     "patterns); nothing per process is exported",
                     min_resident_bytes=self.config.min_resident)

    def _stats(self, duration: float, timestamp: float, states: Outcomes
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
            read_times=st.read_times.freeze(),
            scan_interval=self.config.scan_interval,
            scan_budget=self.config.scan_budget,
            placement_reads_skipped=dict(self.reader.evidence.skipped),
            evidence_verifications=self.reader.evidence.verified,
            evidence_disagreements=self.reader.evidence.disagreed,
            kernel_features=self.kernel_features,
        )


def no_hugetlb_in_use(system: SystemSample) -> bool:
    """Return True when the system read shows, for every node, every huge page size free:
    then no process maps a hugetlb page and its resident memory is statm's alone."""
    nodes = system.topology.nodes
    if not nodes or set(system.hugepages) != set(nodes):
        return False  # not read (node collector off, one node, a read error): not known
    return all(h.total is not None and h.free is not None and h.total == h.free
               for sizes in system.hugepages.values() for h in sizes.values())


def empty_topology() -> Topology:
    """Return the topology of a host whose sysfs says nothing."""
    return build_topology(None, {}, {})
