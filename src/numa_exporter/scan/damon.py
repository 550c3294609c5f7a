"""The hot-memory worker (``--collector.damon``): a thread that keeps the exporter's own
kdamonds on the largest watched processes (vaddr) or on every node's physical memory
(paddr) and reads their regions, off the scan thread's critical path (a region read blocks
about one aggregation interval). The scan only hands it the processes it watches and takes
its last result."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from numa_exporter.model.hot_memory import DamonStatus, HotMemory, NodeRange
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.readers.hot_memory import QueryFn, node_hot_idle, place_hot_regions
from numa_exporter.sources.damon import DamonSettings, DamonSysfs, DamonUnavailable, Region
from numa_exporter.sources.errors import SourceError

log = structlog.get_logger()
RETRY_S = 300.0  # a DAMON that was busy, foreign or absent is tried again this often
# region reads per round (each about one aggregation interval): a region counts as hot when
# it was in any of them. One interval alone is noisy where the process is not on a CPU for
# all of it (measured in the TCG guest: 3 of 10 scrapes of a hot set read no hot bytes).
READS_PER_ROUND = 3


@dataclass(frozen=True, slots=True)
class Watched:
    """A process to watch: pid and start time (a reused pid is another process)."""

    pid: int
    start_time: float


class HotMemoryMonitor:
    """Owns the DAMON driver; ``want`` (scan thread) names the processes, ``status`` (scan
    thread) returns the last result; everything else runs on the worker thread."""

    def __init__(self, driver: DamonSysfs, query: Callable[[int], QueryFn] | None,
                 threshold: float, period_s: float = 1.0, is_root: bool = True,
                 node_ranges: Callable[[], list[NodeRange]] = list) -> None:
        self.driver = driver
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
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- scan thread ----------------------------------------------------------------------
    def want(self, processes: Sequence[Watched]) -> None:
        """Name the processes to watch, most important first (at most one per kdamond)."""
        with self._lock:
            self._wanted = list(processes[: self.settings.slots])

    def status(self) -> DamonStatus:
        """Return the worker's last result (never blocks on DAMON)."""
        with self._lock:
            return self._status

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
    def _unavailable_now(self, reason: str, detail: str) -> None:
        self._unavailable[reason] = self._unavailable.get(reason, 0) + 1
        if reason not in self._said:
            self._said.add(reason)
            log.warning("damon: hot memory unavailable; everything else keeps serving",
                        reason=reason, detail=detail)
        with self._lock:
            self._status = DamonStatus(reason, {}, dict(self._unavailable))

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
            if not self.driver.slots:
                self.driver.claim()
            self.round()
            return self.period_s
        except DamonUnavailable as exc:
            self._unavailable_now(exc.reason, str(exc))
        except Exception as exc:  # a bug here costs hot memory, never the daemon
            self._unavailable_now("error", f"{type(exc).__name__}: {exc}")
        return RETRY_S

    def round(self) -> None:
        """Point the kdamonds at the wanted processes and read the hot memory of each
        (paddr: at every node's memory, and read the host's hot and idle bytes)."""
        if self.driver.ops == "paddr":
            self.round_physical()
            return
        if self.query is None:
            raise DamonUnavailable("absent", "no move_pages to place hot regions")
        query = self.query
        with self._lock:
            wanted = list(self._wanted)
        for slot, proc in zip(self.driver.slots, wanted, strict=False):
            if self._assigned.get(slot) != proc:
                try:
                    self.driver.watch(slot, proc.pid)
                    self._assigned[slot] = proc
                except DamonUnavailable as exc:
                    if exc.reason != "error":
                        raise
                    self._assigned.pop(slot, None)  # the process exited meanwhile
        hot: dict[int, HotMemory] = {}
        for slot, proc in list(self._assigned.items()):
            if proc not in wanted:
                continue
            try:
                reads = [self.driver.regions(slot) for _ in range(READS_PER_ROUND)]
                hot[proc.pid] = place_hot_regions(
                    proc.pid, proc.start_time, hottest(reads), self.settings.max_accesses,
                    self.threshold, query(proc.pid), time.monotonic())
            except SourceError:  # gone or denied since: no hot memory this round
                self._assigned.pop(slot, None)
        with self._lock:
            self._status = DamonStatus("monitoring", hot, dict(self._unavailable))


    def round_physical(self) -> None:
        """Keep the paddr kdamond on every node's memory and read the host's hot and idle
        bytes by node. Raises DamonUnavailable ``absent`` without memory blocks in sysfs."""
        slot = self.driver.slots[0]
        if not self._ranges:
            ranges = self.node_ranges()
            if not ranges:
                raise DamonUnavailable("absent", "no node memory blocks under sysfs "
                                       "(devices/system/node/node<N>/memory<M>)")
            self.driver.watch_physical(slot, [(r.start, r.end) for r in ranges])
            self._ranges = ranges
        reads = [self.driver.regions(slot) for _ in range(READS_PER_ROUND)]
        if not any(reads):  # the kdamond stopped: start it again next round
            self._ranges = []
        nodes = node_hot_idle(hottest(reads), self._ranges, self.settings.max_accesses,
                              self.threshold, time.monotonic())
        with self._lock:
            self._status = DamonStatus("monitoring", {}, dict(self._unavailable), nodes)


def hottest(reads: Sequence[Sequence[Region]]) -> list[Region]:
    """Return the regions of the read with the most bytes accessed at all (several reads of
    one kdamond's regions, each one aggregation interval)."""
    best: list[Region] = []
    most = -1
    for rs in reads:
        n = sum(r.end - r.start for r in rs if r.nr_accesses > 0)
        if n > most:
            best, most = list(rs), n
    return best


def join_hot(monitor: HotMemoryMonitor, samples: list[ProcessSample]
             ) -> tuple[list[ProcessSample], DamonStatus]:
    """Return the samples with the worker's last hot memory joined (same pid and start
    time) and its status; hands the worker this scan's largest processes to watch next."""
    status = monitor.status()
    hot = status.hot or {}
    out = []
    for s in samples:
        h = hot.get(s.pid)
        out.append(replace(s, hot=h) if h is not None and abs(h.start_time - s.start_time) < 1
                   else s)
    largest = sorted(samples, key=lambda s: s.rss_bytes, reverse=True)
    monitor.want([Watched(s.pid, s.start_time) for s in largest])
    return out, status
