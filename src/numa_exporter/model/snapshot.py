"""The immutable result of one scan; collectors read nothing else."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from numa_exporter.model.cadence import Method, Reason
from numa_exporter.model.change_evidence import HostCounters
from numa_exporter.model.home import Home, Locality
from numa_exporter.model.hot_memory import DamonStatus, HotMemory
from numa_exporter.model.kubernetes import Assignment, ContainerRef, KubernetesView
from numa_exporter.model.read_times import ReadTimes
from numa_exporter.model.thread_binding import ThreadAudit
from numa_exporter.model.tiers.host import SystemTiers
from numa_exporter.model.tiers.process import ProcessTiers
from numa_exporter.model.topology import Topology
from numa_exporter.model.weighted_interleave import InterleaveWeights
from numa_exporter.parsers.numa_maps import Kind, fold_nodes


class Outcome(StrEnum):
    """The state a process considered by a scan ends in, one each (their sum is the
    processes listed with user memory; kernel threads are not counted)."""

    SCANNED = "scanned"  # read this scan
    KEPT = "kept"  # not read this scan; its last values served again
    SKIPPED = "skipped"  # not read and nothing to serve (screened out, over the budget, ...)
    DENIED = "denied"  # its files are not readable to the exporter
    GONE = "gone"  # exited while it was read


def new_outcomes() -> Counter[Outcome]:
    """Return a zero count per outcome."""
    return Counter(dict.fromkeys(Outcome, 0))


@dataclass(frozen=True, slots=True)
class AcceleratorUse:
    """An accelerator a process has open, that device's node (-1: unknown) and the CPUs
    nearest to it (its PCI ``local_cpulist``; None: unknown)."""

    device: str
    pci_address: str
    node: int
    local_cpus: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Drift:
    """Placement change of one process since its warmed-up baseline."""

    baseline_remote_ratio: float | None
    arrived_bytes: dict[int, int] = field(default_factory=dict)  # node -> cumulative bytes
    departed_bytes: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """Everything the exporter knows about one process after a scan."""

    pid: int
    comm: str
    start_time: float  # seconds since the epoch
    rss_bytes: int
    memory: dict[tuple[int, Kind], int]
    policy_bytes: dict[str, int]
    policy_nodes: dict[tuple[str, frozenset[int]], int]
    threads_by_node: dict[int, int]
    home: Home
    locality: Locality
    pages_migrated: int | None
    scan_seconds: float
    cpus_allowed: frozenset[int] | None
    mems_allowed: frozenset[int] | None
    cgroup: str | None = None
    accelerators: tuple[AcceleratorUse, ...] = ()
    memory_bound: bool | None = None
    cpus_bound: bool | None = None
    mismatches: dict[str, bool] = field(default_factory=dict)
    drift: Drift | None = None
    # weighted-interleave pages: fraction off the node weights (None: none, or no weights)
    weighted_deviation: float | None = None
    hot: HotMemory | None = None  # DAMON's hot bytes by node (--collector.damon)
    # when and how the placement was read (a process not read again keeps its last values)
    last_scan_timestamp: float | None = None  # Unix time this process was last read
    next_scan_timestamp: float | None = None  # Unix time of its next planned read
    method: Method = Method.FULL  # how the placement was read
    samples: int | None = None  # pages sampled; None for a full read
    remote_ratio_stderr: float | None = None  # standard error of the ratio; None/0 when full
    # how the pages were found: "full" (numa_maps), "move_pages" (sampled over the
    # mappings) or "pagemap_scan" (sampled within present runs found by PAGEMAP_SCAN)
    path: str = "full"
    node_bytes_stderr: float | None = None  # largest per-node standard error (bytes)
    # CPU seconds of the last full and sampled reads (None: not measured), and the
    # estimated longest mmap-lock hold of a full read, that chose the method
    full_read_cpu: float | None = None
    sampled_read_cpu: float | None = None
    hold_seconds: float | None = None
    placement_reason: Reason | None = None  # why the method was chosen
    unsampled_bytes: int | None = None  # resident bytes a sampled estimate could not place
    # the pod container the process runs in (None: not in one, or the collector is off),
    # the cgroup path it was found by, and what the kubelet assigned that container
    kubernetes: ContainerRef | None = None
    kubernetes_cgroup: str | None = None
    kubelet: Assignment | None = None
    tiers: ProcessTiers | None = None  # by accessor and tier, spans, faults (issue 17)
    # the binding as intended and the threads outside it (None: binding collector off)
    thread_audit: ThreadAudit | None = None

    def node_bytes(self) -> dict[int, int]:
        """Return resident bytes per node over all kinds."""
        return fold_nodes(self.memory)


@dataclass(frozen=True, slots=True)
class HugePages:
    """Huge page counts of one size on one node."""

    total: int | None
    free: int | None
    surplus: int | None


@dataclass(frozen=True, slots=True)
class SystemSample:
    """Machine-wide NUMA state read in a scan."""

    topology: Topology = field(default_factory=Topology)
    vmstat: dict[str, int] = field(default_factory=dict)
    node_meminfo: dict[int, dict[str, int]] = field(default_factory=dict)  # bytes by field
    node_numastat: dict[int, dict[str, int]] = field(default_factory=dict)
    hugepages: dict[int, dict[int, HugePages]] = field(default_factory=dict)
    balancing_mode: int | None = None
    promote_rate_limit_bytes: int | None = None
    tiers: SystemTiers | None = None  # node classes, memory tiers, HMAT (tiers collector)
    # nodes with memory (has_memory), whatever collectors run; None where unknown
    memory_nodes: frozenset[int] | None = None
    node_vmstat: dict[int, dict[str, int]] = field(default_factory=dict)  # promote/demote
    # pgscan_*, pgsteal_*, pgrefill of node<N>/vmstat (7.1+; node collector)
    node_reclaim: dict[int, dict[str, int]] = field(default_factory=dict)
    demotion_enabled: bool | None = None
    weighted_interleave: InterleaveWeights | None = None  # 6.9+; node or binding collector
    # the host's counters of events that move pages (model/change_evidence.py); None: unread
    change_counters: HostCounters | None = None


@dataclass(frozen=True, slots=True)
class AcceleratorDevice:
    """An accelerator of the machine."""

    device: str
    pci_address: str
    vendor: str
    driver: str
    node: int


@dataclass(frozen=True, slots=True)
class CgroupSample:
    """NUMA memory of one cgroup: bytes by (node, kind) and balancing counters."""

    path: str
    unit: str
    memory: dict[tuple[int, str], int]
    counters: dict[str, int]


@dataclass(frozen=True, slots=True)
class ExporterStats:
    """Counters about the exporter itself, cumulative since start unless noted."""

    scans: int = 0
    duration_seconds: float = 0.0  # last scan
    timestamp: float = 0.0  # last scan end, 0 before the first
    states: Counter[Outcome] = field(default_factory=new_outcomes)  # last scan
    budget_skipped_total: int = 0
    parse_errors: dict[str, int] = field(default_factory=dict)
    read_errors: dict[tuple[str, str], int] = field(default_factory=dict)
    # per-process read times since start, as they were when the scan ended
    read_times: ReadTimes = field(default_factory=ReadTimes)
    # the configuration the scan ran under (the exporter collector reports them)
    scan_interval: float = 0.0
    scan_budget: float = 0.0
    # CPU seconds of the last scan by stage (system, select, processes, cgroups), in order
    stage_seconds: tuple[tuple[str, float], ...] = ()
    # placement reads not made, by reason (unchanged: the change evidence kept the last
    # read), real reads that verified a kept placement, and those that disagreed with it
    placement_reads_skipped: dict[str, int] = field(default_factory=dict)
    evidence_verifications: int = 0
    evidence_disagreements: int = 0
    # kernel features detected at start: (name, offered), the ones that could be told
    kernel_features: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The last completed scan."""

    system: SystemSample = field(default_factory=SystemSample)
    processes: tuple[ProcessSample, ...] = ()
    accelerators: tuple[AcceleratorDevice, ...] = ()
    cgroups: tuple[CgroupSample, ...] = ()
    kubernetes: KubernetesView = field(default_factory=KubernetesView)
    stats: ExporterStats = field(default_factory=ExporterStats)
    damon: DamonStatus | None = None  # None: --collector.damon off
    # pids of the processes at full detail, decided by the scan with hysteresis
    # (model/detail_level.py); None: not decided (collectors/detail.py decides by size)
    full_detail: frozenset[int] | None = None
