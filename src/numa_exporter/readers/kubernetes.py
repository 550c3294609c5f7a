"""Kubernetes attribution and the kubelet's assignments, from the node's files only.

Given the cgroups of one scan's processes, ``KubernetesReader.read`` returns a frozen
``KubernetesView``: which pod and container each cgroup is (``parsers/kubepods_cgroup.py``),
their namespace and names (the runtime's ``config.json`` annotations, else the pod log
directories' names), and what the kubelet assigned each container (its CPU Manager,
Memory Manager and device manager checkpoints), in NUMA nodes. No API server, no runtime
socket: only files under ``--path.rootfs`` (``sources/rootfs.py``).

Each problem is counted once per read through the scan's ``ErrorReporter`` and logged once:
an unreadable file (``numa_exporter_read_errors_total``), a checkpoint that does not parse,
has an unknown format or a checksum the kubelet would refuse, names nodes or CPUs the host
does not have (``numa_exporter_parse_errors_total``). Nothing else is lost: the rest of the
view is built from what could be read. On a host without pods nothing is read at all.

Checkpoints are parsed and verified once per file version (device, inode, size and mtime:
the kubelet replaces them by rename) and kept; runtime specs once per container. Verifying a
new version is bounded by the scan's deadline: it is not started once the deadline has
passed, nor when the CPU time per byte of the file's last verification says it would end
past it (CPU time, so that a busy machine does not make the estimate refuse the file for
good); the file is then counted as not verified in time (``numa_exporter_parse_errors_total``), its
assignments are left out this scan, and it is tried again the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from numa_exporter.model.kubernetes import Assignment, ContainerRef, DraDevice, KubernetesView
from numa_exporter.parsers.kubelet import cpu_manager_state as cms
from numa_exporter.parsers.kubelet import dra_manager_state as dms
from numa_exporter.parsers.kubelet import kubelet_internal_checkpoint as kic
from numa_exporter.parsers.kubelet import memory_manager_state as mms
from numa_exporter.parsers.kubelet.envelope import CheckpointResult
from numa_exporter.parsers.kubepods_cgroup import ID_PREFIX, KubepodsCgroup, kubepods_of
from numa_exporter.parsers.oci_config import MAX_BYTES as MAX_OCI_BYTES
from numa_exporter.parsers.oci_config import OciConfig, parse_oci_config
from numa_exporter.parsers.pod_log_dir import parse_pod_log_dir
from numa_exporter.parsers.proc_cgroup import ProcCgroup
from numa_exporter.readers.accelerators import AcceleratorSource
from numa_exporter.readers.dra import CdiSpecs, DeviceLocality, dra_devices
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.deadline import Deadline
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.rootfs import (
    CONTAINERD_TASKS,
    CPU_MANAGER_STATE,
    CRIO_CONTAINERS,
    DEVICE_CHECKPOINT,
    DRA_MANAGER_STATE,
    MEMORY_MANAGER_STATE,
    POD_LOGS,
    Cut,
    RootFS,
)
from numa_exporter.sources.sysfs import DeviceNumberSysFS

log = structlog.get_logger("numa_exporter.kubernetes")

T = TypeVar("T")
C = TypeVar("C", bound=CheckpointResult)
MAX_SPEC_CACHE = 4096  # runtime specs kept between reads (containers seen recently)
LATE = "not verified before the scan's deadline; left out this scan, tried again the next"

@dataclass(frozen=True, slots=True)
class _Cached:
    signature: tuple[int, int, int, int]
    value: Any


def _nodes_of(cpus: frozenset[int], cpu_node: Mapping[int, int]) -> frozenset[int] | None:
    """Return the nodes of ``cpus``, None when one of them is not a CPU of this host."""
    nodes = {cpu_node.get(c) for c in cpus}
    if None in nodes:
        return None
    return frozenset(n for n in nodes if n is not None)


class _Builder:
    """Assignments of one read, collected per container, checked against the host."""

    def __init__(self, nodes: frozenset[int], cpu_node: Mapping[int, int]) -> None:
        self.nodes, self.cpu_node = nodes, cpu_node
        self.memory: dict[tuple[str, str], dict[str, frozenset[int]]] = {}
        self.cpus: dict[tuple[str, str], frozenset[int]] = {}
        self.cpus_by_id: dict[str, frozenset[int]] = {}
        self.devices: dict[tuple[str, str], dict[str, frozenset[int]]] = {}
        self.unknown_nodes: set[int] = set()
        self.unknown_cpus = 0

    def known(self, nodes: frozenset[int]) -> frozenset[int]:
        """Return ``nodes`` less those the host does not have (remembered for the log)."""
        bad = nodes - self.nodes
        self.unknown_nodes |= bad
        return nodes - bad

    def add_memory(self, key: tuple[str, str], blocks: tuple[mms.MemoryBlock, ...]) -> None:
        per = self.memory.setdefault(key, {})
        for b in blocks:
            nodes = self.known(b.nodes)
            if nodes:
                per[b.type] = per.get(b.type, frozenset()) | nodes

    def assignment(self, cpus: frozenset[int] | None, memory: dict[str, frozenset[int]],
                   devices: dict[str, frozenset[int]], dra: tuple[DraDevice, ...] = ()
                   ) -> Assignment:
        cpu_nodes: frozenset[int] | None = None
        if cpus is not None:
            cpu_nodes = _nodes_of(cpus, self.cpu_node)
            if cpu_nodes is None:
                self.unknown_cpus += 1
                cpus = None
        mem_nodes = frozenset().union(*memory.values()) if memory else None
        return Assignment(mem_nodes or None, dict(memory), cpus, cpu_nodes, dict(devices),
                          dra)


class CheckpointCache:
    """The kubelet's checkpoints under a root, each parsed and verified once per file version
    (device, inode, size and mtime) and kept while unchanged."""

    def __init__(self, fs: RootFS,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.fs, self.cpu_clock = fs, cpu_clock
        self._parsed: dict[str, _Cached] = {}
        self._seconds_per_byte: dict[str, float] = {}  # of the last verification of each

    def usable(self, name: str, source: str, limit: int, parse: Callable[[bytes], C],
               errors: ErrorReporter, deadline: Deadline | None = None) -> C | None:
        """Return the parsed kubelet checkpoint ``name`` when its assignments can be used;
        None when it is absent, unreadable, refused or not verified by ``deadline``. Its
        errors are reported each call."""
        found = self.get(name, source, limit, parse, errors, deadline)
        if found is None:
            return None
        report(source, self.fs.kubelet_path(name), found.error, found.error_count, errors)
        return found if found.usable else None

    def _late(self, host_path: str, size: int, deadline: Deadline | None) -> bool:
        """Return whether verifying ``size`` bytes of ``host_path`` now would end past
        ``deadline`` (already past or the exporter stopping, or so the CPU time per byte of
        its last verification says)."""
        if deadline is None:
            return False
        if deadline.expired():
            return True
        cost = size * self._seconds_per_byte.get(host_path, 0.0)
        return deadline.at is not None and deadline.clock() + cost > deadline.at

    def get(self, name: str, source: str, limit: int, parse: Callable[[bytes], T],
            errors: ErrorReporter, deadline: Deadline | None = None) -> T | None:
        """Return the parsed kubelet checkpoint ``name``, from cache while it is unchanged;
        None when absent, unreadable or not verified by ``deadline`` (counted)."""
        host_path = self.fs.kubelet_path(name)
        sig = self.fs.signature(host_path)
        if sig is None:
            self._parsed.pop(host_path, None)
            return None
        cached = self._parsed.get(host_path)
        if cached is not None and cached.signature == sig:
            value: T = cached.value
            return value
        if self._late(host_path, sig[2], deadline):
            errors.parse(source, host_path, error=LATE)
            return None
        started = self.cpu_clock()
        try:
            data = self.fs.read(host_path, source, limit)
        except SourceError as err:
            errors.read(err)
            return None
        if data is None:
            return None
        try:
            parsed = parse(data)
        except Exception as exc:  # a parser bug costs this file, never the scan
            errors.bug(source, host_path, exc)
            return None
        self._seconds_per_byte[host_path] = (self.cpu_clock() - started) / max(len(data), 1)
        self._parsed[host_path] = _Cached(sig, parsed)
        return parsed


def report(source: str, host_path: str, error: str, count: int,
           errors: ErrorReporter) -> None:
    """Count a kubelet or runtime file's parse errors, if any; returns nothing."""
    if count or error:
        errors.parse(source, host_path, max(count, 1), error=error)


