"""The metric contract: every family the exporter serves, with its type, labels and help.

Collectors build families from this table only, the README's metric reference is checked
against it, and dashboards/alerts rely on these names. Families whose names are derived from
what the kernel prints (one counter per ``/proc/vmstat`` or node ``numastat`` field) are
described by a pattern entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "info", "histogram"]

_LAST_SCAN = " Value from the last completed scan."


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: ``name`` is the exposition name (counters include ``_total``)."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    collector: str = "process"
    pattern: bool = False

    @property
    def family_name(self) -> str:
        """Return the name prometheus-client expects (counters/info without their suffix)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name


P = ("pid", "comm")

SPECS: tuple[MetricSpec, ...] = (
    # --- per process -------------------------------------------------------------------
    MetricSpec(
        "numa_process_memory_bytes",
        "gauge",
        "Resident bytes of the process on a NUMA node by kind (anon, file, shmem, hugetlb), "
        "from /proc/<pid>/numa_maps." + _LAST_SCAN,
        (*P, "node", "kind"),
    ),
    MetricSpec(
        "numa_process_policy_memory_bytes",
        "gauge",
        "Resident bytes of the process by the memory policy of their mapping "
        "(default, local, prefer, bind, interleave, weighted_interleave, prefer_many)."
        + _LAST_SCAN,
        (*P, "policy"),
    ),
    MetricSpec(
        "numa_process_local_memory_bytes",
        "gauge",
        "Resident bytes of the process on its home nodes (see numa_process_home_nodes_info)."
        + _LAST_SCAN,
        P,
    ),
    MetricSpec(
        "numa_process_remote_memory_bytes",
        "gauge",
        "Resident bytes of the process on nodes other than its home nodes." + _LAST_SCAN,
        P,
    ),
    MetricSpec(
        "numa_process_remote_memory_ratio",
        "gauge",
        "Remote bytes divided by resident bytes, 0-1; 0 when the process has no resident "
        "memory in numa_maps." + _LAST_SCAN,
        P,
    ),
    MetricSpec(
        "numa_process_home_nodes_info",
        "info",
        "Nodes that count as local for the process and the source that chose them "
        "(config, accelerator, threads, affinity)." + _LAST_SCAN,
        (*P, "nodes", "source"),
    ),
    MetricSpec(
        "numa_process_threads",
        "gauge",
        "Threads of the process whose last CPU is on the node." + _LAST_SCAN,
        (*P, "node"),
    ),
    MetricSpec(
        "numa_process_pages_migrated_total",
        "counter",
        "Pages of the process migrated by automatic NUMA balancing, summed over its threads "
        "(numa_pages_migrated in /proc/<pid>/task/<tid>/sched), where the kernel reports it; "
        "threads that exited still count."
        + _LAST_SCAN,
        P,
    ),
    MetricSpec(
        "numa_process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch; with pid it identifies the process."
        + _LAST_SCAN,
        P,
    ),
    MetricSpec(
        "numa_process_scan_seconds",
        "gauge",
        "Seconds the exporter spent reading this process's files in the last scan "
        "(the numa_maps read walks its page tables).",
        P,
    ),
    MetricSpec(
        "numa_process_memory_bound",
        "gauge",
        "1 when the process's memory is restricted to a subset of the online nodes (bind or "
        "interleave policies, Mems_allowed or cgroup cpuset.mems), else 0." + _LAST_SCAN,
        P,
        collector="binding",
    ),
    MetricSpec(
        "numa_process_cpus_bound",
        "gauge",
        "1 when the process's CPU affinity (Cpus_allowed_list) excludes some online node's CPUs, "
        "else 0." + _LAST_SCAN,
        P,
        collector="binding",
    ),
    MetricSpec(
        "numa_process_binding_mismatch",
        "gauge",
        "1 when the process shows the binding failure mode named by reason: "
        "memory_not_on_thread_nodes, threads_bound_memory_free, "
        "accelerator_node_not_allowed, balancing_with_strict_binding; else 0." + _LAST_SCAN,
        (*P, "reason"),
        collector="binding",
    ),
    MetricSpec(
        "numa_process_baseline_remote_memory_ratio",
        "gauge",
        "Remote memory ratio recorded once the process had warmed up (age and RSS stable)."
        + _LAST_SCAN,
        P,
        collector="drift",
    ),
    MetricSpec(
        "numa_process_remote_memory_ratio_change",
        "gauge",
        "Current remote memory ratio minus the warmed-up baseline (positive: drifted remote)."
        + _LAST_SCAN,
        P,
        collector="drift",
    ),
    MetricSpec(
        "numa_process_node_arrived_bytes_total",
        "counter",
        "Net resident bytes that arrived on the node between consecutive scans of the process."
        + _LAST_SCAN,
        (*P, "node"),
        collector="drift",
    ),
    MetricSpec(
        "numa_process_node_departed_bytes_total",
        "counter",
        "Net resident bytes that left the node between consecutive scans of the process."
        + _LAST_SCAN,
        (*P, "node"),
        collector="drift",
    ),
    MetricSpec(
        "numa_process_accelerator_info",
        "info",
        "Accelerator device the process has open and that device's NUMA node (-1: unknown)."
        + _LAST_SCAN,
        (*P, "device", "node"),
        collector="accelerator",
    ),
    # --- accelerators ------------------------------------------------------------------
    MetricSpec(
        "numa_accelerator_info",
        "info",
        "Accelerator PCI device found through udev, with its NUMA node (-1: the firmware "
        "does not say).",
        ("device", "pci_address", "vendor", "driver", "node"),
        collector="accelerator",
    ),
    # --- cgroups -----------------------------------------------------------------------
    MetricSpec(
        "numa_cgroup_memory_bytes",
        "gauge",
        "Bytes charged to the cgroup on the node by kind, from memory.numa_stat." + _LAST_SCAN,
        ("cgroup", "unit", "node", "kind"),
        collector="cgroup",
    ),
    MetricSpec(
        "numa_cgroup_memory_stat_total",
        "counter",
        "NUMA balancing counters of the cgroup from memory.stat (numa_pages_migrated, "
        "numa_pte_updates, numa_hint_faults, pgpromote_success, pgdemote_*), where the "
        "kernel has them." + _LAST_SCAN,
        ("cgroup", "unit", "counter"),
        collector="cgroup",
    ),
    # --- system ------------------------------------------------------------------------
    MetricSpec(
        "numa_vmstat_<field>_total",
        "counter",
        "Counter <field> from /proc/vmstat (every numa_*, pgmigrate_*, thp_migration_*, "
        "pgpromote_*, pgdemote_* field the kernel prints)." + _LAST_SCAN,
        (),
        collector="vmstat",
        pattern=True,
    ),
    MetricSpec(
        "numa_node_<field>_total",
        "counter",
        "Counter from /sys/devices/system/node/node<N>/numastat (hit, miss, foreign, "
        "interleave_hit, local_node, other_node), in pages." + _LAST_SCAN,
        ("node",),
        collector="node",
        pattern=True,
    ),
    MetricSpec(
        "numa_node_memory_total_bytes",
        "gauge",
        "MemTotal of the node from node<N>/meminfo." + _LAST_SCAN,
        ("node",),
        collector="node",
    ),
    MetricSpec(
        "numa_node_memory_free_bytes",
        "gauge",
        "MemFree of the node from node<N>/meminfo." + _LAST_SCAN,
        ("node",),
        collector="node",
    ),
    MetricSpec(
        "numa_node_memory_bytes",
        "gauge",
        "Every byte-valued field of node<N>/meminfo, by field name." + _LAST_SCAN,
        ("node", "field"),
        collector="node",
    ),
    MetricSpec(
        "numa_node_cpus",
        "gauge",
        "Online CPUs of the node (0 for memory-only nodes such as CXL)." + _LAST_SCAN,
        ("node",),
        collector="node",
    ),
    MetricSpec(
        "numa_node_distance",
        "gauge",
        "SLIT distance from node to to_node (10 = local)." + _LAST_SCAN,
        ("node", "to_node"),
        collector="node",
    ),
    MetricSpec(
        "numa_node_hugepages",
        "gauge",
        "Huge pages of the node by page size and state (total, free, surplus)." + _LAST_SCAN,
        ("node", "page_size_bytes", "state"),
        collector="node",
    ),
    MetricSpec(
        "numa_balancing_mode",
        "gauge",
        "kernel.numa_balancing: 0 off, 1 normal, 2 memory tiering, 3 both; absent when the "
        "kernel has no NUMA balancing." + _LAST_SCAN,
        (),
        collector="balancing",
    ),
    MetricSpec(
        "numa_balancing_promote_rate_limit_bytes_per_second",
        "gauge",
        "kernel.numa_balancing_promote_rate_limit_MBps in bytes per second, where present."
        + _LAST_SCAN,
        (),
        collector="balancing",
    ),
    # --- the exporter itself -----------------------------------------------------------
    MetricSpec(
        "numa_exporter_build_info",
        "info",
        "Version of numa-exporter and of the Python running it.",
        ("version", "python_version"),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_scan_duration_seconds",
        "gauge",
        "Wall time of the last completed scan.",
        (),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_scan_interval_seconds",
        "gauge",
        "The configured --scan.interval.",
        (),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_scan_budget_seconds",
        "gauge",
        "The configured --scan.budget: time a scan may spend on processes.",
        (),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_last_scan_timestamp_seconds",
        "gauge",
        "Unix time at which the last completed scan finished (0 before the first scan).",
        (),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_scans_total",
        "counter",
        "Scans completed since the exporter started.",
        (),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_processes",
        "gauge",
        "Processes in the last scan by state: scanned, skipped (not selected or over the "
        "scan budget), denied (permission), gone (exited while read).",
        ("state",),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_budget_skipped_processes_total",
        "counter",
        "Selected processes left for the next scan because the scan ran past --scan.budget.",
        (),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_parse_errors_total",
        "counter",
        "Malformed lines or files met, by source file (numa_maps, vmstat, status, ...).",
        ("source",),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_read_errors_total",
        "counter",
        "Files that could not be read, by source and reason (denied, gone, error).",
        ("source", "reason"),
        collector="exporter",
    ),
    MetricSpec(
        "numa_exporter_process_scan_seconds",
        "histogram",
        "Seconds spent reading one process's files, over all processes and scans.",
        (),
        collector="exporter",
    ),
)


def by_name() -> dict[str, MetricSpec]:
    """Return the specs keyed by exposition name."""
    return {s.name: s for s in SPECS}
