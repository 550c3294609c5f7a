"""Collector ``damon`` (``--collector.damon``, off by default, root only): hot memory from
the exporter's own DAMON kdamonds. Definitions: README "Hot memory (DAMON, 6.12)"."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.hot_memory import EVENTS, hot_remote_ratio
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.text import label_text

from .base import CollectorDef
from .families import family

HOT_BYTES = MetricSpec(
    "numa_process_hot_memory_bytes", "gauge",
    "Bytes of the process that DAMON saw accessed in its last aggregation interval "
    "(--collector.damon.hot-threshold of the samples), by the node their pages are on "
    "(move_pages on 32 pages of each hot region; beyond 256 hot regions, of 256 drawn by "
    "size, each node's share scaled to the size of all hot regions), at most the process's "
    "resident bytes. Only for the processes the exporter's kdamonds watch "
    "(--collector.damon.processes, largest resident first).", ("pid", "node"))
HOT_STDERR = MetricSpec(
    "numa_process_hot_memory_bytes_stderr", "gauge",
    "Largest standard error, in bytes, of numa_process_hot_memory_bytes on one node: the "
    "sampling error of the pages looked up in each hot region, and, beyond 256 hot regions, "
    "of the regions drawn.", ("pid",))
HOT_REMOTE = MetricSpec(
    "numa_process_hot_remote_memory_ratio", "gauge",
    "Share of the process's hot bytes on nodes outside its home nodes (the same home as "
    "numa_process_remote_memory_ratio), 0-1; absent without hot bytes.", ("pid",))
NODE_HOT = MetricSpec(
    "numa_node_hot_memory_bytes", "gauge",
    "Bytes of the node's memory that DAMON saw accessed in its last aggregation interval "
    "(--collector.damon.hot-threshold of the samples), host-wide: physical-address "
    "monitoring of every node's online memory blocks (--collector.damon.mode=paddr, or auto "
    "on a kernel without DAMON_VADDR).", ("node",))
NODE_IDLE = MetricSpec(
    "numa_node_idle_memory_bytes", "gauge",
    "Bytes of the node's memory that DAMON saw not accessed at all in its last aggregation "
    "interval, host-wide (paddr mode, as numa_node_hot_memory_bytes). Free memory counts as "
    "idle.", ("node",))
CGROUP_HOT = MetricSpec(
    "numa_cgroup_hot_memory_bytes", "gauge",
    "Bytes charged to the cgroup that DAMON saw accessed in its last aggregation interval "
    "(--collector.damon.hot-threshold of the samples), by the node they are on: one "
    "physical-address kdamond with a memcg-filtered stat scheme per watched cgroup "
    "(--collector.damon.cgroups: the largest, pod containers first), each hot region's "
    "sz_filter_passed split over the nodes the region lies on. Pages charged to the cgroup "
    "itself, not to its children. Kernels with per-filter passed bytes only (6.14+); pods "
    "are named through numa_cgroup_kubernetes_info (join on cgroup).",
    ("cgroup", "node"))
CGROUP_HOT_REMOTE = MetricSpec(
    "numa_cgroup_hot_remote_memory_ratio", "gauge",
    "Share of the cgroup's hot bytes (numa_cgroup_hot_memory_bytes) on nodes outside its "
    "allowed nodes: the kubelet's assignment of its containers, else the nodes of the CPUs "
    "its processes may run on, else its cpuset.mems.effective; 0-1. Absent without hot "
    "bytes, and where every node is allowed.", ("cgroup",))
UP = MetricSpec(
    "numa_exporter_damon_up", "gauge",
    "1 while the exporter's own kdamonds monitor; 0 when DAMON cannot be used (reason in "
    "numa_exporter_damon_unavailable_total and the log).", ())
UNAVAILABLE = MetricSpec(
    "numa_exporter_damon_unavailable_total", "counter",
    "Times DAMON could not be used, by reason: absent (no DAMON sysfs), busy (EBUSY: "
    "another DAMON user such as DAMON_RECLAIM), foreign (kdamonds the exporter does not own "
    "exist: left untouched), denied, not_root, run_dir (the run directory is a link, another "
    "user's or writable by others, or its state file is no small regular file), stalled "
    "(the worker's last result is older than its bound: no hot memory joined), yielded "
    "(stopped while a kernel DAMON module is enabled), error.",
    ("reason",))

EVENTS_TOTAL = MetricSpec(
    "numa_exporter_damon_events_total", "counter",
    "Events of the exporter's own kdamonds, by event: target_exited (a watched process "
    "exited; the next largest is watched in the same round), kdamond_restarted (something "
    "else stopped an own kdamond while its process lived; started again), regions_refused "
    "(regions with values no process has: not a decimal of 0..2^64-1, end not above start, "
    "or cut at the highest user address, 2^56), hot_bytes_clamped (hot bytes above the "
    "process's resident bytes, cut to them), module_refused (a kernel DAMON module was "
    "enabled while an exporter kdamond ran: refused; once per episode), yielded (the "
    "exporter's kdamonds stopped for a module, --collector.damon.yield-to-modules), "
    "cgroup_gone (a watched cgroup was removed; its scheme dropped), cgroups_unsupported "
    "(--collector.damon.cgroups asked for on a kernel without per-filter passed bytes, "
    "or with the kdamonds in vaddr mode; once per start, hot memory goes on without it).",
    ("event",),
    bounds=(("event", len(EVENTS)),))

MODULE_BLOCKED = MetricSpec(
    "numa_exporter_damon_module_blocked", "gauge",
    "1 while one of the kernel's DAMON modules present (damon_reclaim, damon_lru_sort, "
    "damon_stat) is not running and an exporter kdamond runs: enabling the module fails "
    "now (it starts its kdamond exclusively); 0 otherwise. A module enabled yet not running "
    "is counted in numa_exporter_damon_events_total{event=\"module_refused\"}; "
    "--collector.damon.yield-to-modules makes way for an enabled module.",
    ("module",), bounds=(("module", 3),))

SPECS = (HOT_BYTES, HOT_STDERR, HOT_REMOTE, NODE_HOT, NODE_IDLE, CGROUP_HOT, CGROUP_HOT_REMOTE,
         UP, UNAVAILABLE, EVENTS_TOTAL, MODULE_BLOCKED)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the hot-memory families (nothing with --collector.damon off)."""
    st = snap.damon
    if st is None:
        return
    hb, he, hr, nh, ni, ch, cr, up, un, ev, mr = (family(s) for s in SPECS)
    for p in snap.processes:
        if p.hot is None:
            continue
        for node, b in sorted(p.hot.bytes_by_node.items()):
            hb.add_metric([str(p.pid), str(node)], b)
        he.add_metric([str(p.pid)], p.hot.stderr_bytes)
        ratio = hot_remote_ratio(p.hot.bytes_by_node, p.home.nodes)
        if ratio is not None:
            hr.add_metric([str(p.pid)], ratio)
    if st.nodes is not None:
        for node, b in sorted(st.nodes.hot.items()):
            nh.add_metric([str(node)], b)
        for node, b in sorted(st.nodes.idle.items()):
            ni.add_metric([str(node)], b)
    homes = st.homes or {}
    for path, c in sorted((st.cgroups or {}).items()):
        for node, b in sorted(c.bytes_by_node.items()):
            ch.add_metric([label_text(path), str(node)], b)
        ratio = hot_remote_ratio(c.bytes_by_node, homes.get(path, frozenset()))
        if ratio is not None:
            cr.add_metric([label_text(path)], ratio)
    up.add_metric([], 1 if st.state == "monitoring" else 0)
    for reason, n in sorted((st.unavailable or {}).items()):
        un.add_metric([reason], n)
    events = st.events or {}
    for event in EVENTS:
        ev.add_metric([event], events.get(event, 0))
    for module, blocked in sorted((st.modules_blocked or {}).items()):
        mr.add_metric([module], 1 if blocked else 0)
    yield from (hb, he, hr, nh, ni, ch, cr, up, un, ev, mr)


COLLECTOR = CollectorDef(
    "damon", "hot memory from DAMON (off by default: --collector.damon; root, 6.12 or any "
    "kernel with DAMON_SYSFS and DAMON_VADDR, or DAMON_PADDR for per-node hot and idle "
    "bytes)", SPECS, emit, default_on=False)