class KubernetesReader:
    """Reads the node's Kubernetes files under a root; keeps what it parsed between reads."""

    def __init__(self, fs: RootFS,
                 cpu_clock: Callable[[], float] = time.thread_time, *,
                 sysfs: DeviceNumberSysFS | None = None,
                 accelerators: AcceleratorSource | None = None) -> None:
        self.fs = fs
        self.checkpoints = CheckpointCache(fs, cpu_clock)
        self.cdi = CdiSpecs(fs)
        # the last DRA resolution and what it came from (checkpoint and specs, by identity:
        # both are kept objects while their files are unchanged)
        self.dra_resolved: tuple[object, object, dict[str, tuple[DraDevice, ...]]] | None = None
        # where a DRA device node sits (without sysfs: the accelerator map only)
        self.sysfs, self.accelerators = sysfs, accelerators
        self._specs: dict[str, OciConfig | None] = {}
        self._quiet_said = False
        self._log_dirs: tuple[tuple[str, ...], dict[str, tuple[str, str]]] = ((), {})

    # --- files -------------------------------------------------------------------------

    def spec(self, cid: str, errors: ErrorReporter) -> OciConfig | None:
        """Return the runtime spec of container ``cid`` (containerd's, else CRI-O's)."""
        if cid in self._specs:
            return self._specs[cid]
        found: OciConfig | None = None
        for host_path, source in ((f"{CONTAINERD_TASKS}/{cid}/config.json", "containerd_spec"),
                                  (f"{CRIO_CONTAINERS}/{cid}/userdata/config.json",
                                   "crio_spec")):
            try:
                data = self.fs.read(host_path, source, MAX_OCI_BYTES)
            except SourceError as err:
                errors.read(err)
                return None  # not cached: tried again next read
            if data is None:
                continue
            found = parse_oci_config(data)
            if found.error_count:
                report(source, host_path, found.error, found.error_count, errors)
            if not found.runtime:
                found = OciConfig(runtime="containerd" if source == "containerd_spec"
                                  else "cri-o", type=found.type)
            break
        if len(self._specs) >= MAX_SPEC_CACHE:
            self._specs.clear()
        self._specs[cid] = found
        return found

    def pod_names(self, errors: ErrorReporter) -> dict[str, tuple[str, str]]:
        """Return pod UID -> (namespace, name) from the pod log directories' names (parsed
        again only when the listing is a new one: the root keeps an unchanged directory's)."""
        try:
            names = self.fs.listdir(POD_LOGS, "pod_logs")
        except Cut as err:  # counted; the names listed before the cut are used
            errors.read(err)
            names = err.names
        except SourceError as err:
            errors.read(err)
            return {}
        if names is None:
            return {}
        if names is self._log_dirs[0]:
            return dict(self._log_dirs[1])
        out: dict[str, tuple[str, str]] = {}
        for name in names:
            p = parse_pod_log_dir(name)
            if p is not None:
                out[p.uid] = (p.namespace, p.pod)
        self._log_dirs = (names, out)
        return dict(out)

    # --- the view ----------------------------------------------------------------------

    def scan(self, cpu_node: Mapping[int, int], nodes: frozenset[int],
             errors: ErrorReporter, deadline: Deadline | None = None) -> KubernetesScan:
        """Return a new scan's session: cgroups are looked up as processes are read.

        ``cpu_node`` maps each CPU of the host to its node, ``nodes`` are the host's nodes;
        an assignment naming others is reported and left without them. ``deadline`` bounds
        the verification of changed checkpoints.
        """
        return KubernetesScan(self, cpu_node, nodes, errors, deadline)

    def read(self, groups: Iterable[ProcCgroup], cpu_node: Mapping[int, int],
             nodes: frozenset[int], errors: ErrorReporter) -> KubernetesView:
        """Return the view of the cgroups in ``groups`` (processes' ``/proc/<pid>/cgroup``)."""
        session = self.scan(cpu_node, nodes, errors)
        for g in groups:
            session.container(g)
        return session.view()

    def note_no_pods(self) -> None:
        """Log, once until a pod is met again, that no process sits in a pod cgroup."""
        if not self._quiet_said:
            log.debug("no process in a Kubernetes pod cgroup; kubelet files not read")
            self._quiet_said = True

    def keep_specs(self, ids: set[str]) -> None:
        """End a scan that met pods: forget the runtime specs of containers not in ``ids``."""
        self._quiet_said = False
        for cid in [c for c in self._specs if c not in ids]:
            del self._specs[cid]


