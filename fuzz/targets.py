"""Fuzz targets: one per parser, each checking totality and the parser's invariants.

A target takes arbitrary bytes, calls the parser and raises ``AssertionError`` when the
result is not the parser's type or breaks an invariant (negative counts, ids beyond the
kernel's bounds, text that is not valid UTF-8 ...). Any other exception escaping the parser is
a defect in its own right: parsers never raise.

Seeds come from the real kernel captures and fixture roots under ``tests/fixtures``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# The kernel's bounds (not the parsers' constants: the targets check the parsers against them).
NR_CPUS = 8192
MAX_NUMNODES = 1024
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
SEED_DIRS = (FIXTURES / "realkernel", FIXTURES / "roots", FIXTURES / "cgroup",
             FIXTURES / "kubelet", FIXTURES / "sched", FIXTURES / "page_sizes",
             FIXTURES / "mempolicy", FIXTURES / "realkernel-6.12",
             FIXTURES / "memory_blocks")
MAX_SEEDS = 300
MAX_SEED_BYTES = 256 * 1024


def _is_safe_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in s)


def _nodes_ok(ids: frozenset[int] | set[int] | None) -> bool:
    return ids is None or all(0 <= i < MAX_NUMNODES for i in ids)


def _cpus_ok(ids: frozenset[int] | set[int] | None) -> bool:
    return ids is None or all(0 <= i < NR_CPUS for i in ids)


def _errors_ok(count: int, first: int | None) -> bool:
    return count >= 0 and (first is None) == (count == 0) and (first is None or first >= 1)


def fuzz_numa_maps(data: bytes) -> None:
    from numa_exporter.parsers.numa_maps import Kind, NumaMaps, parse_numa_maps

    # the kernel ends lines with \n only (bytes.splitlines would also split at \r)
    lines = [line + b"\n" for line in data.split(b"\n")]
    r = parse_numa_maps(lines)
    assert isinstance(r, NumaMaps)
    non_blank = sum(1 for line in lines if line.strip())
    assert r.mappings >= 0 and r.error_count >= 0
    assert r.mappings + r.error_count == non_blank, (r.mappings, r.error_count, non_blank)
    assert len(r.errors) <= r.error_count
    for (node, kind), b in r.bytes.items():
        assert 0 <= node < MAX_NUMNODES, node
        assert isinstance(kind, Kind) and b >= 0
    assert all(b >= 0 for b in r.policy_bytes.values())
    assert sum(r.policy_bytes.values()) == sum(r.bytes.values())
    for (_, nodes), b in r.policy_nodes.items():
        assert _nodes_ok(nodes) and b >= 0
    for e in r.errors:
        assert e.lineno >= 1
        e.text.encode("utf-8")


def fuzz_pid_sched(data: bytes) -> None:
    from numa_exporter.parsers.pid_sched import PidSched, parse_pid_sched

    r = parse_pid_sched(data)
    assert isinstance(r, PidSched)
    assert r.error_count >= 0
    assert r.numa_pages_migrated is None or r.numa_pages_migrated >= 0, r.numa_pages_migrated
    assert r.total_numa_faults is None or r.total_numa_faults >= 0
    # numa_preferred_nid is -1 when the task has no preferred node
    assert r.numa_preferred_nid is None or -1 <= r.numa_preferred_nid < MAX_NUMNODES
    assert r.current_node is None or 0 <= r.current_node < MAX_NUMNODES, r.current_node
    assert _nodes_ok(set(r.numa_faults)), sorted(r.numa_faults)[:3]
    assert all(v >= 0 for v in r.numa_faults.values())
    assert r.numa_format in ("absent", "current", "legacy")
    nodes = [ln.node for ln in r.fault_lines]
    assert len(nodes) == len(set(nodes)) and _nodes_ok(set(nodes)), nodes[:3]
    assert r.numa_faults == {ln.node: ln.task_total for ln in r.fault_lines}
    for ln in r.fault_lines:
        assert min(ln.task_private, ln.task_shared, ln.group_private, ln.group_shared) >= 0
    assert r.numa_group_id is None or 0 <= r.numa_group_id <= 4 * 1024 * 1024
    if r.numa_format != "current":  # absent, or legacy: refused whole
        assert not r.fault_lines and r.current_node is None and r.numa_group_id is None
    if r.numa_format == "legacy":
        assert r.numa_pages_migrated is None


def fuzz_osrelease(data: bytes) -> None:
    from numa_exporter.parsers.osrelease import KernelRelease, parse_osrelease

    r = parse_osrelease(data)
    assert r is None or isinstance(r, KernelRelease)
    if r is not None:
        assert r.major >= 0 and r.minor >= 0 and (r.patch is None or r.patch >= 0)
        assert 0 < len(r.text) <= 64 and r.text.isascii() and r.text.isprintable()
        assert " " not in r.text


def fuzz_demotion_enabled(data: bytes) -> None:
    from numa_exporter.parsers.demotion_enabled import parse_demotion_enabled

    r = parse_demotion_enabled(data)
    assert r is None or isinstance(r, bool)
    assert (r is None) == (data not in (b"true\n", b"false\n", b"true", b"false"))


def fuzz_block_size_bytes(data: bytes) -> None:
    from numa_exporter.parsers.block_size_bytes import parse_block_size_bytes

    r = parse_block_size_bytes(data)
    assert r is None or (isinstance(r, int) and 0 < r < 1 << 64), r
    if r is not None:  # the kernel's form (bare hex), an optional 0x, one optional newline
        text = data.removesuffix(b"\n")
        assert int(text.removeprefix(b"0x").removeprefix(b"0X"), 16) == r


def fuzz_weighted_interleave(data: bytes) -> None:
    from numa_exporter.parsers.weighted_interleave import (
        parse_weighted_interleave_auto,
        parse_weighted_interleave_node,
        weighted_interleave_node_id,
    )

    w = parse_weighted_interleave_node(data)
    assert w is None or (isinstance(w, int) and 1 <= w <= 255), w  # the kernel's u8, never 0
    if w is not None:  # only the kernel's own form: decimal digits and one optional newline
        assert data.rstrip(b"\n").isdigit() and data.count(b"\n") <= 1
    a = parse_weighted_interleave_auto(data)
    assert (a is None) == (data not in (b"true\n", b"false\n", b"true", b"false"))
    name = data.decode("utf-8", "replace")
    n = weighted_interleave_node_id(name)
    assert n is None or (0 <= n < 10_000 and name == f"node{n}"), (n, name)


def fuzz_node_access(data: bytes) -> None:
    from numa_exporter.parsers.node_access import ATTRIBUTES, NodeAccess, parse_node_access

    # the same bytes as every attribute, and split at newlines as initiator entry names
    names = data.decode("utf-8", "surrogateescape").split("\n")
    r = parse_node_access(0, dict.fromkeys(ATTRIBUTES, data), names)
    assert isinstance(r, NodeAccess) and r.error_count in (0, len(ATTRIBUTES))
    assert _nodes_ok(set(r.initiators))
    for v in (r.read_latency_seconds, r.write_latency_seconds):
        assert v is None or 0 < v <= 4.3
    for b in (r.read_bandwidth_bytes_per_second, r.write_bandwidth_bytes_per_second):
        assert b is None or (0 < b < (1 << 52) and b % (1 << 20) == 0)


def fuzz_pid_stat(data: bytes) -> None:
    from numa_exporter.parsers.pid_stat import PidStat, parse_pid_stat

    r = parse_pid_stat(data)
    if r is None:
        return
    assert isinstance(r, PidStat)
    assert r.pid > 0 and _is_safe_text(r.comm), r
    assert min(r.ppid, r.utime, r.stime, r.num_threads, r.starttime) >= 0, r
    assert r.processor is None or 0 <= r.processor < NR_CPUS, r.processor


def fuzz_pid_pagemap(data: bytes) -> None:
    from numa_exporter.parsers.pid_pagemap import MAX_ENTRIES, PagemapEntries, parse_pid_pagemap

    r = parse_pid_pagemap(data)
    assert isinstance(r, PagemapEntries)
    assert len(r.entries) == min(len(data) // 8, MAX_ENTRIES) and r.error_count >= 0
    assert (r.error_count == 0) == (len(data) % 8 == 0 and len(data) // 8 <= MAX_ENTRIES)
    for e in r.entries:
        assert e.pfn is None or (e.present and 0 < e.pfn < 1 << 55), e


def fuzz_kpageflags(data: bytes) -> None:
    from numa_exporter.parsers.kpageflags import MAX_ENTRIES, KpageflagsEntries, parse_kpageflags

    r = parse_kpageflags(data)
    assert isinstance(r, KpageflagsEntries)
    assert len(r.entries) == min(len(data) // 8, MAX_ENTRIES) and r.error_count >= 0
    for f in r.entries:
        assert not (f.huge and f.nopage), f


def fuzz_pid_pagemap_scan(data: bytes) -> None:
    from numa_exporter.parsers.pid_pagemap_scan import (
        MAX_REGIONS,
        PageRegions,
        parse_pagemap_scan,
    )

    r = parse_pagemap_scan(data)
    assert isinstance(r, PageRegions)
    whole = min(len(data) // 24, MAX_REGIONS)
    assert len(r.regions) + r.error_count >= whole and len(r.regions) <= whole
    for g in r.regions:
        assert 0 <= g.start < g.end < 1 << 64, g


def fuzz_pid_status(data: bytes) -> None:
    from numa_exporter.parsers.pid_status import PidStatus, parse_pid_status

    r = parse_pid_status(data)
    assert isinstance(r, PidStatus)
    assert r.error_count >= 0 and _is_safe_text(r.name)
    for v in (r.tgid, r.uid, r.threads, r.vm_rss, r.rss_anon, r.rss_file, r.rss_shmem,
              r.hugetlb):
        assert v is None or v >= 0, r
    assert _cpus_ok(r.cpus_allowed) and _nodes_ok(r.mems_allowed)


def fuzz_cpulist(data: bytes) -> None:
    from numa_exporter.parsers.cpulist import format_cpulist, parse_cpulist

    r = parse_cpulist(data)
    assert r is None or isinstance(r, frozenset)
    assert _cpus_ok(r)
    if r is not None:
        assert parse_cpulist(format_cpulist(set(r))) == r
    assert _nodes_ok(parse_cpulist(data, MAX_NUMNODES - 1))


def fuzz_vmstat(data: bytes) -> None:
    import re

    from numa_exporter.parsers.vmstat import Vmstat, parse_vmstat

    r = parse_vmstat(data)
    assert isinstance(r, Vmstat)
    assert _errors_ok(r.error_count, r.first_error_line)
    for k, v in r.values.items():  # names become parts of metric names
        assert re.fullmatch(r"[A-Za-z0-9_]+", k) and v >= 0, (k, v)


def fuzz_node_meminfo(data: bytes) -> None:
    from numa_exporter.parsers.node_meminfo import NodeMeminfo, parse_node_meminfo

    r = parse_node_meminfo(data)
    assert isinstance(r, NodeMeminfo) and r.error_count >= 0
    for k, v in (*r.bytes.items(), *r.counts.items()):
        assert k.isascii() and _is_safe_text(k) and v >= 0, (k, v)


def fuzz_node_distance(data: bytes) -> None:
    from numa_exporter.parsers.node_distance import parse_node_distance

    r = parse_node_distance(data)
    assert r is None or (isinstance(r, tuple) and len(r) <= MAX_NUMNODES)
    assert r is None or all(v >= 0 for v in r)


def fuzz_nvidia_numa_status(data: bytes) -> None:
    from numa_exporter.parsers.nvidia_numa_status import STATES, parse_nvidia_numa_status

    r = parse_nvidia_numa_status(data)
    assert r.node is None or 0 <= r.node < MAX_NUMNODES
    assert r.status is None or r.status in STATES
    assert r.online_node is None or r.online_node == r.node
    assert r.errors >= 0


def fuzz_numa_balancing(data: bytes) -> None:
    from numa_exporter.parsers.numa_balancing import parse_numa_balancing, parse_sysctl_int

    mode = parse_numa_balancing(data)
    assert mode is None or mode in (0, 1, 2, 3)
    v = parse_sysctl_int(data)
    assert v is None or isinstance(v, int)


def fuzz_stat(data: bytes) -> None:
    from numa_exporter.parsers.proc_stat import parse_btime

    r = parse_btime(data)
    assert r is None or (isinstance(r, int) and r >= 0), r


def fuzz_proc_cgroup(data: bytes) -> None:
    from numa_exporter.parsers.proc_cgroup import ProcCgroup, parse_proc_cgroup
    from numa_exporter.parsers.text import label_text

    r = parse_proc_cgroup(data)
    assert isinstance(r, ProcCgroup) and r.error_count >= 0
    paths = [r.v2_path, *r.v1_paths.values()]
    for p in paths:
        assert p is None or p.startswith("/")
        if p is not None:
            assert _is_safe_text(label_text(p))
    unit = r.unit
    assert unit is None or unit.endswith((".service", ".scope"))
    for c in ("memory", "cpuset"):
        assert r.path_for(c) in paths


def fuzz_memory_stat(data: bytes) -> None:
    from numa_exporter.parsers.memory_stat import MemoryStat, parse_memory_stat

    r = parse_memory_stat(data)
    assert isinstance(r, MemoryStat)
    assert _errors_ok(r.error_count, r.first_error_line)
    for k, v in r.values.items():
        assert k.isascii() and _is_safe_text(k) and v >= 0, (k, v)
    assert set(r.numa_balancing_counters()) <= set(r.values)


def fuzz_memory_numa_stat(data: bytes) -> None:
    from numa_exporter.parsers.memory_numa_stat import MemoryNumaStat, parse_memory_numa_stat

    r = parse_memory_numa_stat(data)
    assert isinstance(r, MemoryNumaStat)
    assert _errors_ok(r.error_count, r.first_error_line)
    assert r.version in (None, 1, 2) and r.in_pages == (r.version == 1)
    assert _nodes_ok(r.node_ids())
    for k, per in r.nodes.items():
        assert k.isascii() and _is_safe_text(k)
        assert all(v >= 0 for v in per.values())
    assert all(v >= 0 for v in r.totals.values())
    b = r.in_bytes(4096)
    assert not b.in_pages and set(b.nodes) == set(r.nodes)
    assert set(r.amounts()) <= set(r.nodes)


def fuzz_label_text(data: bytes) -> None:
    from numa_exporter.parsers.text import HASH_MARK, MAX_LABEL_CHARS, label_text, safe_text

    out = label_text(data)
    assert _is_safe_text(out) and len(out) <= MAX_LABEL_CHARS
    # a name that needed no change is itself; a changed one, typed as a name, is not
    # (else a chosen name could take another's label value)
    assert (label_text(out) == out) == (HASH_MARK not in out)
    s = data.decode("utf-8", "surrogateescape")
    assert label_text(s) == out  # the bytes and their surrogateescape text agree
    assert _is_safe_text(safe_text(s))


def fuzz_kubepods_cgroup(data: bytes) -> None:
    from numa_exporter.parsers.kubepods_cgroup import KubepodsCgroup, kubepods_of
    from numa_exporter.parsers.proc_cgroup import parse_proc_cgroup

    r = kubepods_of(parse_proc_cgroup(data))
    assert r is None or isinstance(r, KubepodsCgroup)
    if r is not None:
        assert r.pod_uid.isascii() and len(r.pod_uid) in (32, 36), r
        assert r.container_id == "" or (len(r.container_id) == 64
                                        and r.container_id.isascii()), r
        assert r.qos in ("Guaranteed", "Burstable", "BestEffort", "")
        assert r.kind in ("container", "conmon", "pod", "other")
        assert _is_safe_text(r.container_id_label)


def _checkpoint_ok(version: str, checksum: str, error: str, count: int) -> None:
    """A kubelet checkpoint parses to a version, or to one file-level error saying why."""
    assert count >= 0
    assert bool(version) or (error and count == 1), (version, error, count)
    assert checksum in ("verified", "absent", "mismatch", "unverifiable", "")


def fuzz_cpu_manager_state(data: bytes) -> None:
    from numa_exporter.parsers.kubelet.cpu_manager_state import (
        CpuManagerState,
        parse_cpu_manager_state,
    )

    r = parse_cpu_manager_state(data)
    assert isinstance(r, CpuManagerState)
    assert r.version in ("", "v1", "v2", "v3", "v4")
    _checkpoint_ok(r.version, r.checksum, r.error, r.error_count)
    assert _cpus_ok(r.default_cpus)
    for cpus in [*r.containers.values(), *r.pods.values(), *r.by_container_id.values()]:
        assert _cpus_ok(cpus)


def fuzz_memory_manager_state(data: bytes) -> None:
    from numa_exporter.parsers.kubelet.memory_manager_state import (
        MemoryManagerState,
        parse_memory_manager_state,
    )

    r = parse_memory_manager_state(data)
    assert isinstance(r, MemoryManagerState)
    assert r.version in ("", "v1", "v2", "v3")
    _checkpoint_ok(r.version, r.checksum, r.error, r.error_count)
    assert _nodes_ok(r.machine_nodes)
    for blocks in [*r.containers.values(), *r.pods.values()]:
        for b in blocks:
            assert _nodes_ok(b.nodes) and b.size >= 0


def fuzz_kubelet_internal_checkpoint(data: bytes) -> None:
    from numa_exporter.parsers.kubelet.kubelet_internal_checkpoint import (
        DeviceCheckpoint,
        parse_kubelet_internal_checkpoint,
    )

    r = parse_kubelet_internal_checkpoint(data)
    assert isinstance(r, DeviceCheckpoint)
    assert r.version in ("", "v1", "v2")
    _checkpoint_ok(r.version, r.checksum, r.error, r.error_count)
    for e in r.entries:
        assert all(-1 <= n < MAX_NUMNODES for n in e.devices), e
        assert _nodes_ok(e.nodes)


def fuzz_dra_manager_state(data: bytes) -> None:
    from numa_exporter.parsers.kubelet.dra_manager_state import (
        MAX_DEVICES,
        DraManagerState,
        parse_dra_manager_state,
    )

    r = parse_dra_manager_state(data)
    assert isinstance(r, DraManagerState)
    assert r.version in ("", "v1", "legacy-v1")
    _checkpoint_ok(r.version, r.checksum, r.error, r.error_count)
    assert r.claims >= 0
    if r.checksum == "mismatch":  # refused whole, never half-read
        assert r.pods == {} and r.error_count >= 1
    devices = {id(d) for ds in r.pods.values() for d in ds}
    assert len(devices) <= MAX_DEVICES
    for ds in r.pods.values():
        for d in ds:
            assert all(isinstance(i, str) for i in d.cdi_ids)


def fuzz_cdi_spec(data: bytes) -> None:
    from numa_exporter.parsers.cdi_spec import MAX_DEVICES, MAX_NODES, CdiSpec, parse_cdi_spec

    # the first byte picks the format, so that both readers see every input shape
    name = "spec.json" if data[:1] and data[0] % 2 else "spec.yaml"
    r = parse_cdi_spec(data, name)
    assert isinstance(r, CdiSpec) and r.error_count >= 0
    assert bool(r.kind) or (r.error and r.error_count == 1 and not r.devices), r
    if r.kind:
        vendor, _, cls = r.kind.partition("/")
        assert vendor and cls and "=" not in r.kind
    assert len(r.devices) <= MAX_DEVICES
    for dev, nodes in r.devices.items():
        assert dev and "=" not in dev and "/" not in dev
        assert len(nodes) <= 2 * MAX_NODES  # the device's own and the spec's
        for n in nodes:
            assert n.path.startswith("/") and n.host_path.startswith("/")
            assert n.major is None or 0 < n.major < 1 << 32
            assert n.minor is None or 0 < n.minor < 1 << 32


def fuzz_oci_config(data: bytes) -> None:
    from numa_exporter.parsers.oci_config import OciConfig, parse_oci_config
    from numa_exporter.parsers.pod_log_dir import parse_pod_log_dir

    r = parse_oci_config(data)
    assert isinstance(r, OciConfig) and r.error_count >= 0
    assert r.runtime in ("", "containerd", "cri-o") and r.type in ("", "sandbox", "container")
    for v in (r.namespace, r.pod, r.uid, r.container, r.sandbox_id):
        assert v.isascii() and _is_safe_text(v) and "_" not in v, r
    if r.namespace and r.pod and r.uid:
        assert parse_pod_log_dir(f"{r.namespace}_{r.pod}_{r.uid}") is not None


@dataclass(frozen=True)
class Target:
    """A fuzz target: the function and the fixture file names that seed it."""

    name: str
    run: Callable[[bytes], None]
    seeds: tuple[str, ...]  # glob patterns below each seed directory
    runs: int = 4000  # inputs for the bounded run of the test suite
    known: str | None = None  # an invariant failure found and reported, not yet fixed


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("numa_maps", fuzz_numa_maps, ("**/numa_maps",), runs=600),
    Target("pid_sched", fuzz_pid_sched, ("**/sched", "*.sched")),
    Target("osrelease", fuzz_osrelease, ("**/kernel/osrelease",)),
    Target("demotion_enabled", fuzz_demotion_enabled, ("**/numa/demotion_enabled",)),
    Target("weighted_interleave", fuzz_weighted_interleave, ("**/weighted_interleave/*",)),
    Target("block_size_bytes", fuzz_block_size_bytes, ("**/memory/block_size_bytes",)),
    Target("node_access", fuzz_node_access, ("**/initiators/*_latency",
                                             "**/initiators/*_bandwidth")),
    Target("pid_stat", fuzz_pid_stat, ("**/[0-9]*/stat",)),
    Target("pid_status", fuzz_pid_status, ("**/status",)),
    Target("pid_pagemap", fuzz_pid_pagemap, ("*.pagemap",)),
    Target("kpageflags", fuzz_kpageflags, ("*.kpageflags",)),
    Target("pid_pagemap_scan", fuzz_pid_pagemap_scan, ("*.pagemap_scan",)),
    Target("cpulist", fuzz_cpulist, ("**/cpulist", "**/node/online", "**/node/possible",
                                     "**/node/has_*", "**/cpu/online", "**/*effective*")),
    Target("vmstat", fuzz_vmstat, ("**/vmstat", "**/numastat")),
    Target("node_meminfo", fuzz_node_meminfo, ("**/node[0-9]*/meminfo",)),
    Target("node_distance", fuzz_node_distance, ("**/distance",)),
    Target("nvidia_numa_status", fuzz_nvidia_numa_status, ("**/numa_status",)),
    Target("numa_balancing", fuzz_numa_balancing, ("**/kernel/numa_balancing*",)),
    Target("stat", fuzz_stat, ("**/proc/stat",)),
    Target("proc_cgroup", fuzz_proc_cgroup, ("**/cgroup", "**/*proc-self-cgroup",
                                             "cgroup/proc/*")),
    Target("memory_stat", fuzz_memory_stat, ("**/memory.stat", "**/*memory.stat")),
    Target("memory_numa_stat", fuzz_memory_numa_stat, ("**/memory.numa_stat",
                                                       "**/*memory.numa_stat")),
    Target("label_text", fuzz_label_text, ("**/comm",)),
    Target("kubepods_cgroup", fuzz_kubepods_cgroup, ("*/proc/*/cgroup", "*.cgroup",
                                                     "cgroup/proc/*")),
    Target("cpu_manager_state", fuzz_cpu_manager_state, ("**/cpu_manager_state",)),
    Target("memory_manager_state", fuzz_memory_manager_state, ("**/memory_manager_state",)),
    Target("kubelet_internal_checkpoint", fuzz_kubelet_internal_checkpoint,
           ("**/kubelet_internal_checkpoint",)),
    Target("dra_manager_state", fuzz_dra_manager_state,
           ("**/dra_manager_state", "**/dra-vectors.json")),
    Target("cdi_spec", fuzz_cdi_spec, ("**/cdi/*.yaml", "**/cdi/*.json")),
    Target("oci_config", fuzz_oci_config, ("**/config.json",)),
)}


def seeds(target: Target) -> Iterator[bytes]:
    """Yield the distinct seed inputs of a target (at most MAX_SEEDS, each bounded)."""
    seen: set[bytes] = set()
    for base in SEED_DIRS:
        for pattern in target.seeds:
            for p in sorted(base.glob(pattern)):
                if not p.is_file() or p.is_symlink():
                    continue
                data = p.read_bytes()[:MAX_SEED_BYTES]
                if data in seen:
                    continue
                seen.add(data)
                yield data
                if len(seen) >= MAX_SEEDS:
                    return
