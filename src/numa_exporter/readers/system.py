"""Machine-wide reads: topology (on start and on hotplug) and per-scan node/vmstat counters."""

from __future__ import annotations

from functools import partial

from numa_exporter.model.snapshot import HugePages, SystemSample
from numa_exporter.model.topology import Topology, build_topology
from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.node_distance import parse_node_distance
from numa_exporter.parsers.node_meminfo import parse_node_meminfo
from numa_exporter.parsers.numa_balancing import parse_numa_balancing, parse_sysctl_int
from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.sysfs import NodeSysFS


def read_topology(nodes: NodeSysFS, errors: ErrorReporter) -> Topology:
    """Return the machine's topology from sysfs; unreadable parts are reported and left out."""
    base = str(nodes.root)
    online = errors.read_parsed("node_online", f"{base}/online", nodes.online, parse_cpulist)
    if online is None:
        online = frozenset(nodes.node_dirs()) or None
    cpus: dict[int, frozenset[int]] = {}
    rows: dict[int, tuple[int, ...]] = {}
    for node in sorted(online or ()):
        at = f"{base}/node{node}"
        c = errors.read_parsed("node_cpulist", f"{at}/cpulist", partial(nodes.cpulist, node),
                               parse_cpulist)
        if c is not None:
            cpus[node] = c
        row = errors.read_parsed("node_distance", f"{at}/distance",
                                 partial(nodes.distance, node), parse_node_distance)
        if row is not None:
            rows[node] = row
    return build_topology(online, cpus, rows)


def _hugepages(nodes: NodeSysFS, node: int, errors: ErrorReporter) -> dict[int, HugePages]:
    sizes: dict[int, HugePages] = {}
    for size, files in nodes.hugepages(node).items():
        vals = {k: parse_sysctl_int(v) for k, v in files.items()}
        if any(v is None for v in vals.values()):
            errors.parse("node_hugepages", f"{nodes.root}/node{node}/hugepages")
        sizes[size] = HugePages(vals.get("nr_hugepages"), vals.get("free_hugepages"),
                                vals.get("surplus_hugepages"))
    return sizes


def read_system(
    proc: ProcFS,
    nodes: NodeSysFS,
    topology: Topology,
    errors: ErrorReporter,
    *,
    vmstat: bool = True,
    node: bool = True,
    balancing: bool = True,
) -> SystemSample:
    """Return the per-scan system counters; each unreadable or malformed file is reported."""
    vm: dict[str, int] = {}
    if vmstat:
        parsed = errors.read_parsed("vmstat", f"{proc.root}/vmstat", proc.vmstat, parse_vmstat)
        vm = parsed.numa_counters() if parsed is not None else {}
    meminfo: dict[int, dict[str, int]] = {}
    numastat: dict[int, dict[str, int]] = {}
    huge: dict[int, dict[int, HugePages]] = {}
    if node and topology.numa:
        for n in topology.nodes:
            at = f"{nodes.root}/node{n}"
            mi = errors.read_parsed("node_meminfo", f"{at}/meminfo",
                                    partial(nodes.meminfo, n), parse_node_meminfo)
            if mi is not None:
                meminfo[n] = mi.bytes
            ns = errors.read_parsed("node_numastat", f"{at}/numastat",
                                    partial(nodes.numastat, n), parse_vmstat)
            if ns is not None:
                numastat[n] = ns.values
            try:
                huge[n] = _hugepages(nodes, n, errors)
            except SourceError as err:
                errors.read(err)
    mode: int | None = None
    rate: int | None = None
    if balancing:
        sysctl = f"{proc.root}/sys/kernel"
        mode = errors.read_parsed("numa_balancing", f"{sysctl}/numa_balancing",
                                  proc.numa_balancing, parse_numa_balancing)
        mbps = errors.read_parsed("numa_balancing",
                                  f"{sysctl}/numa_balancing_promote_rate_limit_MBps",
                                  proc.promote_rate_limit, parse_sysctl_int)
        if mbps is not None and mbps < 0:
            errors.parse("numa_balancing", f"{sysctl}/numa_balancing_promote_rate_limit_MBps")
        elif mbps is not None:
            rate = mbps << 20  # the kernel's MB here is MiB (MB_TO_PAGES shifts by 20)
    return SystemSample(
        topology=topology,
        vmstat=vm,
        node_meminfo=meminfo,
        node_numastat=numastat,
        hugepages=huge,
        balancing_mode=mode,
        promote_rate_limit_bytes=rate,
    )
