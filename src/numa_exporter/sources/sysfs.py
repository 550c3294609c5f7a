"""sysfs source: NUMA node files, memory tiers and PCI ``numa_node`` under a sysfs root."""

from __future__ import annotations

import os
from pathlib import Path

from numa_exporter.sources.errors import classify
from numa_exporter.sources.files import read_optional, read_small

NODE_STATES = ("possible", "online", "has_cpu", "has_normal_memory", "has_high_memory",
               "has_memory", "has_generic_initiator")
ACCESS_ATTRIBUTES = ("read_latency", "write_latency", "read_bandwidth", "write_bandwidth")
MAX_DIR_ENTRIES = 4096  # a node's access or initiators folder lists at most a few dozen
MAX_MEMORY_BLOCKS = 1 << 20  # memory blocks of one node (128 MiB each: 128 TiB)


def _names(path: Path, source: str) -> list[str] | None:
    """Return the entry names of a folder (at most MAX_DIR_ENTRIES), None if it is absent."""
    try:
        with os.scandir(path) as it:
            out: list[str] = []
            for e in it:
                out.append(e.name)
                if len(out) >= MAX_DIR_ENTRIES:
                    break
            return sorted(out)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise classify(source, str(path), err) from err


def _numbered(names: list[str] | None, prefix: str) -> list[int]:
    """Return N of each ``<prefix>N`` name (ASCII decimal, at most 6 digits), sorted."""
    out = []
    for name in names or ():
        digits = name[len(prefix):]
        if (name.startswith(prefix) and 0 < len(digits) <= 6 and digits.isascii()
                and digits.isdigit()):
            out.append(int(digits))
    return sorted(out)



class NodeSysFS:
    """NUMA node files of one sysfs root."""

    def __init__(self, sysfs: Path) -> None:
        self.sysfs = sysfs
        self.root = sysfs / "devices" / "system" / "node"

    def online(self) -> bytes | None:
        """Return the node list in ``online``, or None where the kernel lacks NUMA support."""
        return read_optional(self.root / "online", "node")

    def node_dirs(self) -> list[int]:
        """Return the node ids that have a node<N> folder."""
        try:
            names = [e.name for e in os.scandir(self.root)]
        except FileNotFoundError:
            return []
        except OSError as err:
            raise classify("node", str(self.root), err) from err
        return sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())

    def _file(self, node: int, name: str) -> bytes:
        return read_small(self.root / f"node{node}" / name, f"node_{name}")

    def memory_blocks(self, node: int) -> list[int]:
        """Return the M of each node<N>/memory<M> link: the node's memory blocks (none
        without CONFIG_MEMORY_HOTPLUG's memory block devices)."""
        path = self.root / f"node{node}"
        try:
            with os.scandir(path) as it:
                names = [e.name for e in it if e.name.startswith("memory")]
        except FileNotFoundError:
            return []
        except OSError as err:
            raise classify("node_memory", str(path), err) from err
        return _numbered(names[:MAX_MEMORY_BLOCKS], "memory")

    def block_size_bytes(self) -> bytes | None:
        """Return ``/sys/devices/system/memory/block_size_bytes`` (None where absent)."""
        return read_optional(self.sysfs / "devices" / "system" / "memory" / "block_size_bytes",
                             "memory_block")

    def memory_block_state(self, block: int) -> bytes | None:
        """Return ``memory/memory<M>/state`` (``online``, ``offline``; None where absent)."""
        return read_optional(self.sysfs / "devices" / "system" / "memory" / f"memory{block}"
                             / "state", "memory_block")

    def cpulist(self, node: int) -> bytes:
        """Return node<N>/cpulist."""
        return self._file(node, "cpulist")

    def distance(self, node: int) -> bytes:
        """Return node<N>/distance."""
        return self._file(node, "distance")

    def meminfo(self, node: int) -> bytes:
        """Return node<N>/meminfo."""
        return self._file(node, "meminfo")

    def numastat(self, node: int) -> bytes:
        """Return node<N>/numastat."""
        return self._file(node, "numastat")

    def state(self, name: str) -> bytes | None:
        """Return a node state list (one of NODE_STATES), None where the kernel lacks it.

        ``has_generic_initiator`` is 5.10+, ``has_high_memory`` only with CONFIG_HIGHMEM.
        """
        if name not in NODE_STATES:
            raise ValueError(f"not a node state file: {name}")
        return read_optional(self.root / name, "node_state")

    def vmstat(self, node: int) -> bytes:
        """Return node<N>/vmstat (the node's counters, a superset of its numastat)."""
        return read_small(self.root / f"node{node}" / "vmstat", "node_vmstat")

    def access_classes(self, node: int) -> list[int]:
        """Return the Y of each node<N>/accessY folder (none without HMAT/CDAT data)."""
        return _numbered(_names(self.root / f"node{node}", "node_access"), "access")

    def access_initiators(self, node: int, access: int) -> list[str]:
        """Return the entry names of node<N>/access<Y>/initiators (links and attributes)."""
        path = self.root / f"node{node}" / f"access{access}" / "initiators"
        return _names(path, "node_access") or []

    def access_attributes(self, node: int, access: int) -> dict[str, bytes]:
        """Return the HMAT attribute files of node<N>/access<Y>/initiators that exist."""
        base = self.root / f"node{node}" / f"access{access}" / "initiators"
        out: dict[str, bytes] = {}
        for name in ACCESS_ATTRIBUTES:
            data = read_optional(base / name, "node_access")
            if data is not None:
                out[name] = data
        return out

    def hugepages(self, node: int) -> dict[int, dict[str, bytes]]:
        """Return, per huge page size in bytes, the raw nr/free/surplus files of the node."""
        base = self.root / f"node{node}" / "hugepages"
        out: dict[int, dict[str, bytes]] = {}
        try:
            entries = sorted(e.name for e in os.scandir(base))
        except FileNotFoundError:
            return out
        except OSError as err:
            raise classify("node_hugepages", str(base), err) from err
        for name in entries:
            # hugepages-2048kB
            if not (name.startswith("hugepages-") and name.endswith("kB")):
                continue
            kb = name[len("hugepages-") : -2]
            if not kb.isdigit():
                continue
            files: dict[str, bytes] = {}
            for f in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                data = read_optional(base / name / f, "node_hugepages")
                if data is not None:
                    files[f] = data
            out[int(kb) * 1024] = files
        return out