def container_ref(k: KubepodsCgroup, spec: OciConfig | None,
                  pods: Mapping[str, tuple[str, str]]) -> ContainerRef:
    """Return the container a kubepods cgroup is, named from its runtime spec (else the pod
    log directories' names)."""
    runtime = k.runtime or (spec.runtime if spec is not None else "")
    kind = k.kind
    if spec is not None and spec.type == "sandbox" and kind == "container":
        kind = "sandbox"
    namespace, pod = pods.get(k.pod_uid, ("", ""))
    container = ""
    if spec is not None and (not spec.uid or spec.uid == k.pod_uid):
        namespace, pod = spec.namespace or namespace, spec.pod or pod
        container = spec.container if kind == "container" else ""
    cid = ID_PREFIX.get(runtime, "") + k.container_id if k.container_id else ""
    return ContainerRef(k.pod_uid, k.qos, namespace, pod, container, cid, kind, runtime)


def cgroup_key(g: ProcCgroup) -> str | None:
    """Return the path a process's cgroup is known by (memory controller's, else v2's)."""
    return g.path_for("memory") or g.v2_path


class KubernetesScan:
    """One scan's look-ups: the pod log directories are listed and the checkpoints parsed
    (from the reader's cache while unchanged) at most once, and only when a process sits in
    a pod cgroup; ``view()`` ends it."""

    def __init__(self, reader: KubernetesReader, cpu_node: Mapping[int, int],
                 nodes: frozenset[int], errors: ErrorReporter,
                 deadline: Deadline | None = None) -> None:
        self.reader, self.errors, self.deadline = reader, errors, deadline
        self._b = _Builder(nodes, cpu_node)
        self._cgroups: dict[str, ContainerRef] = {}
        self._pods: dict[str, tuple[str, str]] | None = None
        self._seen_ids: set[str] = set()
        self._loaded = False
        self._pod_cpus: Mapping[str, frozenset[int]] = {}
        self._pod_memory: Mapping[str, tuple[mms.MemoryBlock, ...]] = {}
        self._cpu_policy = self._memory_policy = ""
        self._memory_reserved: dict[tuple[int, str], int] = {}
        self._memo: dict[tuple[str, str], Assignment] = {}
        self._dra: dict[str, tuple[DraDevice, ...]] = {}

    def container(self, g: ProcCgroup) -> ContainerRef | None:
        """Return who the cgroup ``g`` belongs to, None outside a pod (and remember it)."""
        key = cgroup_key(g)
        if not key:
            return None
        if key in self._cgroups:
            return self._cgroups[key]
        k = kubepods_of(g)
        if k is None:
            return None
        if self._pods is None:
            self._pods = self.reader.pod_names(self.errors)
        spec = self.reader.spec(k.container_id, self.errors) if k.container_id else None
        self._seen_ids.add(k.container_id)
        ref = container_ref(k, spec, self._pods)
        self._cgroups[key] = ref
        return ref

    def keep(self, key: str, ref: ContainerRef) -> None:
        """Count in the cgroup of a process not read this scan (its last values served)."""
        self._cgroups.setdefault(key, ref)

    def assignment(self, ref: ContainerRef) -> Assignment | None:
        """Return the kubelet's assignment of the container ``ref``, None without one."""
        if ref.kind != "container":
            return None
        self._load()
        b = self._b
        found: Assignment | None = None
        if ref.container:
            key = (ref.uid, ref.container)
            if key not in b.cpus and ref.uid in self._pod_cpus:
                b.cpus[key] = self._pod_cpus[ref.uid]  # pod-level resources
            if key not in b.memory and ref.uid in self._pod_memory:
                b.add_memory(key, self._pod_memory[ref.uid])
            found = self._assign(key, b.cpus.get(key), b.memory.get(key, {}),
                                 b.devices.get(key, {}))
        if found is None and ref.container_id:
            cid = ref.container_id.rpartition("://")[2]
            if cid in b.cpus_by_id:
                found = self._assign(("", cid), b.cpus_by_id[cid], {}, {})
        return found

    def _assign(self, key: tuple[str, str], cpus: frozenset[int] | None,
                memory: dict[str, frozenset[int]], devices: dict[str, frozenset[int]]
                ) -> Assignment | None:
        if key not in self._memo:
            # a claim belongs to the pod: its devices go to each of the pod's containers
            self._memo[key] = self._b.assignment(cpus, memory, devices,
                                                 self._dra.get(key[0], ()) if key[0] else ())
        a = self._memo[key]
        return None if a.empty else a

    def _load_dra(self) -> None:
        """Read the DRA checkpoint and, where it gives a pod devices, the CDI specs and the
        devices' NUMA nodes (found again only when the checkpoint or a spec changed)."""
        reader = self.reader
        state = reader.checkpoints.usable(DRA_MANAGER_STATE, "dra_manager_state",
                                          dms.MAX_BYTES, dms.parse_dra_manager_state,
                                          self.errors, self.deadline)
        if state is None or not state.pods:
            return
        specs = reader.cdi.devices(self.errors)
        kept = reader.dra_resolved
        if kept is not None and kept[0] is state and kept[1] is specs:
            found = kept[2]
        else:
            locality = DeviceLocality(reader.fs, reader.sysfs, reader.accelerators)
            cpu_node = self._b.cpu_node

            def nodes_of_cpus(cpus: frozenset[int]) -> frozenset[int]:
                return frozenset(n for c in cpus if (n := cpu_node.get(c)) is not None)

            found = dra_devices(state, specs, locality, nodes_of_cpus, self.errors)
            reader.dra_resolved = (state, specs, found)
        b = self._b
        self._dra = {uid: tuple(DraDevice(d.driver, d.pool, d.device, d.claim,
                                          d.claim_namespace, b.known(d.nodes), d.paths)
                                for d in devices)
                     for uid, devices in found.items()}

    def _load(self) -> None:
        """Parse the four checkpoints (once per scan; cached by the reader while unchanged)."""
        if self._loaded:
            return
        self._loaded = True
        cache, errors, b, end = self.reader.checkpoints, self.errors, self._b, self.deadline
        cpu = cache.usable(CPU_MANAGER_STATE, "cpu_manager_state", cms.MAX_BYTES,
                           cms.parse_cpu_manager_state, errors, end)
        mem = cache.usable(MEMORY_MANAGER_STATE, "memory_manager_state", mms.MAX_BYTES,
                           mms.parse_memory_manager_state, errors, end)
        dev = cache.usable(DEVICE_CHECKPOINT, "kubelet_internal_checkpoint", kic.MAX_BYTES,
                           kic.parse_kubelet_internal_checkpoint, errors, end)
        if cpu is not None:
            b.cpus.update(cpu.containers)
            b.cpus_by_id.update(cpu.by_container_id)
            self._pod_cpus = cpu.pods
            self._cpu_policy = cpu.policy
        if mem is not None:
            for key, blocks in mem.containers.items():
                b.add_memory(key, blocks)
            self._pod_memory = mem.pods
            self._memory_policy = mem.policy
            self._memory_reserved = mem.reserved
        if dev is not None:
            for e in dev.entries:
                per = b.devices.setdefault((e.pod_uid, e.container), {})
                per[e.resource] = per.get(e.resource, frozenset()) | b.known(e.nodes)
        self._load_dra()

    def view(self) -> KubernetesView:
        """Return what this scan found: every pod cgroup met, every assignment of the
        checkpoints, unknown nodes and CPUs reported once."""
        if not self._cgroups:
            self.reader.note_no_pods()
            return KubernetesView()
        self.reader.keep_specs(self._seen_ids)
        cgroups = dict(sorted(self._cgroups.items()))
        for ref in cgroups.values():
            self.assignment(ref)  # pod-level resources of the containers met
        self._load()
        pods = dict(self._pods or {})
        for ref in cgroups.values():
            if ref.namespace and ref.uid not in pods:
                pods[ref.uid] = (ref.namespace, ref.pod)
        b = self._b
        assignments: dict[tuple[str, str], Assignment] = {}
        for key in sorted({*b.cpus, *b.memory, *b.devices}):
            a = self._assign(key, b.cpus.get(key), b.memory.get(key, {}),
                             b.devices.get(key, {}))
            if a is not None:
                assignments[key] = a
        by_id: dict[str, Assignment] = {}
        for cid, c in b.cpus_by_id.items():
            a = self._assign(("", cid), c, {}, {})
            if a is not None:
                by_id[cid] = a
        if b.unknown_nodes:
            listed = ",".join(str(n) for n in sorted(b.unknown_nodes)[:16])
            self.errors.parse("kubelet_assignment", "NUMA nodes", len(b.unknown_nodes),
                              error="the kubelet's checkpoints name NUMA nodes this host "
                                    f"does not have: {listed}")
        if b.unknown_cpus:
            self.errors.parse("kubelet_assignment", "CPUs", b.unknown_cpus,
                              error="the CPU Manager checkpoint names CPUs this host does "
                                    "not have; those containers' CPU nodes are left out")
        return KubernetesView(cgroups, pods, assignments, by_id, self._cpu_policy,
                              self._memory_policy, self._memory_reserved, dict(self._dra))
