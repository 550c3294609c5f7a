"""Files of the host's root filesystem, as seen under ``--path.rootfs`` (``/host`` in a pod).

Kubelet checkpoints, pod log directories and the container runtimes' state are read from
paths of the *host*; a container sees them below the root it was given. Symbolic links on
the way (``/var/run`` -> ``/run``, a kubelet root moved to a data disk) point at host
paths, so they are followed here inside the root, never out of it: an absolute target
restarts at the root, ``..`` stops at it, and at most ``MAX_LINKS`` links are followed
(the kernel's own limit is 40). The last component is opened with ``O_NOFOLLOW``.

Errors are classified as everywhere else: a file or directory that is not there (ENOENT,
ENOTDIR) is None; EACCES/EPERM raise ``Denied``; anything else ``ReadFailed``. Reads and
listings are bounded (``limit`` bytes, ``MAX_ENTRIES`` names).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from numa_exporter.sources.errors import ReadFailed, classify
from numa_exporter.sources.files import read_at_most

MAX_LINKS = 40
MAX_ENTRIES = 10_000  # names listed per directory: a node runs at most a few hundred pods
CHUNK = 64 << 10
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR})

KUBELET_ROOT = "/var/lib/kubelet"
CPU_MANAGER_STATE = "cpu_manager_state"
MEMORY_MANAGER_STATE = "memory_manager_state"
DEVICE_CHECKPOINT = "device-plugins/kubelet_internal_checkpoint"
POD_LOGS = "/var/log/pods"
CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
CRIO_CONTAINERS = "/run/containers/storage/overlay-containers"


class RootFS:
    """Host paths resolved and read below ``root``; the kubelet's files below its root dir.

    ``kubelet_root`` is a host path (``--kubelet.root-dir``, default ``/var/lib/kubelet``).
    """

    def __init__(self, root: Path, kubelet_root: str = KUBELET_ROOT) -> None:
        self.root = root
        self.kubelet_root = "/" + kubelet_root.strip("/")

    def resolve(self, host_path: str) -> Path | None:
        """Return where ``host_path`` is under the root, links followed inside it.

        Returns None when a link loop or more than ``MAX_LINKS`` links are met; a missing
        component ends the walk (the path returned then does not exist).
        """
        todo = [p for p in host_path.split("/") if p and p != "."]
        todo.reverse()
        done: list[str] = []
        links = 0
        while todo:
            part = todo.pop()
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = self.root.joinpath(*done, part)
            try:
                st = os.lstat(candidate)
            except OSError:
                return self.root.joinpath(*done, part, *reversed(todo))
            if not stat.S_ISLNK(st.st_mode):
                done.append(part)
                continue
            links += 1
            if links > MAX_LINKS:
                return None
            try:
                target = os.readlink(candidate)
            except OSError:
                return None
            if target.startswith("/"):
                done = []
            todo.extend(reversed([p for p in target.split("/") if p and p != "."]))
        return self.root.joinpath(*done)

    def kubelet_path(self, name: str) -> str:
        """Return the host path of a file in the kubelet's root directory."""
        return f"{self.kubelet_root}/{name}"

    def read(self, host_path: str, source: str, limit: int) -> bytes | None:
        """Return at most ``limit`` + 1 bytes of a host file, None when it is not there.

        One byte more than ``limit`` tells the parser the file is too large.
        """
        path = self.resolve(host_path)
        if path is None:
            raise ReadFailed(source, host_path, OSError(errno.ELOOP, "too many links"))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as err:
            if err.errno in _ABSENT:
                return None
            raise classify(source, str(path), err) from err
        try:
            return read_at_most(lambda n: os.read(fd, n), limit + 1, CHUNK)
        except OSError as err:
            raise classify(source, str(path), err) from err
        finally:
            os.close(fd)

    def listdir(self, host_path: str, source: str) -> list[str] | None:
        """Return up to ``MAX_ENTRIES`` names in a host directory (sorted), None if absent."""
        path = self.resolve(host_path)
        if path is None:
            raise ReadFailed(source, host_path, OSError(errno.ELOOP, "too many links"))
        names: list[str] = []
        try:
            with os.scandir(path) as it:
                for entry in it:
                    if len(names) >= MAX_ENTRIES:
                        break
                    names.append(entry.name)
        except OSError as err:
            if err.errno in _ABSENT:
                return None
            raise classify(source, str(path), err) from err
        return sorted(names)

    def signature(self, host_path: str) -> tuple[int, int, int, int] | None:
        """Return (device, inode, size, mtime in ns) of a host file, None when absent.

        A file replaced by rename (as the kubelet writes its checkpoints) gets a new inode,
        so a reader can keep what it parsed until the signature changes.
        """
        path = self.resolve(host_path)
        if path is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


