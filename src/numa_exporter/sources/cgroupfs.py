"""cgroup filesystem source: memory and cpuset files of a cgroup under ``<sysfs>/fs/cgroup``.

Three layouts exist:

* ``unified`` (cgroup v2 only): ``<sysfs>/fs/cgroup/cgroup.controllers`` exists.
* ``hybrid``: v1 controllers mounted at ``<sysfs>/fs/cgroup/<controller>`` and a v2 hierarchy
  (usually without controllers) at ``<sysfs>/fs/cgroup/unified``.
* ``legacy``: v1 controllers only.

A controller is served by v2 when the v2 root's ``cgroup.controllers`` lists it, else by its
v1 mount when one exists. v1 and v2 name the cpuset files differently
(``cpuset.effective_mems`` vs ``cpuset.mems.effective``); the methods hide that.

The cgroup paths come from ``/proc/<pid>/cgroup``. They are relative to the reader's cgroup
namespace: a process outside it shows a path beginning ``/..``, which is refused (None)
rather than followed out of the cgroup root. When the exporter runs in a container, the
host's cgroup tree must be visible under the sysfs root it is given.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from numa_exporter.sources.errors import Gone, ReadFailed, SourceError
from numa_exporter.sources.files import read_small

Layout = Literal["unified", "hybrid", "legacy", "none"]

# ENODEV: a file of a cgroup removed while we had it open; ENOTDIR: a path component that is
# a file (a fixture or a racing rename). Both mean "not there", like ENOENT.
_ABSENT_ERRNOS = frozenset({errno.ENODEV, errno.ENOTDIR})

_V1_FILES = {
    "cpuset.mems.effective": "cpuset.effective_mems",
    "cpuset.cpus.effective": "cpuset.effective_cpus",
}


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """Where each hierarchy of one cgroup filesystem root is mounted."""

    layout: Layout
    v2_root: Path | None = None
    v2_controllers: frozenset[str] | None = frozenset()  # None: cgroup.controllers unreadable
    v1_roots: dict[str, Path] = field(default_factory=dict)

    def version_for(self, controller: str) -> int | None:
        """Return 2 or 1 for the hierarchy that serves ``controller``, None if neither does."""
        if self.v2_root is not None:
            if self.v2_controllers is None and controller not in self.v1_roots:
                return 2
            if self.v2_controllers is not None and controller in self.v2_controllers:
                return 2
        if controller in self.v1_roots:
            return 1
        return None


def detect_layout(cgroup_root: Path, controllers: tuple[str, ...] = ("memory", "cpuset"),
                  ) -> CgroupLayout:
    """Return the layout of the cgroup filesystem mounted at ``cgroup_root``.

    Only the v1 mounts of ``controllers`` are looked up (a v1 mount point is a folder named
    after the controller holding ``cgroup.procs``; co-mounted ``cpu,cpuacct`` is reached
    through its ``cpu`` symlink).
    """
    v2_root: Path | None = None
    layout: Layout = "none"
    if (cgroup_root / "cgroup.controllers").is_file():
        v2_root, layout = cgroup_root, "unified"
    elif (cgroup_root / "unified" / "cgroup.controllers").is_file():
        v2_root = cgroup_root / "unified"
    v2_controllers: frozenset[str] | None = frozenset()
    if v2_root is not None:
        try:
            data = _read(v2_root / "cgroup.controllers", "cgroup")
        except SourceError:
            data = None
        # Unreadable (it is world-readable on every kernel, so this is a sandbox quirk):
        # let v2 serve whatever v1 does not.
        v2_controllers = (frozenset(data.decode("ascii", "replace").split())
                          if data is not None else None)
    v1_roots: dict[str, Path] = {}
    if layout != "unified":
        for c in controllers:
            d = cgroup_root / c
            if (d / "cgroup.procs").is_file():
                v1_roots[c] = d
        if v1_roots:
            layout = "hybrid" if v2_root is not None else "legacy"
        elif v2_root is not None:
            layout = "hybrid"
    return CgroupLayout(layout, v2_root, v2_controllers, v1_roots)


def _read(path: Path, source: str) -> bytes | None:
    """Return the bytes of ``path``, None when it is not there; raise Denied/ReadFailed."""
    try:
        return read_small(path, source)
    except Gone:
        return None
    except ReadFailed as err:
        if err.errno in _ABSENT_ERRNOS:
            return None
        raise


def _relative(cgroup_path: str) -> str | None:
    """Return ``cgroup_path`` without its leading slash, None if it climbs out (``..``)."""
    parts = [p for p in cgroup_path.split("/") if p and p != "."]
    if any(p == ".." for p in parts) or "\0" in cgroup_path:
        return None
    return "/".join(parts)


class CgroupFS:
    """Memory and cpuset files of the cgroups under one sysfs root.

    Each read takes the process's cgroup paths as ``/proc/<pid>/cgroup`` gives them (the v2
    path and the v1 per-controller paths) and picks the hierarchy that serves the file's
    controller. Reads return the bytes, or None when the file, the cgroup or the controller
    is not there (ENOENT, ENODEV, ENOTDIR; a ``/..`` path); EACCES/EPERM raise ``Denied``
    and anything else ``ReadFailed``.
    """

    def __init__(self, sysfs: Path, layout: CgroupLayout | None = None) -> None:
        self.sysfs = sysfs
        self.root = sysfs / "fs" / "cgroup"
        self.layout = layout if layout is not None else detect_layout(self.root)

    def refresh(self) -> CgroupLayout:
        """Detect the layout again (after a remount) and return it."""
        self.layout = detect_layout(self.root)
        return self.layout

    def cgroup_dir(self, controller: str, v2_path: str | None,
                   v1_paths: Mapping[str, str]) -> tuple[Path, int] | None:
        """Return the folder of the cgroup for ``controller`` and its hierarchy version.

        Returns None when no hierarchy serves the controller, the process has no path in
        it, or the path lies outside the cgroup namespace.
        """
        version = self.layout.version_for(controller)
        if version == 2:
            base, path = self.layout.v2_root, v2_path
        elif version == 1:
            base, path = self.layout.v1_roots[controller], v1_paths.get(controller)
        else:
            return None
        if base is None or path is None:
            return None
        rel = _relative(path)
        if rel is None:
            return None
        return (base / rel if rel else base), version

    def memcg_exists(self, path: str) -> bool:
        """Return whether the memory cgroup ``path`` (a path in the hierarchy that serves
        the memory controller, as a DAMON memcg filter names it) exists now with a memcg of
        its own: on v2, a cgroup whose parent does not enable the memory controller has no
        ``memory.current`` and no memcg (a DAMON memcg filter naming it is refused)."""
        found = self.cgroup_dir("memory", path, {"memory": path})
        if found is None:
            return False
        folder, version = found
        return (folder / "memory.current").is_file() if version == 2 else folder.is_dir()

    def _file(self, controller: str, name: str, v2_path: str | None,
              v1_paths: Mapping[str, str], inherit: bool = False) -> bytes | None:
        found = self.cgroup_dir(controller, v2_path, v1_paths)
        if found is None:
            return None
        d, version = found
        fname = _V1_FILES.get(name, name) if version == 1 else name
        source = name.replace(".", "_")
        data = _read(d / fname, source)
        if data is not None or not inherit or version != 2 or self.layout.v2_root is None:
            return data
        # v2 shows cpuset files only where the parent enabled the controller; a cgroup
        # without them has the effective set of its nearest ancestor that has them.
        root = self.layout.v2_root
        while d != root and d.is_dir():
            d = d.parent
            data = _read(d / fname, source)
            if data is not None:
                return data
        return None

    def memory_numa_stat(self, v2_path: str | None,
                         v1_paths: Mapping[str, str]) -> bytes | None:
        """Return ``memory.numa_stat`` (v2: bytes per node; v1: pages per node) or None."""
        return self._file("memory", "memory.numa_stat", v2_path, v1_paths)

    def memory_stat(self, v2_path: str | None, v1_paths: Mapping[str, str]) -> bytes | None:
        """Return ``memory.stat`` or None."""
        return self._file("memory", "memory.stat", v2_path, v1_paths)

    def cpuset_mems_effective(self, v2_path: str | None,
                              v1_paths: Mapping[str, str]) -> bytes | None:
        """Return the effective memory node list (v2 ``cpuset.mems.effective``) or None.

        On v2, a cgroup where cpuset is not enabled inherits the list of its nearest
        ancestor that shows the file (the root always does).
        """
        return self._file("cpuset", "cpuset.mems.effective", v2_path, v1_paths, inherit=True)

    def cpuset_cpus_effective(self, v2_path: str | None,
                              v1_paths: Mapping[str, str]) -> bytes | None:
        """Return the effective CPU list (v2 ``cpuset.cpus.effective``) or None.

        Inherited from the nearest ancestor on v2, as for ``cpuset_mems_effective``.
        """
        return self._file("cpuset", "cpuset.cpus.effective", v2_path, v1_paths, inherit=True)

    def memory_version(self) -> int | None:
        """Return the hierarchy version serving memory (1: numa_stat is in pages), or None."""
        return self.layout.version_for("memory")
