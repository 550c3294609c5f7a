"""Collector ``exporter``: the exporter's own health; always on (no flag)."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from numa_exporter import __version__
from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.read_times import ReadTimes
from numa_exporter.model.snapshot import Outcome, Snapshot
from numa_exporter.sources.error_sources import SOURCES

from .base import CollectorDef
from .families import family

# every process the scan considered is in exactly one state (model.snapshot.Outcome)
STATES = tuple(Outcome)

BUILD = MetricSpec(
    "numa_exporter_build_info", "info",
    "Always 1; the version of numa-exporter and of the Python running it.",
    ("version", "python_version"))
SCAN_DURATION = MetricSpec(
    "numa_exporter_scan_duration_seconds", "gauge",
    "Wall time in seconds of the last completed scan.")
SCAN_INTERVAL = MetricSpec(
    "numa_exporter_scan_interval_seconds", "gauge",
    "The configured --scan.interval in seconds: time between scans.")
SCAN_BUDGET = MetricSpec(
    "numa_exporter_scan_budget_seconds", "gauge",
    "The configured --scan.budget in seconds: time a scan may spend on processes.")
LAST_SCAN = MetricSpec(
    "numa_exporter_last_scan_timestamp_seconds", "gauge",
    "Unix time at which the last completed scan finished (0 before the first scan).")
SCANS = MetricSpec(
    "numa_exporter_scans_total", "counter",
    "Scans completed since the exporter started.")
PROCESSES = MetricSpec(
    "numa_exporter_processes", "gauge",
    "Processes in the last scan by state, each in exactly one: scanned (read), kept (not "
    "read this scan, by the budget or the cadence: served with their last values), skipped "
    "(not selected, or over the scan budget with no values to keep), denied (permission), "
    "gone (exited while read).",
    ("state",), bounds=(("state", len(STATES)),))
BUDGET_SKIPPED = MetricSpec(
    "numa_exporter_budget_skipped_processes_total", "counter",
    "Selected processes left for the next scan because a scan ran past --scan.budget.")
PARSE_ERRORS = MetricSpec(
    "numa_exporter_parse_errors_total", "counter",
    "Malformed lines or files met, by source file (numa_maps, vmstat, status, ...).",
    ("source",), bounds=(("source", len(SOURCES) + 1),))  # registered names and "other"
READ_ERRORS = MetricSpec(
    "numa_exporter_read_errors_total", "counter",
    "Files that could not be read, by source file and reason (denied, gone, error).",
    ("source", "reason"), bounds=(("source", len(SOURCES) + 1), ("reason", 3)))
PROCESS_READ_DURATION = MetricSpec(
    "numa_exporter_process_read_duration_seconds", "histogram",
    "Seconds the exporter spent reading one process's files, over every process read since "
    "it started (numa_process_read_duration_seconds is the last read of each process).")

SCAN_STAGE = MetricSpec(
    "numa_exporter_scan_stage_seconds", "gauge",
    "CPU seconds (the scanning thread's) the last scan spent in each stage: system (vmstat, "
    "node files), select (listing and screening processes), processes (reading them), "
    "cgroups.", ("stage",), bounds=(("stage", 4),))

PLACEMENT_SKIPPED = MetricSpec(
    "numa_exporter_placement_reads_skipped_total", "counter",
    "Placement reads (numa_maps or sampled) not made, the last read served as current, by "
    "reason: unchanged (no fault of the process, the same resident size, and no migration, "
    "THP collapse, KSM merge or swap on the host since that read; docs/movement.md).",
    ("reason",), bounds=(("reason", 1),))
EVIDENCE_VERIFICATIONS = MetricSpec(
    "numa_exporter_change_evidence_verifications_total", "counter",
    "Placements the change evidence would have served again that were read to verify it "
    "(each at most every 5 minutes, a few processes a scan).")
EVIDENCE_DISAGREEMENTS = MetricSpec(
    "numa_exporter_change_evidence_disagreements_total", "counter",
    "Verifications whose full read differed from the placement the change evidence kept "
    "(the process's own counters unchanged across the read): the evidence missed a change.")
KERNEL_FEATURE = MetricSpec(
    "numa_exporter_kernel_feature_available", "gauge",
    "1 where the kernel offers the feature, 0 where it was found absent at start (the "
    "families that need it are then absent; the start log says which): memory_tiers, "
    "balancing_tiering, damon_sysfs, preferred_many, pagemap_scan, procmap_query, "
    "weighted_interleave, node_reclaim. Features that cannot be told (ioctls and mbind on a "
    "procfs root that is not the live one) are not reported.",
    ("feature",), bounds=(("feature", 8),))

SPECS = (BUILD, SCAN_DURATION, SCAN_INTERVAL, SCAN_BUDGET, LAST_SCAN, SCANS, PROCESSES,
         BUDGET_SKIPPED, PARSE_ERRORS, READ_ERRORS, PROCESS_READ_DURATION, SCAN_STAGE,
         PLACEMENT_SKIPPED, EVIDENCE_VERIFICATIONS, EVIDENCE_DISAGREEMENTS, KERNEL_FEATURE)


def read_time_family(times: ReadTimes) -> Metric:
    """Return the per-process read-time histogram family (with its ``_created`` sample)."""
    s = PROCESS_READ_DURATION
    f = HistogramMetricFamily(s.family_name, s.help)
    f.add_metric([], [(_le(b), n) for b, n in times.cumulative()], times.sum)
    f.samples.append(Sample(f"{s.family_name}_created", {}, times.created))
    return f


def _le(bound: float) -> str:
    """Return a bucket bound as prometheus-client writes it (``1.0``, ``+Inf``)."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the exporter's own families: build, timing, outcomes, errors, read times,
    kernel features."""
    st = snap.stats
    f = family(BUILD)
    f.add_metric([__version__, platform.python_version()], 1)
    yield f
    for spec, value in ((SCAN_DURATION, st.duration_seconds),
                        (SCAN_INTERVAL, st.scan_interval),
                        (SCAN_BUDGET, st.scan_budget),
                        (LAST_SCAN, st.timestamp),
                        (SCANS, st.scans)):
        f = family(spec)
        f.add_metric([], value)
        yield f
    f = family(PROCESSES)
    for state in STATES:
        f.add_metric([state.value], st.states.get(state, 0))
    yield f
    f = family(BUDGET_SKIPPED)
    f.add_metric([], st.budget_skipped_total)
    yield f
    f = family(PARSE_ERRORS)
    for source, n in sorted(st.parse_errors.items()):
        f.add_metric([source], n)
    yield f
    f = family(READ_ERRORS)
    for (source, reason), n in sorted(st.read_errors.items()):
        f.add_metric([source, reason], n)
    yield f
    yield read_time_family(st.read_times)
    f = family(SCAN_STAGE)
    for stage, sec in st.stage_seconds:
        f.add_metric([stage], sec)
    yield f
    f = family(PLACEMENT_SKIPPED)
    f.add_metric(["unchanged"], st.placement_reads_skipped.get("unchanged", 0))
    yield f
    for spec, value in ((EVIDENCE_VERIFICATIONS, st.evidence_verifications),
                        (EVIDENCE_DISAGREEMENTS, st.evidence_disagreements)):
        f = family(spec)
        f.add_metric([], value)
        yield f
    f = family(KERNEL_FEATURE)
    for name, offered in st.kernel_features:
        f.add_metric([name], 1 if offered else 0)
    yield f


COLLECTOR = CollectorDef(
    "exporter", "the exporter itself: scans, outcomes, errors, read times", SPECS, emit,
    switchable=False)
