"""Collector ``process``: per-process placement read from /proc/<pid>/numa_maps and friends."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.cadence import Method
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.cpulist import format_cpulist

from . import process_cost
from .base import CollectorDef
from .families import family

# Per-process families carry pid only: comm, which a process may change at will
# (PR_SET_NAME), is on numa_process_info alone, so a rename mints one series, not one per
# family. Join it back with `* on (instance, job, pid) group_left (comm) numa_process_info`.
P = ("pid",)

INFO = MetricSpec(
    "numa_process_info", "info",
    "Always 1; the process's name (comm) for its pid. The other numa_process_* families "
    "carry pid only: join with * on (instance, job, pid) group_left (comm) "
    "numa_process_info.",
    ("pid", "comm"))
MEMORY = MetricSpec(
    "numa_process_memory_bytes", "gauge",
    "Resident bytes of the process on the node, by page kind (anon, file, shmem, hugetlb), "
    "from /proc/<pid>/numa_maps; kind=\"all\" (the sum over kinds, one series per node) for "
    "a process at the summary level (see --process.detail-above and --process.detail-top).",
    (*P, "node", "kind"), fold="kind", bounds=(("node", "nodes"), ("kind", 4)))
POLICY = MetricSpec(
    "numa_process_policy_memory_bytes", "gauge",
    "Resident bytes of the process by the memory policy of the mapping holding them "
    "(default, local, prefer, bind, interleave, weighted_interleave, prefer_many); for a "
    "sampled process, the shares of its last full read applied to its sampled bytes, absent "
    "where none stands (--placement.policy-interval).",
    (*P, "policy"), level="full", bounds=(("policy", 7),))
LOCAL = MetricSpec(
    "numa_process_local_memory_bytes", "gauge",
    "Resident bytes of the process on its home nodes (see numa_process_home_nodes_info).", P)
REMOTE = MetricSpec(
    "numa_process_remote_memory_bytes", "gauge",
    "Resident bytes of the process on nodes other than its home nodes.", P)
RATIO = MetricSpec(
    "numa_process_remote_memory_ratio", "gauge",
    "Share of the process's resident bytes that sit on nodes other than its home nodes, 0-1 "
    "(0 without resident memory); an estimate when numa_process_placement_info has "
    "method=sampled.", P)
HOME = MetricSpec(
    "numa_process_home_nodes_info", "info",
    "Always 1; the labels name the process's home nodes (nodes: the nodes counted as local) "
    "and what chose them (source: config, kubelet, binding, accelerator, threads, affinity, "
    "in that precedence; binding: the nodes of the process's CPU binding as intended, see "
    "docs/binding.md).",
    (*P, "nodes", "source"))
THREADS = MetricSpec(
    "numa_process_threads", "gauge",
    "Threads of the process whose last CPU is on the node.", (*P, "node"), level="full",
    bounds=(("node", "nodes"),))
MIGRATED = MetricSpec(
    "numa_process_pages_migrated_total", "counter",
    "Pages of the process that automatic NUMA balancing migrated, summed over its threads "
    "(numa_pages_migrated in /proc/<pid>/task/<tid>/sched; threads that exited still count); "
    "absent where the kernel does not report it.", P)
START = MetricSpec(
    "numa_process_start_time_seconds", "gauge",
    "Start time of the process in seconds since the Unix epoch; with pid it identifies one "
    "process.", P)
READ_DURATION = MetricSpec(
    "numa_process_read_duration_seconds", "gauge",
    "Seconds the exporter spent reading the process's files when it last read them (a full "
    "numa_maps read walks the process's page tables).", P, level="full")
LAST_READ = MetricSpec(
    "numa_process_last_scan_timestamp_seconds", "gauge",
    "Unix time at which the exporter last read the process; older than the last scan when "
    "the process was not read again and its values are carried over.", P)
NEXT_READ = MetricSpec(
    "numa_process_next_scan_timestamp_seconds", "gauge",
    "Unix time at which the exporter plans to read the process next; absent when reads are "
    "not planned per process.", P)
PLACEMENT = MetricSpec(
    "numa_process_placement_info", "info",
    "Always 1; the method label says how the process's placement was measured: full (every "
    "mapping of numa_maps) or sampled (estimated from a sample of its pages); the path label "
    "how its pages were found: full, move_pages (sampled over its mappings) or pagemap_scan "
    "(sparse mappings narrowed to their present pages first, by PAGEMAP_SCAN from 6.7, by "
    "reading pagemap before).",
    (*P, "method", "path"))
SAMPLED_PAGES = MetricSpec(
    "numa_process_placement_sampled_pages", "gauge",
    "Pages whose node was looked up to estimate the placement of the process; absent for a "
    "full read.", P, level="full")
RATIO_STDERR = MetricSpec(
    "numa_process_remote_memory_ratio_stderr", "gauge",
    "Standard error of numa_process_remote_memory_ratio: 0 for a full read, the sampling "
    "error of a sampled estimate (absent when unknown; 0 is left out for processes at the "
    "summary level, see --process.detail-above).", P, drop_zero="summary")
NODE_STDERR = MetricSpec(
    "numa_process_memory_bytes_stderr", "gauge",
    "Largest standard error, in bytes, of the process's resident bytes on one node (the sum "
    "of numa_process_memory_bytes over kinds): 0 for a full read; for a sampled estimate it "
    "shrinks read after read while nothing of the process moves (earlier reads' samples are "
    "carried; 0 is left out for processes at the summary level).", P,
    drop_zero="summary")

PLACEMENT_SPECS = (INFO, MEMORY, POLICY, LOCAL, REMOTE, RATIO, HOME, THREADS, MIGRATED, START,
                   READ_DURATION, LAST_READ, NEXT_READ, PLACEMENT, SAMPLED_PAGES, RATIO_STDERR,
                   NODE_STDERR)
SPECS = (*PLACEMENT_SPECS, *process_cost.SPECS)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the per-process placement families of the snapshot's processes."""
    (info, mem, pol, loc, rem, ratio, home, thr, mig, start, cost, last, nxt, how, pages, err,
     nerr) = (family(s) for s in PLACEMENT_SPECS)
    for p in snap.processes:
        lv = [str(p.pid)]
        info.add_metric([*lv, p.comm], 1)  # comm is label text from its parser
        for (node, kind), b in sorted(p.memory.items()):
            mem.add_metric([*lv, str(node), kind.value], b)
        for policy, b in sorted(p.policy_bytes.items()):
            pol.add_metric([*lv, policy], b)
        loc.add_metric(lv, p.locality.local_bytes)
        rem.add_metric(lv, p.locality.remote_bytes)
        ratio.add_metric(lv, p.locality.remote_ratio)
        home.add_metric([*lv, format_cpulist(set(p.home.nodes)), p.home.source], 1)
        for node, n in sorted(p.threads_by_node.items()):
            thr.add_metric([*lv, str(node)], n)
        if p.pages_migrated is not None:
            mig.add_metric(lv, p.pages_migrated)
        start.add_metric(lv, p.start_time)
        cost.add_metric(lv, p.scan_seconds)
        if p.last_scan_timestamp is not None:
            last.add_metric(lv, p.last_scan_timestamp)
        if p.next_scan_timestamp is not None:
            nxt.add_metric(lv, p.next_scan_timestamp)
        how.add_metric([*lv, str(p.method), p.path], 1)
        if p.samples is not None:
            pages.add_metric(lv, p.samples)
        stderr = p.remote_ratio_stderr
        if stderr is None and p.method == Method.FULL:
            stderr = 0.0  # every page was counted: no sampling error
        if stderr is not None:
            err.add_metric(lv, stderr)
        node_err = 0.0 if p.method == Method.FULL else p.node_bytes_stderr
        if node_err is not None:
            nerr.add_metric(lv, node_err)
    yield from (info, mem, pol, loc, rem, ratio, home, thr, mig, start, cost, last, nxt, how,
                pages, err, nerr)
    yield from process_cost.emit(snap)


COLLECTOR = CollectorDef(
    "process", "per-process placement (numa_process_*): bytes per node, local/remote, threads",
    SPECS, emit)
