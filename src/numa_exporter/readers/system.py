"""Machine-wide reads: topology (on start and on hotplug) and per-scan node/vmstat counters."""

from __future__ import annotations

from functools import partial

from numa_exporter.model.change_evidence import HostCounters, host_counters
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
from numa_exporter.sources.sysfs import KSM_FILES, KsmSysFS, NodeSysFS


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


def read_ksm(ksm: KsmSysFS, errors: ErrorReporter) -> tuple[int, ...] | None:
    """Return KSM's ``run``, ``pages_shared``, ``pages_sharing`` and ``full_scans`` (``()``
    on a kernel without KSM; ``(0,)`` while ksmd is stopped: nothing merges then, and an
    unmerge is a fault of the process; None where a file is unreadable or malformed,
    reported)."""
    try:
        run = ksm.run()
        if run is None:
            return ()
        state = parse_sysctl_int(run)
        if state == 0:
            return (0,)
        files = ksm.files()
    except SourceError as err:
        errors.read(err)
        return None
    vals = (state, *(parse_sysctl_int(files[name]) for name in KSM_FILES[1:]))
    if any(v is None for v in vals):
        errors.parse("ksm", str(ksm.root))
        return None
    return tuple(v for v in vals if v is not None)


def read_system(
    proc: ProcFS,
    nodes: NodeSysFS,
    topology: Topology,
    errors: ErrorReporter,
    *,
    vmstat: bool = True,
    node: bool = True,
    balancing: bool = True,
    ksm: KsmSysFS | None = None,
) -> SystemSample:
    """Return the per-scan system counters; each unreadable or malformed file is reported.

    With ``ksm`` the host's change counters are read too (``change_counters``: vmstat and
    the balancing mode are then read whatever ``vmstat`` and ``balancing`` say)."""
    vm: dict[str, int] = {}
    whole: dict[str, int] | None = None
    if vmstat or ksm is not None:
        parsed = errors.read_parsed("vmstat", f"{proc.root}/vmstat", proc.vmstat, parse_vmstat)
        whole = parsed.values if parsed is not None and not parsed.error_count else None
        vm = parsed.numa_counters() if parsed is not None and vmstat else {}
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
    if balancing or ksm is not None:
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
    counters: HostCounters | None = None
    if ksm is not None:
        counters = host_counters(whole, read_ksm(ksm, errors), mode)
    return SystemSample(
        topology=topology,
        change_counters=counters,
        vmstat=vm,
        node_meminfo=meminfo,
        node_numastat=numastat,
        hugepages=huge,
        balancing_mode=mode,
        promote_rate_limit_bytes=rate,
    )
