"""The prometheus-client collector: every family, built fresh from the last Snapshot."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from numa_exporter import __version__
from numa_exporter.config import Config
from numa_exporter.model.snapshot import ProcessSample, Snapshot
from numa_exporter.parsers._text import label_text
from numa_exporter.parsers.cpulist import format_cpulist
from numa_exporter.parsers.numa_maps import Kind

from .families import Family, family, histogram, pattern_family

KINDS = tuple(k.value for k in Kind)


class SnapshotCollector(Collector):
    """Serves the snapshot returned by ``get``; a scrape never reads /proc itself."""

    def __init__(self, get: Callable[[], Snapshot | None], config: Config) -> None:
        self.get = get
        self.config = config

    def describe(self) -> list[Metric]:
        """Return no descriptions: families vary with the kernel (registry must not probe)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield every family from the last snapshot."""
        snap = self.get() or Snapshot()
        yield from self._exporter(snap)
        if self.config.enabled("process"):
            yield from self._processes(snap.processes)
        if self.config.enabled("binding"):
            yield from self._binding(snap.processes)
        if self.config.enabled("drift"):
            yield from self._drift(snap.processes)
        if self.config.enabled("accelerator"):
            yield from self._accelerators(snap)
        if self.config.enabled("cgroup"):
            yield from self._cgroups(snap)
        if self.config.enabled("vmstat"):
            yield from self._vmstat(snap)
        if self.config.enabled("node"):
            yield from self._nodes(snap)
        if self.config.enabled("balancing"):
            yield from self._balancing(snap)

    # --- the exporter itself -----------------------------------------------------------
    def _exporter(self, snap: Snapshot) -> Iterator[Metric]:
        st = snap.stats
        f = family("numa_exporter_build_info")
        f.add_metric([__version__, platform.python_version()], 1)
        yield f
        f = family("numa_exporter_scan_duration_seconds")
        f.add_metric([], st.duration_seconds)
        yield f
        f = family("numa_exporter_scan_interval_seconds")
        f.add_metric([], self.config.scan_interval)
        yield f
        f = family("numa_exporter_scan_budget_seconds")
        f.add_metric([], self.config.scan_budget)
        yield f
        f = family("numa_exporter_last_scan_timestamp_seconds")
        f.add_metric([], st.timestamp)
        yield f
        f = family("numa_exporter_scans_total")
        f.add_metric([], st.scans)
        yield f
        f = family("numa_exporter_processes")
        for state in ("scanned", "skipped", "denied", "gone"):
            f.add_metric([state], st.states.get(state, 0))
        yield f
        f = family("numa_exporter_budget_skipped_processes_total")
        f.add_metric([], st.budget_skipped_total)
        yield f
        f = family("numa_exporter_parse_errors_total")
        for source, n in sorted(st.parse_errors.items()):
            f.add_metric([source], n)
        yield f
        f = family("numa_exporter_read_errors_total")
        for (source, reason), n in sorted(st.read_errors.items()):
            f.add_metric([source, reason], n)
        yield f
        h = histogram("numa_exporter_process_scan_seconds")
        buckets = [(_le(le), float(n)) for le, n in st.scan_seconds_buckets] or [("+Inf", 0.0)]
        h.add_metric([], buckets, st.scan_seconds_sum)
        yield h

    # --- processes ---------------------------------------------------------------------
    def _processes(self, procs: tuple[ProcessSample, ...]) -> Iterator[Metric]:
        mem = family("numa_process_memory_bytes")
        pol = family("numa_process_policy_memory_bytes")
        loc = family("numa_process_local_memory_bytes")
        rem = family("numa_process_remote_memory_bytes")
        ratio = family("numa_process_remote_memory_ratio")
        home = family("numa_process_home_nodes_info")
        thr = family("numa_process_threads")
        mig = family("numa_process_pages_migrated_total")
        start = family("numa_process_start_time_seconds")
        cost = family("numa_process_scan_seconds")
        for p in procs:
            lv = _lv(p)
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
        yield from (mem, pol, loc, rem, ratio, home, thr, mig, start, cost)

    def _binding(self, procs: tuple[ProcessSample, ...]) -> Iterator[Metric]:
        mb = family("numa_process_memory_bound")
        cb = family("numa_process_cpus_bound")
        mm = family("numa_process_binding_mismatch")
        for p in procs:
            lv = _lv(p)
            if p.memory_bound is not None:
                mb.add_metric(lv, int(p.memory_bound))
            if p.cpus_bound is not None:
                cb.add_metric(lv, int(p.cpus_bound))
            for reason, on in sorted(p.mismatches.items()):
                mm.add_metric([*lv, reason], int(on))
        yield from (mb, cb, mm)

    def _drift(self, procs: tuple[ProcessSample, ...]) -> Iterator[Metric]:
        base = family("numa_process_baseline_remote_memory_ratio")
        change = family("numa_process_remote_memory_ratio_change")
        arr = family("numa_process_node_arrived_bytes_total")
        dep = family("numa_process_node_departed_bytes_total")
        for p in procs:
            if p.drift is None:
                continue
            lv = _lv(p)
            if p.drift.baseline_remote_ratio is not None:
                base.add_metric(lv, p.drift.baseline_remote_ratio)
                change.add_metric(lv, p.locality.remote_ratio - p.drift.baseline_remote_ratio)
            for node, b in sorted(p.drift.arrived_bytes.items()):
                arr.add_metric([*lv, str(node)], b)
            for node, b in sorted(p.drift.departed_bytes.items()):
                dep.add_metric([*lv, str(node)], b)
        yield from (base, change, arr, dep)

    def _accelerators(self, snap: Snapshot) -> Iterator[Metric]:
        f = family("numa_accelerator_info")
        for a in snap.accelerators:
            f.add_metric([*map(label_text, (a.device, a.pci_address, a.vendor, a.driver)),
                          str(a.node)], 1)
        pf = family("numa_process_accelerator_info")
        for p in snap.processes:
            for u in p.accelerators:
                pf.add_metric([*_lv(p), label_text(u.device), str(u.node)], 1)
        yield from (f, pf)

    def _cgroups(self, snap: Snapshot) -> Iterator[Metric]:
        mem = family("numa_cgroup_memory_bytes")
        ctr = family("numa_cgroup_memory_stat_total")
        for c in snap.cgroups:
            path, unit = label_text(c.path), label_text(c.unit)
            for (node, kind), b in sorted(c.memory.items()):
                mem.add_metric([path, unit, str(node), kind], b)
            for name, v in sorted(c.counters.items()):
                ctr.add_metric([path, unit, name], v)
        yield from (mem, ctr)

    # --- system ------------------------------------------------------------------------
    def _vmstat(self, snap: Snapshot) -> Iterator[Metric]:
        for name, v in sorted(snap.system.vmstat.items()):
            f = pattern_family("numa_vmstat_<field>_total", name, ())
            f.add_metric([], v)
            yield f

    def _nodes(self, snap: Snapshot) -> Iterator[Metric]:
        sysm = snap.system
        topo = sysm.topology
        total = family("numa_node_memory_total_bytes")
        free = family("numa_node_memory_free_bytes")
        allf = family("numa_node_memory_bytes")
        for node, fields in sorted(sysm.node_meminfo.items()):
            if "MemTotal" in fields:
                total.add_metric([str(node)], fields["MemTotal"])
            if "MemFree" in fields:
                free.add_metric([str(node)], fields["MemFree"])
            for name, b in sorted(fields.items()):
                allf.add_metric([str(node), name], b)
        yield from (total, free, allf)
        per_field: dict[str, Family] = {}
        for node, counters in sorted(sysm.node_numastat.items()):
            for name, v in sorted(counters.items()):
                short = name.removeprefix("numa_")
                if short not in per_field:
                    per_field[short] = pattern_family("numa_node_<field>_total", short, ("node",))
                per_field[short].add_metric([str(node)], v)
        yield from per_field.values()
        if topo.numa:
            cpus = family("numa_node_cpus")
            for node in topo.nodes:
                cpus.add_metric([str(node)], len(topo.cpus.get(node, ())))
            yield cpus
        dist = family("numa_node_distance")
        for (a, b), d in sorted(topo.distance.items()):
            dist.add_metric([str(a), str(b)], d)
        yield dist
        hp = family("numa_node_hugepages")
        for node, sizes in sorted(sysm.hugepages.items()):
            for size, h in sorted(sizes.items()):
                for state, hv in (("total", h.total), ("free", h.free), ("surplus", h.surplus)):
                    if hv is not None:
                        hp.add_metric([str(node), str(size), state], hv)
        yield hp

    def _balancing(self, snap: Snapshot) -> Iterator[Metric]:
        if snap.system.balancing_mode is not None:
            f = family("numa_balancing_mode")
            f.add_metric([], snap.system.balancing_mode)
            yield f
        if snap.system.promote_rate_limit_bytes is not None:
            f = family("numa_balancing_promote_rate_limit_bytes_per_second")
            f.add_metric([], snap.system.promote_rate_limit_bytes)
            yield f


def _lv(p: ProcessSample) -> list[str]:
    """Return the pid and comm label values of a process (comm as safe text)."""
    return [str(p.pid), label_text(p.comm)]


def _le(v: float) -> str:
    return "+Inf" if v == float("inf") else repr(v)
