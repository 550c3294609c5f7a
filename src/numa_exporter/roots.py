"""Filesystem roots (``--path.procfs``, ``--path.sysfs``, ``--path.rootfs``) as values."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class RootError(ValueError):
    """A root that cannot serve as procfs/sysfs; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Roots:
    """Where to find procfs, sysfs and the host's root filesystem.

    ``rootfs`` is where the host's ``/`` is visible (``/host`` in a container, as
    node_exporter's ``--path.rootfs``); the kubelet's files, pod log directories and the
    container runtimes' state are read under it (``sources/rootfs.py``).
    """

    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    rootfs: Path = Path("/")

    def validate(self) -> Roots:
        """Return self when procfs, sysfs and the rootfs look usable; raise RootError
        otherwise."""
        for flag, path in (("--path.procfs", self.procfs), ("--path.sysfs", self.sysfs),
                           ("--path.rootfs", self.rootfs)):
            if not path.is_dir():
                raise RootError(f"{flag}={path}: not a directory")
        if not os.access(self.procfs, os.R_OK | os.X_OK):
            raise RootError(f"--path.procfs={self.procfs}: not readable")
        if not os.access(self.rootfs, os.R_OK | os.X_OK):
            raise RootError(f"--path.rootfs={self.rootfs}: not readable")
        if not any(e.name.isdigit() for e in os.scandir(self.procfs)) and not (
            self.procfs / "vmstat"
        ).exists():
            raise RootError(f"--path.procfs={self.procfs}: no process directories or vmstat")
        return self

    @property
    def node_dir(self) -> Path:
        """Return the sysfs folder that holds node<N>/ entries."""
        return self.sysfs / "devices" / "system" / "node"

    def missing_nodes(self) -> str | None:
        """Return a warning when sysfs has no ``devices/system/node`` folder, else None."""
        if self.node_dir.is_dir():
            return None
        return (f"--path.sysfs={self.sysfs} has no devices/system/node (a kernel without NUMA, "
                "or the wrong --path.sysfs): the host is taken as one node 0, with no "
                "numa_node_* metrics (memory, numastat, distances, CPUs) and no CPU-to-node "
                "map, so home nodes cannot come from threads or affinity")
