"""Machine-wide reads: topology (on start and on hotplug) and per-scan node/vmstat counters."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from numa_exporter.model.snapshot import HugePages, SystemSample
from numa_exporter.model.topology import Topology, build_topology
from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.node_distance import parse_node_distance
from numa_exporter.parsers.node_meminfo import parse_node_meminfo
from numa_exporter.parsers.numa_balancing import parse_numa_balancing, parse_sysctl_int
from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.sysfs import NodeSysFS

# (source, detail) -> called for each malformed file or line
ParseErrorSink = Callable[[str, str], None]
ReadErrorSink = Callable[[SourceError], None]
T = TypeVar("T")


def _read_parsed(read: Callable[[], bytes], parse: Callable[[bytes], T | None], source: str,
                 path: str, parse_error: ParseErrorSink, read_error: ReadErrorSink) -> T | None:
    """Return ``parse(read())``; None (reported to the sinks) when unreadable or malformed."""
    try:
        value = parse(read())
    except SourceError as err:
        read_error(err)
        return None
    if value is None:
        parse_error(source, path)
    return value


def read_topology(nodes: NodeSysFS, parse_error: ParseErrorSink, read_error: ReadErrorSink
                  ) -> Topology:
    """Return the machine's topology from sysfs; unreadable parts are reported and left out."""
    try:
        online_raw = nodes.online()
    except SourceError as err:
        read_error(err)
        online_raw = None
    if online_raw is None:
        ids = nodes.node_dirs()
        online = frozenset(ids) if ids else None
    else:
        online = parse_cpulist(online_raw)
        if online is None:
            parse_error("node_online", f"{nodes.root}/online")
            online = frozenset(nodes.node_dirs()) or None
    cpus: dict[int, frozenset[int]] = {}
    rows: dict[int, tuple[int, ...]] = {}
    for node in sorted(online or ()):
        base = f"{nodes.root}/node{node}"
        c = _read_parsed(partial(nodes.cpulist, node), parse_cpulist, "node_cpulist",
                         f"{base}/cpulist", parse_error, read_error)
        if c is not None:
            cpus[node] = c
        row = _read_parsed(partial(nodes.distance, node), parse_node_distance,
                           "node_distance", f"{base}/distance", parse_error, read_error)
        if row is not None:
            rows[node] = row
    return build_topology(online, cpus, rows)


def read_system(
    proc: ProcFS,
    nodes: NodeSysFS,
    topology: Topology,
    parse_error: ParseErrorSink,
    read_error: ReadErrorSink,
    *,
    vmstat: bool = True,
    node: bool = True,
    balancing: bool = True,
) -> SystemSample:
    """Return the per-scan system counters; each unreadable or malformed file is reported."""
    vm: dict[str, int] = {}
    if vmstat:
        try:
            parsed = parse_vmstat(proc.vmstat())
            if parsed.error_count:
                parse_error("vmstat", f"{proc.root}/vmstat:{parsed.first_error_line}")
            vm = parsed.numa_counters()
        except SourceError as err:
            read_error(err)
    meminfo: dict[int, dict[str, int]] = {}
    numastat: dict[int, dict[str, int]] = {}
    huge: dict[int, dict[int, HugePages]] = {}
    if node and topology.numa:
        for n in topology.nodes:
            try:
                mi = parse_node_meminfo(nodes.meminfo(n))
                if mi.error_count:
                    parse_error("node_meminfo", f"{nodes.root}/node{n}/meminfo")
                meminfo[n] = mi.bytes
            except SourceError as err:
                read_error(err)
            try:
                ns = parse_vmstat(nodes.numastat(n))
                if ns.error_count:
                    parse_error("node_numastat", f"{nodes.root}/node{n}/numastat")
                numastat[n] = ns.values
            except SourceError as err:
                read_error(err)
            try:
                sizes: dict[int, HugePages] = {}
                for size, files in nodes.hugepages(n).items():
                    vals = {k: parse_sysctl_int(v) for k, v in files.items()}
                    if any(v is None for v in vals.values()):
                        parse_error("node_hugepages", f"{nodes.root}/node{n}/hugepages")
                    sizes[size] = HugePages(
                        vals.get("nr_hugepages"), vals.get("free_hugepages"),
                        vals.get("surplus_hugepages"),
                    )
                huge[n] = sizes
            except SourceError as err:
                read_error(err)
    mode: int | None = None
    rate: int | None = None
    if balancing:
        try:
            raw = proc.numa_balancing()
            if raw is not None:
                mode = parse_numa_balancing(raw)
                if mode is None:
                    parse_error("numa_balancing", f"{proc.root}/sys/kernel/numa_balancing")
        except SourceError as err:
            read_error(err)
        try:
            raw = proc.promote_rate_limit()
            if raw is not None:
                mbps = parse_sysctl_int(raw)
                if mbps is None or mbps < 0:
                    parse_error("numa_balancing", "numa_balancing_promote_rate_limit_MBps")
                else:
                    rate = mbps << 20  # the kernel's MB here is MiB (MB_TO_PAGES shifts by 20)
        except SourceError as err:
            read_error(err)
    return SystemSample(
        topology=topology,
        vmstat=vm,
        node_meminfo=meminfo,
        node_numastat=numastat,
        hugepages=huge,
        balancing_mode=mode,
        promote_rate_limit_bytes=rate,
    )