class MemoryTierSysFS:
    """Memory tiers (6.1+) and the demotion switch (5.18+) of one sysfs root."""

    def __init__(self, sysfs: Path) -> None:
        self.root = sysfs / "devices" / "virtual" / "memory_tiering"
        self.demotion = sysfs / "kernel" / "mm" / "numa" / "demotion_enabled"

    def tier_ids(self) -> list[int]:
        """Return the N of each memory_tierN folder (empty on kernels without tiering).

        N is the tier's abstract distance divided by the chunk size: a smaller N is a
        faster tier (DRAM is 4 by default, dax/kmem memory 22).
        """
        return _numbered(_names(self.root, "memory_tier"), "memory_tier")

    def nodelist(self, tier: int) -> bytes:
        """Return memory_tier<N>/nodelist (kernel list format)."""
        return read_small(self.root / f"memory_tier{tier}" / "nodelist", "memory_tier")

    def demotion_enabled(self) -> bytes | None:
        """Return /sys/kernel/mm/numa/demotion_enabled, None where the kernel lacks it."""
        return read_optional(self.demotion, "demotion_enabled")


class WeightedInterleaveSysFS:
    """Node weights of MPOL_WEIGHTED_INTERLEAVE (6.9+) of one sysfs root."""

    def __init__(self, sysfs: Path) -> None:
        self.root = sysfs / "kernel" / "mm" / "mempolicy" / "weighted_interleave"

    def names(self) -> list[str] | None:
        """Return the folder's entry names (``node<N>``, ``auto``), None where it is absent."""
        return _names(self.root, "weighted_interleave")

    def read(self, name: str) -> bytes | None:
        """Return the bytes of entry ``name`` (``node<N>`` or ``auto``), None if absent.

        Any other name raises ValueError, so that no other path under the root can be named.
        """
        digits = name[4:]
        if name != "auto" and not (name.startswith("node") and 0 < len(digits) <= 4
                                   and digits.isascii() and digits.isdigit()):
            raise ValueError(f"not a weighted_interleave entry: {name!r}")
        return read_optional(self.root / name, "weighted_interleave")


