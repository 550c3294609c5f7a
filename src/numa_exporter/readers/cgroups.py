"""Per-cgroup NUMA memory: ``memory.numa_stat`` and balancing counters, no page-table walk."""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import partial

from numa_exporter.model.snapshot import CgroupSample
from numa_exporter.parsers.memory_numa_stat import parse_memory_numa_stat
from numa_exporter.parsers.memory_stat import parse_memory_stat
from numa_exporter.parsers.proc_cgroup import ProcCgroup, systemd_unit
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.cgroupfs import CgroupFS

# memory.numa_stat fields exported as kinds (a bounded set; THP fields are subsets of anon/...)
KINDS = ("anon", "file", "shmem", "anon_thp", "file_thp", "shmem_thp", "kernel_stack",
         "pagetables", "slab_reclaimable", "slab_unreclaimable", "unevictable")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_cgroups(fs: CgroupFS, groups: Iterable[ProcCgroup], errors: ErrorReporter
                 ) -> tuple[CgroupSample, ...]:
    """Return one sample per distinct cgroup of the given memberships (root cgroup excluded).

    A cgroup whose ``memory.numa_stat`` cannot be read is left out; one whose
    ``memory.stat`` cannot be read keeps its placement and loses only the counters.
    """
    seen: dict[str, ProcCgroup] = {}
    for g in groups:
        path = g.path_for("memory")
        if path and path != "/" and path not in seen:
            seen[path] = g
    out: list[CgroupSample] = []
    for path, g in sorted(seen.items()):
        ns = errors.read_parsed("memory_numa_stat", f"{path}/memory.numa_stat",
                                partial(fs.memory_numa_stat, g.v2_path, g.v1_paths),
                                parse_memory_numa_stat)
        if ns is None:
            continue
        ns = ns.in_bytes(PAGE_SIZE)
        memory = {(node, kind): v for kind in KINDS for node, v in ns.nodes.get(kind, {}).items()}
        st = errors.read_parsed("memory_stat", f"{path}/memory.stat",
                                partial(fs.memory_stat, g.v2_path, g.v1_paths),
                                parse_memory_stat)
        counters = st.numa_balancing_counters() if st is not None else {}
        out.append(CgroupSample(path, systemd_unit(path) or "", memory, counters))
    return tuple(out)
