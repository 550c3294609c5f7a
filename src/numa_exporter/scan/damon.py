"""The hot-memory worker (``--collector.damon``): a thread that keeps the exporter's own
kdamonds on the largest watched processes (vaddr) or on every node's physical memory
(paddr) and reads their regions, off the scan thread's critical path (a region read blocks
about one aggregation interval). The scan only hands it the processes (and, with
``--collector.damon.cgroups``, the cgroups) it watches and takes its last result.

Per-cgroup hot memory (``--collector.damon.cgroups N``): where the kernel offers per-filter
passed bytes (6.14+, read from sysfs), the paddr kdamond carries one memcg-filtered stat
scheme per watched cgroup (the N largest by resident bytes of their scanned processes,
pod containers first); the set is chosen again every RESELECT_S, or at once when a watched
cgroup is gone. Where the kernel lacks them (6.12 and older) the worker says so once,
counts ``cgroups_unsupported`` and goes on as without the flag."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import structlog

from numa_exporter.model.hot_memory import (
    CgroupHotMemory,
    DamonStatus,
    HotMemory,
    NodeHotMemory,
    NodeRange,
    cgroup_home,
)
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.model.topology import Topology
from numa_exporter.readers.hot_memory import (
    QueryFn,
    cgroup_hot,
    node_hot_idle,
    place_hot_regions,
)
from numa_exporter.sources.damon import (
    CgroupGone,
    DamonModule,
    DamonSettings,
    DamonSysfs,
    DamonUnavailable,
    KdamondStopped,
    RegionRead,
    TargetGone,
)
from numa_exporter.sources.errors import SourceError

log = structlog.get_logger()
RETRY_S = 300.0  # a DAMON that was busy, foreign or absent is tried again this often
SPARE_CANDIDATES = 4  # processes named beyond one per kdamond: the next when one exits
# a region update that reads no region at all while the kdamond runs is read again, at most
# this many times, in the same round (measured in the 6.12 guest with one read a round:
# paddr reads came back empty in 4 of 5 scrapes, where three reads back to back had never
# all been empty)
EMPTY_READ_RETRIES = 2
MAX_AGE_ROUNDS = 10  # hot memory older than this many rounds (at least 10 s) is not joined
RESELECT_S = 60.0  # the watched cgroups are chosen again this often (at once when one goes)


@dataclass(frozen=True, slots=True)
class Watched:
    """A process to watch: pid and start time (a reused pid is another process), and its
    resident bytes at the last scan (the most its hot bytes can be; not part of its
    identity)."""

    pid: int
    start_time: float
    rss_bytes: int | None = field(default=None, compare=False)


class HotMemoryMonitor:
    """Owns the DAMON driver; ``want`` (scan thread) names the processes, ``status`` (scan
    thread) returns the last result; everything else runs on the worker thread."""

    def __init__(self, driver: DamonSysfs, query: Callable[[int], QueryFn] | None,
                 threshold: float, period_s: float = 1.0, is_root: bool = True,
                 node_ranges: Callable[[], list[NodeRange]] = list,
                 modules: Callable[[], list[DamonModule]] = list,
                 yield_to_modules: bool = False,
                 cgroup_exists: Callable[[str], bool] = lambda _: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.driver = driver
        self.cgroup_exists = cgroup_exists  # whether a cgroup path exists (cgroupfs)
        self.clock = clock
        self._wanted_cgroups: list[str] = []  # candidates, most important first
        self._selected_at: float | None = None  # when the watched cgroups were chosen
        self.modules = modules  # the kernel's DAMON modules, read each round
        self.yield_to_modules = yield_to_modules
        self._refused: dict[str, bool] = {}  # module -> blocked by an exporter kdamond now
        self._refused_now: set[str] = set()  # modules enabled but not running now
        self._yielded = False
        self.node_ranges = node_ranges  # paddr: each node's physical ranges
        self._ranges: list[NodeRange] = []  # what the paddr kdamond monitors
        self.settings: DamonSettings = driver.settings
        self.query = query
        self.threshold = threshold
        self.period_s = period_s
        self.is_root = is_root
        self._lock = threading.Lock()
        self._wanted: list[Watched] = []
        self._status = DamonStatus()
        self._unavailable: dict[str, int] = {}
        self._said: set[str] = set()
        self._assigned: dict[int, Watched] = {}  # slot -> process
        self._gone: set[Watched] = set()  # wanted processes found exited
        self._events: dict[str, int] = {}  # counted events (target_exited, ...)
        # a round waits about one aggregation interval per kdamond in the kernel
        self.max_age_s = max(10.0, MAX_AGE_ROUNDS * (
            period_s + self.settings.slots * self.settings.aggr_us / 1e6))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- scan thread ----------------------------------------------------------------------
    def want(self, processes: Sequence[Watched]) -> None:
        """Name the processes to watch, most important first: one per kdamond, and a few
        more to move on to when one exits."""
        with self._lock:
            self._wanted = list(processes[: self.settings.slots + SPARE_CANDIDATES])

    def want_cgroups(self, paths: Sequence[str]) -> None:
        """Name the cgroups to watch (``--collector.damon.cgroups``), most important
        first; the worker takes the first that exist, up to the flag's count."""
        with self._lock:
            self._wanted_cgroups = list(paths[: 2 * self.settings.cgroups])

    def status(self) -> DamonStatus:
        """Return the worker's last result (never blocks on DAMON)."""
        with self._lock:
            return self._status

    def stalled(self, age_s: float) -> DamonStatus:
        """Return the status when the worker's last result is older than ``max_age_s``
        (scan thread): ``stalled``, counted, without hot memory (said once)."""
        with self._lock:
            self._unavailable["stalled"] = self._unavailable.get("stalled", 0) + 1
            said = "stalled" in self._said
            self._said.add("stalled")
            st = DamonStatus("stalled", {}, dict(self._unavailable),
                             events=dict(self._events), modules_blocked=dict(self._refused))
        if not said:
            log.warning("damon: the hot-memory worker's last result is too old; hot memory "
                        "left out", age_seconds=round(age_s, 1), bound_seconds=self.max_age_s)
        return st

    def start(self) -> None:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._run, name="damon", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker and the exporter's own kdamonds (the state file stays)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.driver.release()
        except Exception as exc:  # on exit: say it, never raise
            log.warning("damon: could not stop the exporter's kdamonds", error=str(exc))

    # --- worker thread --------------------------------------------------------------------
    def _publish(self, state: str, hot: dict[int, HotMemory] | None = None,
                 nodes: NodeHotMemory | None = None,
                 cgroups: dict[str, CgroupHotMemory] | None = None) -> None:
        """Make the status the scan takes next (worker thread)."""
        with self._lock:
            self._status = DamonStatus(state, hot if hot is not None else {},
                                       dict(self._unavailable), nodes,
                                       monotonic=time.monotonic(), events=dict(self._events),
                                       modules_blocked=dict(self._refused), cgroups=cgroups)

    def _unavailable_now(self, reason: str, detail: str) -> None:
        with self._lock:  # the scan thread counts "stalled" in the same map
            self._unavailable[reason] = self._unavailable.get(reason, 0) + 1
        if reason not in self._said:
            self._said.add(reason)
            log.warning("damon: hot memory unavailable; everything else keeps serving",
                        reason=reason, detail=detail)
        self._publish(reason)

    def _run(self) -> None:
        if not self.is_root:
            self._unavailable_now("not_root", "DAMON's sysfs interface needs root")
            return
        while not self._stop.is_set():
            self._stop.wait(self.step())

    def step(self) -> float:
        """Run one round of the worker (claiming the kdamonds first when it has none) and
        return how long to wait before the next: the period, or RETRY_S after DAMON was
        unavailable (said once, counted)."""
        try:
            mods = self._read_modules()
            if self.yield_to_modules and any(m.enabled for m in mods):
                self._make_way(mods)
                return self.period_s
            if self._yielded:
                self._yielded = False
                log.info("damon: no DAMON module asks to run any more; the exporter's "
                         "kdamonds resume")
            if not self.driver.slots:  # none yet, or removed after a refused start
                self._assigned.clear()
                self._ranges = []
                self.driver.claim()
                self._check_cgroups_offered()
            self.round()
            self._check_modules(mods)
            return self.period_s
        except DamonUnavailable as exc:
            self._unavailable_now(exc.reason, str(exc))
        except Exception as exc:  # a bug here costs hot memory, never the daemon
            self._unavailable_now("error", f"{type(exc).__name__}: {exc}")
        return RETRY_S

    def _check_cgroups_offered(self) -> None:
        """Say once, and count once, that per-cgroup hot memory was asked for where it
        cannot be had: the kernel offers no per-filter passed bytes (before 6.14), or the
        kdamonds run vaddr (a forced mode); what it did before goes on."""
        if not self.settings.cgroups or "cgroups_unsupported" in self._said:
            return
        if self.driver.filter_bytes and self.driver.ops == "paddr":
            return
        self._count("cgroups_unsupported")
        why = ("the kernel offers no per-filter passed bytes (sz_filter_passed, 6.14+)"
               if not self.driver.filter_bytes else
               f"the exporter's kdamonds run {self.driver.ops} (--collector.damon.mode)")
        self._say_once("cgroups_unsupported", "damon: per-cgroup hot memory "
                       "(--collector.damon.cgroups) unavailable; hot memory goes on as "
                       "without it", reason=why)

    def _read_modules(self) -> list[DamonModule]:
        """Return the kernel's DAMON modules (none when they cannot be read)."""
        try:
            return self.modules()
        except Exception as exc:  # reading them must never stop the worker
            self._say_once("modules", "damon: the kernel's DAMON modules cannot be read",
                           error=str(exc))
            return []

    def _check_modules(self, mods: Sequence[DamonModule]) -> None:
        """Note, for each kernel DAMON module, whether an exporter kdamond blocks it: it is
        not running while one of ours runs, so enabling it fails now (it starts its kdamond
        exclusively). One that reads ``enabled`` Y yet does not run is a request refused:
        said and counted once per episode. Published in the status."""
        ours = bool(self.driver.pids)
        blocked = {m.name: ours and m.running is not True for m in mods}
        refused = {m.name for m in mods if blocked[m.name] and m.enabled}
        for name in sorted(refused - self._refused_now):
            self._count("module_refused")
            log.warning("damon: a kernel DAMON module is enabled but cannot run while the "
                        "exporter's kdamonds run (--collector.damon.yield-to-modules makes "
                        "way)", module=name)
        self._refused_now = refused
        self._refused = blocked
        with self._lock:
            self._status = replace(self._status, modules_blocked=dict(blocked),
                                   events=dict(self._events))

    def _make_way(self, mods: Sequence[DamonModule]) -> None:
        """Stop the exporter's kdamonds while a kernel DAMON module asks to run
        (--collector.damon.yield-to-modules): said and counted once per episode; DAMON
        reads as ``yielded`` (damon_up 0) until no module asks any more."""
        wanting = sorted(m.name for m in mods if m.enabled)
        if not self._yielded:
            self._yielded = True
            self._count("yielded")
            log.warning("damon: a kernel DAMON module asks to run; the exporter's kdamonds "
                        "stop to make way (--collector.damon.yield-to-modules)",
                        modules=wanting)
        if self.driver.slots:
            self.driver.release()
        self._assigned.clear()
        self._ranges = []
        self._refused, self._refused_now = {m.name: False for m in mods}, set()
        with self._lock:
            self._unavailable["yielded"] = self._unavailable.get("yielded", 0) + 1
        self._publish("yielded")

    def round(self) -> None:
        """Point the kdamonds at the wanted processes and read the hot memory of each
        (paddr: at every node's memory, and read the host's hot and idle bytes). A watched
        process that exited is replaced by the next candidate in the same round; a kdamond
        of the exporter's that something else stopped is started again (both counted in
        ``events``)."""
        if self.driver.ops == "paddr":
            self.round_physical()
            return
        if self.query is None:
            raise DamonUnavailable("absent", "no move_pages to place hot regions")
        with self._lock:
            wanted = list(self._wanted)
        self._gone &= set(wanted)  # forget what the scan no longer names
        hot: dict[int, HotMemory] = {}
        for slot in list(self.driver.slots):
            h = self._serve(slot, wanted)
            if h is not None:
                hot[h.pid] = h
        self._publish("monitoring", hot)

    def _count(self, event: str) -> None:
        with self._lock:
            self._events[event] = self._events.get(event, 0) + 1

    def _next(self, slot: int, wanted: Sequence[Watched]) -> Watched | None:
        """Return the process kdamond ``slot`` should watch: the one it watches when still
        wanted, else the first candidate that is neither gone nor another slot's."""
        current = self._assigned.get(slot)
        if current in wanted and current not in self._gone:
            return current
        taken = {p for s, p in self._assigned.items() if s != slot}
        return next((p for p in wanted if p not in self._gone and p not in taken), None)

    def _serve(self, slot: int, wanted: Sequence[Watched]) -> HotMemory | None:
        """Return the hot memory of the process kdamond ``slot`` watches this round (None
        when no candidate is left), moving on to the next candidate when one exits and
        starting the kdamond again once when something else stopped it."""
        restarted = False
        for _ in range(len(wanted) + 2):
            proc = self._next(slot, wanted)
            if proc is None:
                self._assigned.pop(slot, None)
                return None
            if self._assigned.get(slot) != proc:
                try:
                    self.driver.watch(slot, proc.pid)
                except TargetGone:
                    self._gone_now(slot, proc)
                    continue
                self._assigned[slot] = proc
            try:
                read = self._read(slot)
            except KdamondStopped:
                self._assigned.pop(slot, None)  # watch() again: it finds out which it was
                try:
                    self.driver.watch(slot, proc.pid)
                except TargetGone:
                    self._gone_now(slot, proc)
                    continue
                self._assigned[slot] = proc
                if restarted:
                    raise
                restarted = True
                self._count("kdamond_restarted")
                log.warning("damon: the exporter's kdamond was stopped from outside while "
                            "its process lives; started again", slot=slot, pid=proc.pid)
                continue
            try:
                return self._place(proc, read)
            except SourceError:  # gone or denied since: no hot memory this round
                self._assigned.pop(slot, None)
                return None
        return None

    def _read(self, slot: int) -> RegionRead:
        """Return one read of kdamond ``slot``'s regions; a read with no region at all (the
        kdamond runs, so it has some) is made again, at most EMPTY_READ_RETRIES times."""
        read = self.driver.read_regions(slot)
        for _ in range(EMPTY_READ_RETRIES):
            if read.regions or read.refused:
                break
            read = self.driver.read_regions(slot)
        return read

    def _gone_now(self, slot: int, proc: Watched) -> None:
        self._gone.add(proc)
        self._assigned.pop(slot, None)
        self._count("target_exited")

    def _place(self, proc: Watched, read: RegionRead) -> HotMemory:
        """Return the hot memory of ``proc`` from one read of its kdamond's regions,
        counting the regions refused and a clamp to its resident bytes."""
        assert self.query is not None
        h = place_hot_regions(proc.pid, proc.start_time, read.regions,
                              self.settings.max_accesses, self.threshold,
                              self.query(proc.pid), time.monotonic(),
                              resident_bytes=proc.rss_bytes, refused=read.refused)
        if h.refused_regions:
            with self._lock:
                self._events["regions_refused"] = (self._events.get("regions_refused", 0)
                                                   + h.refused_regions)
            self._say_once("regions_refused", "damon: regions with values no process can "
                           "have were refused (counted)", pid=proc.pid,
                           refused=h.refused_regions)
        if h.clamped:
            self._count("hot_bytes_clamped")
            self._say_once("hot_bytes_clamped", "damon: hot bytes above the process's "
                           "resident bytes were cut to them (counted)", pid=proc.pid)
        return h

    def _say_once(self, key: str, message: str, **kw: object) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message, **kw)

    def _cgroups_to_watch(self) -> list[str] | None:
        """Return the cgroups the paddr kdamond should carry now, or None to keep those it
        has: the first existing candidates up to the flag's count, chosen again every
        RESELECT_S or at once when a watched one is gone (counted)."""
        if not (self.settings.cgroups and self.driver.filter_bytes):
            return None
        with self._lock:
            wanted = list(self._wanted_cgroups)
        now = self.clock()
        current = self.driver.cgroups
        gone = [c for c in current if not self.cgroup_exists(c)]
        due = self._selected_at is None or now - self._selected_at >= RESELECT_S
        if not gone and not due and (current or not wanted):
            return None
        for _ in gone:
            self._count("cgroup_gone")
        pick = [c for c in wanted if c not in gone and self.cgroup_exists(c)]
        pick = pick[: self.settings.cgroups]
        self._selected_at = now
        return None if pick == current else pick

    def _watch_physical(self, slot: int, ranges: list[NodeRange],
                        cgroups: list[str] | None) -> None:
        """Start the paddr kdamond on ``ranges`` with ``cgroups`` (None: those it has); a
        start refused for a cgroup that went meanwhile is made again without the gone ones
        (counted), and without any cgroup when none is found gone."""
        spans = [(r.start, r.end) for r in ranges]
        try:
            self.driver.watch_physical(slot, spans, cgroups)
        except CgroupGone as exc:
            keep = [c for c in exc.cgroups if self.cgroup_exists(c)]
            for _ in range(len(exc.cgroups) - len(keep)):
                self._count("cgroup_gone")
            if keep == exc.cgroups:
                keep = []
                self._say_once("cgroup_start_refused", "damon: the kernel refused the "
                               "cgroup schemes of cgroups that all exist; hot memory per "
                               "cgroup left out until they are chosen again",
                               detail=str(exc))
            self._selected_at = self.clock()
            self.driver.watch_physical(slot, spans, keep)

    def round_physical(self) -> None:
        """Keep the paddr kdamond on every node's memory (with one filtered scheme per
        watched cgroup) and read the host's hot and idle bytes by node and each watched
        cgroup's hot bytes by node. Raises DamonUnavailable ``absent`` without memory
        blocks in sysfs."""
        slot = self.driver.slots[0]
        pick = self._cgroups_to_watch()
        if not self._ranges or pick is not None:
            ranges = self._ranges or self.node_ranges()
            if not ranges:
                raise DamonUnavailable("absent", "no node memory blocks under sysfs "
                                       "(devices/system/node/node<N>/memory<M>)")
            self._watch_physical(slot, ranges, pick)
            self._ranges = ranges
        try:
            reads = self._read_schemes(slot)
        except KdamondStopped:  # something else stopped it: start it again, once
            self._watch_physical(slot, self._ranges, None)
            self._count("kdamond_restarted")
            log.warning("damon: the exporter's paddr kdamond was stopped from outside; "
                        "started again", slot=slot)
            reads = self._read_schemes(slot)
        now = time.monotonic()
        nodes = node_hot_idle(reads[0].regions, self._ranges, self.settings.max_accesses,
                              self.threshold, now)
        cgroups: dict[str, CgroupHotMemory] | None = None
        if self.settings.cgroups and self.driver.filter_bytes:
            cgroups = {}
            for path, read in zip(self.driver.cgroups, reads[1:], strict=False):
                cgroups[path] = cgroup_hot(path, read.regions, self._ranges,
                                           self.settings.max_accesses, self.threshold, now,
                                           refused=read.refused)
                if read.refused:
                    with self._lock:
                        self._events["regions_refused"] = (
                            self._events.get("regions_refused", 0) + read.refused)
                    self._say_once("regions_refused", "damon: regions with values no "
                                   "process can have were refused (counted)", cgroup=path,
                                   refused=read.refused)
        self._publish("monitoring", nodes=nodes, cgroups=cgroups)

    def _read_schemes(self, slot: int) -> list[RegionRead]:
        """Return one read of every scheme of the paddr kdamond ``slot``; a read whose
        unfiltered scheme has no region at all is made again, at most EMPTY_READ_RETRIES
        times."""
        reads = self.driver.read_schemes(slot)
        for _ in range(EMPTY_READ_RETRIES):
            if reads[0].regions or reads[0].refused:
                break
            reads = self.driver.read_schemes(slot)
        return reads


