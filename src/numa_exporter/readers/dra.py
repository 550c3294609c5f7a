"""Dynamic Resource Allocation: the devices the kubelet's DRA manager gave each pod, and
their NUMA nodes, from the node's files only (docs/kubernetes.md).

A claim's devices come from ``<kubelet root>/dra_manager_state``
(``parsers/kubelet/dra_manager_state.py``, read through the kubelet checkpoint cache); each
device names CDI device IDs (``vendor/class=name``), which the CDI specs under
``/etc/cdi`` and ``/var/run/cdi`` (``--path.rootfs``; links followed inside it, ``/var/run``
-> ``/run`` included) turn into device nodes (``parsers/cdi_spec.py``). A device node's NUMA
node is, in this order:

1. the accelerator map's (udev and, for NVIDIA's ``/dev/nvidia<N>``, which has no sysfs
   entry, the driver's ``information`` minors), by device number or path;
2. else the PCI device that ``<sysfs>/dev/char/<major>:<minor>`` leads to: its
   ``numa_node``, else the nodes of its ``local_cpulist``.

The device number is the spec's ``major``/``minor`` where it gives them, else the host
node's own (``lstat`` under the root; the node is never opened). A spec that cannot be
read or parsed is counted (``numa_exporter_read_errors_total`` /
``numa_exporter_parse_errors_total``) and its devices stay without a node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from numa_exporter.model.kubernetes import DraDevice
from numa_exporter.parsers.cdi_spec import MAX_BYTES as MAX_CDI_BYTES
from numa_exporter.parsers.cdi_spec import CdiDeviceNode, CdiSpec, parse_cdi_spec, split_cdi_id
from numa_exporter.parsers.cpulist import parse_cpulist
from numa_exporter.parsers.kubelet import dra_manager_state as dms
from numa_exporter.readers.accelerators import Accelerator, AcceleratorSource
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.rootfs import CDI_DIRS, Cut, RootFS, Signature
from numa_exporter.sources.sysfs import DeviceNumberSysFS

MAX_SPEC_FILES = 256  # spec files read per directory; a node has a handful
SPEC_SUFFIXES = (".json", ".yaml", ".yml")
NodeOf = Callable[[frozenset[int]], frozenset[int]]


@dataclass(frozen=True, slots=True)
class _Spec:
    signature: Signature
    spec: CdiSpec


class CdiSpecs:
    """The CDI specs under a root, each parsed once per file version and kept."""

    def __init__(self, fs: RootFS) -> None:
        self.fs = fs
        self._parsed: dict[str, _Spec] = {}
        self._last: tuple[tuple[CdiSpec, ...], dict[str, tuple[CdiDeviceNode, ...]]] = ((), {})

    def _names(self, directory: str, errors: ErrorReporter) -> tuple[str, ...]:
        try:
            names = self.fs.listdir(directory, "cdi_specs")
        except Cut as err:
            errors.read(err)
            names = err.names
        except SourceError as err:
            errors.read(err)
            return ()
        picked = tuple(n for n in names or () if n.endswith(SPEC_SUFFIXES))
        if len(picked) > MAX_SPEC_FILES:
            errors.parse("cdi_specs", directory, len(picked) - MAX_SPEC_FILES,
                         error=f"more than {MAX_SPEC_FILES} spec files; the rest not read")
        return picked[:MAX_SPEC_FILES]

    def _spec(self, host_path: str, errors: ErrorReporter) -> CdiSpec | None:
        sig = self.fs.signature(host_path)
        if sig is None:
            self._parsed.pop(host_path, None)
            return None
        kept = self._parsed.get(host_path)
        if kept is not None and kept.signature == sig:
            return kept.spec
        try:
            data = self.fs.read(host_path, "cdi_spec", MAX_CDI_BYTES)
        except SourceError as err:
            errors.read(err)
            return None
        if data is None:
            return None
        spec = parse_cdi_spec(data, host_path.rpartition("/")[2])
        self._parsed[host_path] = _Spec(sig, spec)
        return spec

    def devices(self, errors: ErrorReporter) -> dict[str, tuple[CdiDeviceNode, ...]]:
        """Return the device nodes of every CDI device ID the specs define (a spec in a
        later directory wins over an earlier one's device of the same ID); specs that
        could not be read or parsed are counted. The same dict is returned while every
        spec is unchanged (its caller may keep what it derived from it)."""
        specs: list[CdiSpec] = []
        seen: set[str] = set()
        for directory in CDI_DIRS:
            for name in self._names(directory, errors):
                host_path = f"{directory}/{name}"
                seen.add(host_path)
                spec = self._spec(host_path, errors)
                if spec is None:
                    continue
                if spec.error_count:
                    errors.parse("cdi_spec", host_path, spec.error_count, error=spec.error)
                specs.append(spec)
        for gone in [p for p in self._parsed if p not in seen]:
            del self._parsed[gone]
        kept, kept_out = self._last
        if len(kept) == len(specs) and all(a is b for a, b in zip(kept, specs, strict=True)):
            return kept_out
        out: dict[str, tuple[CdiDeviceNode, ...]] = {}
        for spec in specs:
            for dev, nodes in spec.devices.items():
                out[f"{spec.kind}={dev}"] = nodes
        self._last = (tuple(specs), out)
        return out


class DeviceLocality:
    """Where a device node sits: the accelerator map's node, else its PCI device's."""

    def __init__(self, fs: RootFS, sysfs: DeviceNumberSysFS | None,
                 accelerators: AcceleratorSource | None) -> None:
        self.fs, self.sysfs, self.accelerators = fs, sysfs, accelerators

    def _number(self, node: CdiDeviceNode) -> tuple[str, int, int] | None:
        kind = "block" if node.type == "b" else "char"
        if node.major is not None:
            return kind, node.major, node.minor or 0  # minor 0 is omitted (omitempty)
        return self.fs.device_number(node.host_path)

    def _accelerator(self, node: CdiDeviceNode,
                     number: tuple[str, int, int] | None) -> Accelerator | None:
        if self.accelerators is None:
            return None
        try:
            found = None
            if number is not None and number[0] == "char":
                found = self.accelerators.device_for_rdev("char", number[1], number[2])
            return found or self.accelerators.device_for_devname(node.host_path)
        except Exception:  # discovery failing is logged by the accelerator map
            return None

    def nodes(self, node: CdiDeviceNode, nodes_of_cpus: NodeOf,
              errors: ErrorReporter) -> frozenset[int]:
        """Return the NUMA nodes of a device node (empty: not found)."""
        number = self._number(node)
        accel = self._accelerator(node, number)
        if accel is not None:
            if accel.node >= 0:
                return frozenset({accel.node})
            if accel.local_cpus:
                return nodes_of_cpus(accel.local_cpus)
        if number is None or self.sysfs is None:
            return frozenset()
        try:
            pci = self.sysfs.pci_device(*number)
            if pci is None:
                return frozenset()
            raw = self.sysfs.attribute(pci, "numa_node")
            numa = int(raw.strip()) if raw is not None and raw.strip() else -1
            if numa >= 0:
                return frozenset({numa})
            text = self.sysfs.attribute(pci, "local_cpulist")
            cpus = parse_cpulist(text.strip()) if text is not None else None
            if cpus is None:
                raise ValueError("local_cpulist is not a CPU list")
            return nodes_of_cpus(cpus)
        except SourceError as err:
            errors.read(err)
        except ValueError as err:  # a number out of range, a malformed attribute
            errors.parse("dra_device", node.host_path, error=str(err)[:120])
        return frozenset()


def dra_devices(state: dms.DraManagerState, specs: Mapping[str, tuple[CdiDeviceNode, ...]],
                locality: DeviceLocality, nodes_of_cpus: NodeOf, errors: ErrorReporter
                ) -> dict[str, tuple[DraDevice, ...]]:
    """Return pod UID -> its DRA devices with their NUMA nodes (each CDI device resolved
    once)."""
    resolved: dict[str, tuple[frozenset[int], tuple[str, ...]]] = {}

    def resolve(cdi_id: str) -> tuple[frozenset[int], tuple[str, ...]]:
        if cdi_id not in resolved:
            nodes: set[int] = set()
            paths: list[str] = []
            for n in specs.get(cdi_id, ()) if split_cdi_id(cdi_id) else ():
                found = locality.nodes(n, nodes_of_cpus, errors)
                if found:
                    nodes |= found
                    paths.append(n.host_path)
            resolved[cdi_id] = (frozenset(nodes), tuple(paths))
        return resolved[cdi_id]

    out: dict[str, tuple[DraDevice, ...]] = {}
    for uid, devices in state.pods.items():
        got: list[DraDevice] = []
        for d in devices:
            nodes: frozenset[int] = frozenset()
            paths: tuple[str, ...] = ()
            for cdi_id in d.cdi_ids:
                n, p = resolve(cdi_id)
                nodes, paths = nodes | n, paths + p
            got.append(DraDevice(d.driver, d.pool, d.device, d.claim, d.namespace, nodes,
                                 paths))
        out[uid] = tuple(got)
    return out
