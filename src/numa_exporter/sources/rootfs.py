"""Files of the host's root filesystem, as seen under ``--path.rootfs`` (``/host`` in a pod).

Kubelet checkpoints, pod log directories and the container runtimes' state are read from
paths of the *host*; a container sees them below the root it was given. Symbolic links on
the way (``/var/run`` -> ``/run``, a kubelet root moved to a data disk) point at host
paths, so they are followed here inside the root, never out of it: an absolute target
restarts at the root, ``..`` stops at it, and at most ``MAX_LINKS`` links are followed
(the kernel's own limit is 40). The last component is opened with ``O_NOFOLLOW``.

Anyone who can write below the root can put a FIFO, a device node or a socket where a
checkpoint or a ``config.json`` is expected (or a link to ``/dev/kmsg``); opening a FIFO
for reading blocks until a writer comes, reading ``/dev/kmsg`` blocks until the kernel
logs. So files are opened with ``O_NONBLOCK`` (and ``O_NOCTTY``), the open descriptor is
``fstat``-ed, and anything but a regular file is refused (``Refused``, a counted error)
before a byte is read. Every read is bounded in size (``limit`` bytes) and in time
(``read_seconds``, checked between chunks of ``CHUNK`` bytes); a listing in time
(``list_seconds``) and, as a memory guard far above any node, at ``MAX_ENTRIES`` names. A
cut listing raises ``Cut`` with the names it got.

Errors are classified as everywhere else: a file or directory that is not there (ENOENT,
ENOTDIR) is None; EACCES/EPERM raise ``Denied``; anything else ``ReadFailed``.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from numa_exporter.sources.errors import ReadFailed, Refused, classify

MAX_LINKS = 40
MAX_ENTRIES = 1_000_000  # a memory guard only: a listing is bounded by LIST_SECONDS
READ_SECONDS = 1.0  # one file under the root: a checkpoint is at most a few MiB
LIST_SECONDS = 2.0  # one directory: 100,000 names list in well under 0.1 s
CHUNK = 64 << 10
LISTING_CACHE = 64  # directories whose listing is kept
RACY_NS = 1_000_000_000  # a directory changed this close to its listing is listed again
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR})
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY

KUBELET_ROOT = "/var/lib/kubelet"
CPU_MANAGER_STATE = "cpu_manager_state"
MEMORY_MANAGER_STATE = "memory_manager_state"
DEVICE_CHECKPOINT = "device-plugins/kubelet_internal_checkpoint"
DRA_MANAGER_STATE = "dra_manager_state"
# CDI spec directories, lowest priority first (a later one's device of the same ID wins)
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
POD_LOGS = "/var/log/pods"
CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
CRIO_CONTAINERS = "/run/containers/storage/overlay-containers"

Signature = tuple[int, int, int, int]


class Cut(Refused):
    """A listing stopped at its time bound (or the memory guard); ``names`` is what it got
    (sorted)."""

    def __init__(self, source: str, path: str, why: str, names: tuple[str, ...]) -> None:
        super().__init__(source, path, why)
        self.names = names


@dataclass(frozen=True, slots=True)
class _Listing:
    key: tuple[int, int, int]  # the directory's device, inode and mtime in ns
    names: tuple[str, ...]


def file_kind(mode: int) -> str:
    """Return what a file of ``mode`` is, in words (for the message of a refused file)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