def join_hot(monitor: HotMemoryMonitor, samples: list[ProcessSample]
             ) -> tuple[list[ProcessSample], DamonStatus]:
    """Return the samples with the worker's last hot memory joined (same pid and start
    time) and its status; hands the worker this scan's largest processes to watch next."""
    status = monitor.status()
    now = time.monotonic()
    if status.state == "monitoring" and now - status.monotonic > monitor.max_age_s:
        status = monitor.stalled(now - status.monotonic)
    hot = {pid: h for pid, h in (status.hot or {}).items()
           if now - h.monotonic <= monitor.max_age_s}
    out = []
    for s in samples:
        h = hot.get(s.pid)
        out.append(replace(s, hot=h) if h is not None and abs(h.start_time - s.start_time) < 1
                   else s)
    largest = sorted(samples, key=lambda s: s.rss_bytes, reverse=True)
    monitor.want([Watched(s.pid, s.start_time, s.rss_bytes) for s in largest])
    return out, status


def cgroup_candidates(samples: Sequence[ProcessSample]) -> list[str]:
    """Return the cgroups of the scanned processes, most important first: pod containers
    before other cgroups, each group by the resident bytes of its processes, largest
    first (the root cgroup and processes without a cgroup left out)."""
    rss: dict[str, int] = {}
    pod: set[str] = set()
    for s in samples:
        path = s.kubernetes_cgroup or s.cgroup
        if not path or path == "/":
            continue
        rss[path] = rss.get(path, 0) + max(0, s.rss_bytes)
        if s.kubernetes is not None:
            pod.add(path)
    return sorted(rss, key=lambda p: (p not in pod, -rss[p], p))


