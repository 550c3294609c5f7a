"""Per-cgroup NUMA memory: ``memory.numa_stat`` and balancing counters, no page-table walk."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from numa_exporter.model.snapshot import CgroupSample
from numa_exporter.parsers.memory_numa_stat import parse_memory_numa_stat
from numa_exporter.parsers.memory_stat import parse_memory_stat
from numa_exporter.parsers.proc_cgroup import ProcCgroup, systemd_unit
from numa_exporter.sources.cgroupfs import CgroupFS
from numa_exporter.sources.errors import SourceError

# memory.numa_stat fields exported as kinds (a bounded set; THP fields are subsets of anon/...)
KINDS = ("anon", "file", "shmem", "anon_thp", "file_thp", "shmem_thp", "kernel_stack",
         "pagetables", "slab_reclaimable", "slab_unreclaimable", "unevictable")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

ParseErrorSink = Callable[[str, str], None]
ReadErrorSink = Callable[[SourceError], None]


def read_cgroups(fs: CgroupFS, groups: Iterable[ProcCgroup], parse_error: ParseErrorSink,
                 read_error: ReadErrorSink) -> tuple[CgroupSample, ...]:
    """Return one sample per distinct cgroup of the given memberships (root cgroup excluded)."""
    seen: dict[str, ProcCgroup] = {}
    for g in groups:
        path = g.path_for("memory")
        if path and path != "/" and path not in seen:
            seen[path] = g
    out: list[CgroupSample] = []
    for path, g in sorted(seen.items()):
        try:
            raw = fs.memory_numa_stat(g.v2_path, g.v1_paths)
        except SourceError as err:
            read_error(err)
            continue
        if raw is None:
            continue
        try:  # the counters are extra: losing them must not lose the placement
            raw_stat = fs.memory_stat(g.v2_path, g.v1_paths)
        except SourceError as err:
            read_error(err)
            raw_stat = None
        ns = parse_memory_numa_stat(raw)
        if ns.error_count:
            parse_error("memory_numa_stat", f"{path}/memory.numa_stat:{ns.first_error_line}")
        ns = ns.in_bytes(PAGE_SIZE)
        memory = {(node, kind): v for kind in KINDS for node, v in ns.nodes.get(kind, {}).items()}
        counters: dict[str, int] = {}
        if raw_stat is not None:
            st = parse_memory_stat(raw_stat)
            if st.error_count:
                parse_error("memory_stat", f"{path}/memory.stat:{st.first_error_line}")
            counters = st.numa_balancing_counters()
        out.append(CgroupSample(path, systemd_unit(path) or "", memory, counters))
    return tuple(out)
