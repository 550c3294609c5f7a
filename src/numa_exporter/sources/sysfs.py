"""sysfs source: NUMA node files under ``<sysfs>/devices/system/node``."""

from __future__ import annotations

import os
from pathlib import Path

from numa_exporter.sources.errors import classify
from numa_exporter.sources.files import read_optional, read_small


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