class PciSysFS:
    """PCI device attributes of one sysfs root (``bus/pci/devices/<address>``)."""

    def __init__(self, sysfs: Path) -> None:
        self.root = sysfs / "bus" / "pci" / "devices"

    def numa_node(self, address: str) -> bytes | None:
        """Return the device's numa_node (-1 where the firmware does not say), None if absent.

        ``address`` must be a full PCI address (``0009:01:00.0``); anything else raises
        ValueError, so that no other path under the root can be named.
        """
        if not _is_pci_address(address):
            raise ValueError(f"not a PCI address: {address!r}")
        return read_optional(self.root / address / "numa_node", "pci_numa_node")


def _is_pci_address(text: str) -> bool:
    """Return True for ``DDDD:BB:SS.F`` in hex (domain 4 hex digits, function 0-7)."""
    parts = text.split(":")
    if len(parts) != 3 or len(parts[0]) != 4 or len(parts[1]) != 2:
        return False
    slot, dot, fn = parts[2].partition(".")
    hexdigits = "0123456789abcdefABCDEF"
    return (dot == "." and len(slot) == 2 and fn in tuple("01234567")
            and all(c in hexdigits for c in parts[0] + parts[1] + slot))


MAX_DEVICE_HOPS = 16  # parents walked up from a device node to its PCI device


class DeviceNumberSysFS:
    """The device behind a device number: ``dev/char/<major>:<minor>`` (or ``dev/block``),
    a link into ``devices/``, walked up to the PCI device it sits below."""

    def __init__(self, sysfs: Path) -> None:
        self.sysfs = sysfs

    def pci_device(self, kind: str, major: int, minor: int) -> Path | None:
        """Return the PCI device folder the device number ``major:minor`` of ``kind``
        (``char`` or ``block``) sits below, None when it is absent, not below a PCI
        device, or its link leads out of the sysfs root.

        A PCI device is the nearest folder up the link's target named as a PCI address
        that has a ``numa_node`` file (a DRM render node's is ``.../0000:17:00.0/drm/
        renderD128``).
        """
        if kind not in ("char", "block") or not (0 <= major < 1 << 12 and
                                                 0 <= minor < 1 << 20):
            raise ValueError(f"not a device number: {kind} {major}:{minor}")
        link = self.sysfs / "dev" / kind / f"{major}:{minor}"
        try:
            root = os.path.realpath(self.sysfs)
            target = os.path.realpath(link)
        except OSError as err:
            raise classify("dev_char", str(link), err) from err
        if os.path.commonpath([root, target]) != root or not os.path.isdir(target):
            return None
        here = Path(target)
        for _ in range(MAX_DEVICE_HOPS):
            if str(here) == root:
                return None
            if _is_pci_address(here.name) and (here / "numa_node").is_file():
                return here
            here = here.parent
        return None

    def attribute(self, device: Path, name: str) -> bytes | None:
        """Return ``numa_node`` or ``local_cpulist`` of a PCI device folder ``pci_device``
        returned, None when absent."""
        if name not in ("numa_node", "local_cpulist"):
            raise ValueError(f"not a PCI locality attribute: {name!r}")
        return read_optional(device / name, "pci_" + name)


#: KSM's files that change with each merge, unmerge or pass of ksmd (mm/ksm.c).
KSM_FILES = ("run", "pages_shared", "pages_sharing", "full_scans")


class KsmSysFS:
    """KSM's counters (``/sys/kernel/mm/ksm``) of one sysfs root."""

    def __init__(self, sysfs: Path) -> None:
        self.root = sysfs / "kernel" / "mm" / "ksm"

    def run(self) -> bytes | None:
        """Return the bytes of ``run``; None where KSM is absent (a kernel without it).
        Raises the SourceError of the read."""
        return read_optional(self.root / "run", "ksm")

    def files(self, names: tuple[str, ...] = KSM_FILES[1:]) -> dict[str, bytes]:
        """Return the bytes of each named file of the folder. Raises the SourceError of a
        read (a file missing from a folder that has ``run`` is one)."""
        return {name: read_small(self.root / name, "ksm") for name in names}