def cgroup_homes(samples: Sequence[ProcessSample], paths: Sequence[str],
                 topology: Topology, memory_nodes: frozenset[int] | None
                 ) -> dict[str, frozenset[int]]:
    """Return, for each cgroup of ``paths``, the nodes its hot bytes count as local
    against (model/hot_memory.py ``cgroup_home``), from its scanned processes: the nodes
    the kubelet assigned them (their home's source ``kubelet``), the nodes of the CPUs
    they may run on, the nodes they may allocate from."""
    want = set(paths)
    kubelet: dict[str, set[int]] = {}
    cpus: dict[str, set[int]] = {}
    mems: dict[str, set[int]] = {}
    for s in samples:
        path = s.kubernetes_cgroup or s.cgroup
        if path not in want or path is None:
            continue
        if s.home.source == "kubelet":
            kubelet.setdefault(path, set()).update(s.home.nodes)
        if s.cpus_allowed:
            cpus.setdefault(path, set()).update(topology.nodes_of_cpus(s.cpus_allowed))
        if s.mems_allowed:
            mems.setdefault(path, set()).update(s.mems_allowed)
    all_mem = memory_nodes if memory_nodes else frozenset(topology.cpus)
    return {p: cgroup_home(frozenset(kubelet.get(p, ())), frozenset(cpus.get(p, ())),
                           frozenset(mems.get(p, ())), topology.cpu_nodes(), all_mem)
            for p in paths}


def join_cgroup_hot(monitor: HotMemoryMonitor, samples: Sequence[ProcessSample],
                    status: DamonStatus, topology: Topology,
                    memory_nodes: frozenset[int] | None) -> DamonStatus:
    """Return ``status`` with the home nodes of each watched cgroup (its hot remote
    ratio's reference), and hand the worker this scan's cgroups to choose from."""
    if not monitor.settings.cgroups:
        return status
    monitor.want_cgroups(cgroup_candidates(samples))
    if not status.cgroups:
        return status
    return replace(status, homes=cgroup_homes(samples, list(status.cgroups), topology,
                                              memory_nodes))
