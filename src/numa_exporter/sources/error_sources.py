"""The names of the files and interfaces whose errors the exporter counts.

``numa_exporter_parse_errors_total`` and ``numa_exporter_read_errors_total`` carry a
``source`` label: one of :data:`SOURCES`, or ``other`` for a name not registered here (a
new reader that forgot to register its source), so the label stays bounded whatever code
names a source. ``tests/unit/test_error_sources.py`` fails on a literal source name in the
code that is missing here, and the test session fails where any test made the code count a
name missing here (:data:`UNREGISTERED`).
"""

from __future__ import annotations

#: Every source name the readers give their errors (the ``source`` label's values).
SOURCES: frozenset[str] = frozenset({
    "affinity",
    "cdi_spec",
    "cdi_specs",
    "cgroup",
    "containerd_spec",
    "cpu_clock",
    "cpu_manager_state",
    "crio_spec",
    "damon",
    "damon_stat",
    "demotion_enabled",
    "dev_char",
    "devices",
    "dra_device",
    "dra_manager_state",
    "fd",
    "kernel_features",
    "kpageflags",
    "ksm",
    "kubelet_assignment",
    "kubelet_internal_checkpoint",
    "kubernetes",
    "maps",
    "memory_block",
    "memory_manager_state",
    "memory_numa_stat",
    "memory_stat",
    "memory_tier",
    "move_pages",
    "node",
    "node_access",
    "node_cpulist",
    "node_distance",
    "node_hugepages",
    "node_meminfo",
    "node_memory",
    "node_numastat",
    "node_online",
    "node_reclaim",
    "node_state",
    "node_vmstat",
    "numa_balancing",
    "numa_maps",
    "nvidia",
    "nvidia_numa_status",
    "osrelease",
    "pagemap",
    "pci_numa_node",
    "pod_logs",
    "proc",
    "process",
    "sched",
    "schedstat",
    "stat",
    "status",
    "system",
    "task",
    "task_stat",
    "tiers",
    "topology",
    "vmstat",
    "weighted_interleave",
})
#: The label value of a name not in :data:`SOURCES`.
OTHER = "other"
#: Names counted as :data:`OTHER` since start (at most :data:`MAX_UNREGISTERED` kept): the
#: test suite fails where code counted a name it did not register.
UNREGISTERED: set[str] = set()
MAX_UNREGISTERED = 100


def bounded(source: str) -> str:
    """Return ``source`` where it is registered, else :data:`OTHER`."""
    if source in SOURCES:
        return source
    if len(UNREGISTERED) < MAX_UNREGISTERED:
        UNREGISTERED.add(source[:100])
    return OTHER