class RootFS:
    """Host paths resolved and read below ``root``; the kubelet's files below its root dir.

    ``kubelet_root`` is a host path (``--kubelet.root-dir``, default ``/var/lib/kubelet``);
    ``clock`` (monotonic seconds) measures the time bounds.
    """

    def __init__(self, root: Path, kubelet_root: str = KUBELET_ROOT, *,
                 read_seconds: float = READ_SECONDS, list_seconds: float = LIST_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = root
        self.kubelet_root = "/" + kubelet_root.strip("/")
        self.read_seconds, self.list_seconds, self.clock = read_seconds, list_seconds, clock
        self._listings: dict[Path, _Listing] = {}

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

    def _resolved(self, host_path: str, source: str) -> Path:
        path = self.resolve(host_path)
        if path is None:
            raise ReadFailed(source, host_path, OSError(errno.ELOOP, "too many links"))
        return path

    def read(self, host_path: str, source: str, limit: int) -> bytes | None:
        """Return at most ``limit`` + 1 bytes of a regular host file, None when it is not
        there.

        One byte more than ``limit`` tells the parser the file is too large. Raises
        ``Refused`` for anything but a regular file (nothing is read from it) and for a
        read not done within ``read_seconds``; other errors are classified.
        """
        path = self._resolved(host_path, source)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as err:
            if err.errno in _ABSENT:
                return None
            raise classify(source, str(path), err) from err
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise Refused(source, str(path), f"{file_kind(mode)}, not a regular file: "
                                                 "refused, nothing read")
            return self._read_bounded(fd, path, source, limit + 1)
        except OSError as err:
            raise classify(source, str(path), err) from err
        finally:
            os.close(fd)

    def _read_bounded(self, fd: int, path: Path, source: str, limit: int) -> bytes:
        """Return up to ``limit`` bytes of ``fd``; raise ``Refused`` past ``read_seconds``."""
        end = self.clock() + self.read_seconds
        parts: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(CHUNK, limit - size))
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
            if size < limit and self.clock() > end:
                raise Refused(source, str(path), f"not read within {self.read_seconds:g} s "
                                                 f"({size} bytes read): refused")
        return b"".join(parts)

    def listdir(self, host_path: str, source: str) -> tuple[str, ...] | None:
        """Return every name in a host directory (sorted), None if absent.

        The same tuple is returned while the directory's device, inode and mtime stay the
        same (and its mtime is not within ``RACY_NS`` of the listing). Raises ``Cut`` (with
        the names listed so far) when the listing takes longer than ``list_seconds`` or
        reaches ``MAX_ENTRIES``; other errors are classified.
        """
        path = self._resolved(host_path, source)
        try:
            st = os.stat(path)
        except OSError as err:
            if err.errno in _ABSENT:
                return None
            raise classify(source, str(path), err) from err
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        kept = self._listings.get(path)
        if kept is not None and kept.key == key:
            return kept.names
        listed_at = time.time_ns()
        names = self._list(path, source)
        if names is None:
            return None
        if len(self._listings) >= LISTING_CACHE:
            self._listings.clear()
        if st.st_mtime_ns < listed_at - RACY_NS:
            self._listings[path] = _Listing(key, names)
        else:
            self._listings.pop(path, None)
        return names

    def _list(self, path: Path, source: str) -> tuple[str, ...] | None:
        """Return the sorted names of ``path`` (None if it went); raise ``Cut`` at a bound."""
        end = self.clock() + self.list_seconds
        names: list[str] = []
        why = ""
        try:
            with os.scandir(path) as it:
                for entry in it:
                    names.append(entry.name)
                    if len(names) >= MAX_ENTRIES:
                        why = f"more than {MAX_ENTRIES} names"
                        break
                    if len(names) % 1024 == 0 and self.clock() > end:
                        why = f"not listed within {self.list_seconds:g} s"
                        break
        except OSError as err:
            if err.errno in _ABSENT:
                return None
            raise classify(source, str(path), err) from err
        names.sort()
        if why:
            raise Cut(source, str(path), f"{why}: cut at {len(names)} names", tuple(names))
        return tuple(names)

    def device_number(self, host_path: str) -> tuple[str, int, int] | None:
        """Return (``char`` or ``block``, major, minor) of a device node on the host, None
        when it is absent or not a device node. Links are followed inside the root; the
        node itself is never opened."""
        path = self.resolve(host_path)
        if path is None:
            return None
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISCHR(st.st_mode):
            return "char", os.major(st.st_rdev), os.minor(st.st_rdev)
        if stat.S_ISBLK(st.st_mode):
            return "block", os.major(st.st_rdev), os.minor(st.st_rdev)
        return None

    def signature(self, host_path: str) -> Signature | None:
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
