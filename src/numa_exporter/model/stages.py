"""The values the stages of one process read return, and the pure ``assemble`` that builds
the process's sample from them.

``scan/process.py`` runs the stages in order (identity, threads, placement, Kubernetes,
home, binding, tiers, drift), each returning one value here; :func:`assemble` puts them
together without any I/O, so what a sample holds and where each part came from is read in
one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from numa_exporter.model.binding import Binding
from numa_exporter.model.cadence import Method, Plan, ReadCosts
from numa_exporter.model.home import Home, Locality
from numa_exporter.model.kubernetes import Assignment, ContainerRef
from numa_exporter.model.snapshot import AcceleratorUse, Drift, ProcessSample
from numa_exporter.model.thread_binding import ThreadAudit, ThreadCpus
from numa_exporter.model.threads import ThreadReading
from numa_exporter.model.tiers.process import ProcessTiers
from numa_exporter.model.weighted_interleave import weighted_deviation_ratio
from numa_exporter.parsers.numa_maps import Kind


class SampledPlacement(Protocol):
    """What a sampled reader returns (``readers/sampled/reader.py`` returns the model's
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

    @property
    def path(self) -> str:
        """Return how the pages were drawn: move_pages or pagemap_scan."""
        ...

    @property
    def maps_way(self) -> str:
        """Return how the VMA list was read: text (maps) or query (PROCMAP_QUERY)."""
        ...

    @property
    def moved(self) -> Mapping[tuple[int, int], int] | None:
        """Return the bytes seen moving per (from, to) node since the previous read (None:
        no evidence either way)."""
        ...

    def remote_ratio_stderr(self, home: frozenset[int]) -> float:
        """Return the standard error of the remote ratio against ``home``."""
        ...

    def node_bytes_stderr(self) -> float:
        """Return the largest standard error of the bytes on one node."""
        ...


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the process is: stage 1 (its stat and status)."""

    pid: int
    comm: str
    start_time: float  # seconds since the epoch
    rss_bytes: int
    cpus_allowed: frozenset[int] | None
    mems_allowed: frozenset[int] | None


@dataclass(frozen=True, slots=True)
class Threads:
    """Where the threads run: stage 2. ``readings`` is None when the threads could not be
    listed; ``weights`` are (node, CPU time since the last scan) per thread, the home's
    input; ``pages_migrated`` the process's running total (None: never seen)."""

    readings: list[ThreadReading] | None
    weights: list[tuple[int, float]]
    by_node: dict[int, int]
    pages_migrated: int | None = None
    places: dict[int, ThreadCpus] = field(default_factory=dict)  # mask and last CPU by tid


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a process's pages are, by the method that found out: stage 3."""

    bytes: dict[tuple[int, Kind], int]
    policy_bytes: dict[str, int]
    policy_nodes: dict[tuple[str, frozenset[int]], int]
    off_policy_bytes: int
    method: Method
    estimate: SampledPlacement | None = None
    mappings: int = 0  # mappings read (numa_maps lines)
    # False: the memory policies are unknown, none carried (``model/policies.py``)
    policies_known: bool = True
    # bytes of weighted-interleave mappings by (policy nodes, node); sampled: the last full
    # read's, while its policy view is current (``model/policies.py``), else none
    weighted_nodes: dict[tuple[frozenset[int], int], int] = field(default_factory=dict)
    # True: the last read served again, the change evidence saying nothing changed since
    # (``model/change_evidence.py``); its movement was counted when it was read
    kept: bool = False


@dataclass(frozen=True, slots=True)
class Pod:
    """The process's cgroup and pod: stage 4 (all None outside a pod or collectors off)."""

    cgroup: str | None = None  # memory cgroup path (the cgroup collector)
    container: ContainerRef | None = None
    container_cgroup: str | None = None  # the cgroup path the container was found by
    kubelet: Assignment | None = None


@dataclass(frozen=True, slots=True)
class Homing:
    """Where the process belongs and how far its memory is from there: stage 5."""

    home: Home
    locality: Locality
    accelerators: tuple[AcceleratorUse, ...]
    affinity: frozenset[int] | None  # nodes of the allowed CPUs (and those threads ran on)
    node_bytes: dict[int, int] = field(default_factory=dict)
    audit: ThreadAudit | None = None  # the binding as intended, threads outside it


@dataclass(frozen=True, slots=True)
class Timing:
    """When and at what cost the process was read."""

    scan_seconds: float
    last_scan: float  # wall time of this read
    next_scan: float  # wall time of the next planned read
    plan: Plan | None
    costs: ReadCosts


def assemble(who: Identity, threads: Threads, placed: Placement, pod: Pod, homing: Homing,
             binding: Binding | None, tiers: ProcessTiers | None, drift: Drift | None,
             timing: Timing, interleave: Mapping[int, int] | None = None) -> ProcessSample:
    """Return the sample of one process built from the values of its stages: the one way a
    sample is made. ``interleave``: the host's weighted-interleave node weights (None: not
    asked for, the binding collector off), from which the deviation of the process's
    weighted-interleave pages is computed here."""
    mismatches = dict(binding.mismatches) if binding is not None else {}
    est = placed.estimate
    plan = timing.plan
    return ProcessSample(
        pid=who.pid,
        comm=who.comm,
        start_time=who.start_time,
        rss_bytes=who.rss_bytes,
        memory=placed.bytes,
        policy_bytes=placed.policy_bytes,
        policy_nodes=placed.policy_nodes,
        threads_by_node=threads.by_node,
        home=homing.home,
        locality=homing.locality,
        pages_migrated=threads.pages_migrated,
        scan_seconds=timing.scan_seconds,
        cpus_allowed=who.cpus_allowed,
        mems_allowed=who.mems_allowed,
        cgroup=pod.cgroup,
        accelerators=homing.accelerators,
        memory_bound=binding.memory_bound if binding is not None else None,
        cpus_bound=binding.cpus_bound if binding is not None else None,
        mismatches=mismatches,
        drift=drift,
        last_scan_timestamp=timing.last_scan,
        method=placed.method,
        samples=est.samples if est is not None else None,
        remote_ratio_stderr=(est.remote_ratio_stderr(homing.home.nodes) if est is not None
                             else None),
        path=est.path if est is not None else "full",
        node_bytes_stderr=est.node_bytes_stderr() if est is not None else None,
        next_scan_timestamp=timing.next_scan,
        full_read_cpu=timing.costs.full_cpu,
        sampled_read_cpu=timing.costs.sampled_cpu,
        hold_seconds=plan.hold_seconds if plan is not None else timing.costs.hold,
        placement_reason=plan.reason if plan is not None else None,
        unsampled_bytes=est.unsampled_bytes if est is not None else None,
        kubernetes=pod.container,
        kubernetes_cgroup=pod.container_cgroup,
        kubelet=pod.kubelet,
        tiers=tiers,
        thread_audit=homing.audit,
        weighted_deviation=(weighted_deviation_ratio(placed.weighted_nodes, interleave)
                            if interleave is not None and placed.weighted_nodes else None),
    )
