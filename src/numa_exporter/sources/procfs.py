"""procfs source: paths and raw bytes of system and per-process files under ``--path.procfs``."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import Absent, Gone, classify
from numa_exporter.sources.exec_probe import ExecProbe
from numa_exporter.sources.files import read_optional, read_records, read_small, stream_chunks
from numa_exporter.sources.held import HeldFiles
from numa_exporter.sources.maps_query import with_maps_descriptor
from numa_exporter.sources.pagemap_scan import scan_pages
from numa_exporter.sources.process_fds import DeviceFd, is_live_procfs, open_device_files

T = TypeVar("T")


class ProcFS:
    """System-wide files of one procfs root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.held: HeldFiles | None = None  # see hold_files()
        self.exec_probe = ExecProbe()  # each process's address space generation

    def hold_files(self) -> bool:
        """Keep the small files every scan reads of every process (statm, status, comm,
        cmdline) open between reads, where the root is a live procfs (see sources/held.py);
        return whether they are held."""
        if self.held is None and self.is_live():
            self.held = HeldFiles()
        return self.held is not None

    def retain(self, pids: frozenset[int]) -> None:
        """Close the held files of processes not in ``pids`` (no longer listed)."""
        if self.held is not None:
            self.held.retain(pids)
        self.exec_probe.retain(pids)

    def exec_generation(self, pid: int, mm_dir: str) -> int | None:
        """Return the generation of ``pid``'s address space (a new one after each exec),
        or None where it cannot be told; see sources/exec_probe.py. Never raises."""
        return self.exec_probe.generation(pid, mm_dir)

    def pids(self) -> list[int]:
        """Return the process ids listed in the root (directories named by digits)."""
        try:
            return sorted(int(n) for n in os.listdir(self.root) if n.isdigit())
        except OSError as err:
            raise classify("proc", str(self.root), err) from err

    def vmstat(self) -> bytes:
        """Return the bytes of /proc/vmstat."""
        return read_small(self.root / "vmstat", "vmstat")

    def stat(self) -> bytes:
        """Return the bytes of /proc/stat."""
        return read_small(self.root / "stat", "stat")

    def numa_balancing(self) -> bytes | None:
        """Return kernel.numa_balancing, or None on kernels built without it."""
        return read_optional(self.root / "sys" / "kernel" / "numa_balancing", "numa_balancing")

    def promote_rate_limit(self) -> bytes | None:
        """Return kernel.numa_balancing_promote_rate_limit_MBps, or None where absent."""
        return read_optional(
            self.root / "sys" / "kernel" / "numa_balancing_promote_rate_limit_MBps",
            "numa_balancing",
        )

    def devices(self) -> bytes:
        """Return the bytes of ``devices`` (character and block driver majors)."""
        return read_small(self.root / "devices", "devices")

    def nvidia_gpus(self) -> list[str]:
        """Return the PCI addresses listed under ``driver/nvidia/gpus`` (NVIDIA's driver)."""
        base = self.root / "driver" / "nvidia" / "gpus"
        try:
            return sorted(e.name for e in os.scandir(base))
        except OSError as err:
            raise classify("nvidia", str(base), err) from err

    def nvidia_information(self, gpu: str) -> bytes:
        """Return the bytes of ``driver/nvidia/gpus/<gpu>/information``."""
        return read_small(self.root / "driver" / "nvidia" / "gpus" / gpu / "information",
                          "nvidia")

    def nvidia_numa_status(self, gpu: str) -> bytes:
        """Return the bytes of ``driver/nvidia/gpus/<gpu>/numa_status`` (present only for
        GPUs whose memory can be a NUMA node)."""
        return read_small(self.root / "driver" / "nvidia" / "gpus" / gpu / "numa_status",
                          "nvidia")

    def self_status(self) -> bytes:
        """Return the bytes of ``self/status`` (the exporter's own, as this root shows it)."""
        return read_small(self.root / "self" / "status", "status")

    def is_live(self) -> bool:
        """Return whether the root is a mounted kernel procfs (not a fixture tree)."""
        return is_live_procfs(self.root)

    def osrelease(self) -> bytes:
        """Return kernel.osrelease (``uname -r``), read from the procfs root."""
        return read_small(self.root / "sys" / "kernel" / "osrelease", "osrelease")

    def kpageflags(self, pfns: Sequence[int]) -> list[bytes]:
        """Return the 8-byte ``kpageflags`` entry of each page frame in ``pfns`` (reading it
        needs CAP_SYS_ADMIN: Denied without it)."""
        return read_records(self.root / "kpageflags", "kpageflags", [p * 8 for p in pfns])

    def process(self, pid: int) -> ProcessFiles:
        """Return the file accessor of one process."""
        return ProcessFiles(f"{self.root}/{pid}", pid, held=self.held)


class ProcessFiles:
    """Files of one process (``/proc/<pid>``); every read raises a classified SourceError.

    The folder is kept as text and made a Path only when asked for: a scan screens every
    process of the host by its status, and building paths was a good part of that.

    A process whose main thread has exited (its leader a zombie: ``status`` without VmRSS,
    an empty ``numa_maps``) is read through one of its live threads: ``through(tid)`` returns
    the files whose memory-wide reads (status, numa_maps, maps, cmdline, cgroup, fds) come
    from ``task/<tid>/``, while its identity (stat) and thread list stay the process's.
    """

    def __init__(self, path: Path | str, pid: int, via: int | None = None,
                 held: HeldFiles | None = None) -> None:
        self._dir = str(path)
        self._held = held if via is None else None  # a live thread's files are not held
        self._path = path if isinstance(path, Path) else None
        self.pid = pid
        self.via = via  # the live thread read for a zombie leader, else None
        self._mm_dir = self._dir if via is None else f"{self._dir}/task/{via}"

    @property
    def _mm(self) -> Path:
        """Return the folder the memory-wide files are read from (see the class)."""
        return Path(self._mm_dir)

    def through(self, tid: int) -> ProcessFiles:
        """Return these files read through the live thread ``tid`` (see the class)."""
        return ProcessFiles(self._dir, self.pid, tid)

    @property
    def mm_dir(self) -> str:
        """Return the folder the memory-wide files are read from (``pagemap`` included)."""
        return self._mm_dir

    @property
    def mm_pid(self) -> int:
        """Return the id that names the process's memory to system calls (move_pages):
        the live thread's for a zombie leader, whose own task has no memory left."""
        return self.pid if self.via is None else self.via

    @property
    def path(self) -> Path:
        """Return the process's folder."""
        if self._path is None:
            self._path = Path(self._dir)
        return self._path

    def _small(self, folder: str, name: str, held: bool = True) -> bytes:
        """Return the bytes of the small file ``name`` in ``folder``, through a held
        descriptor where there is one and ``held`` (a single-record seq_file: a short read
        is the end, see sources/held.py).

        psutil's rule: a missing file raises Gone only when ``folder`` is gone too, else
        Absent (a partial tree, a masked path), counted as an error, never taken for an exit.
        """
        path = f"{folder}/{name}"
        try:
            if held and self._held is not None:
                return self._held.read(self.pid, path, name, True)
            return read_small(path, name)
        except Gone as err:
            raise self._gone_or_absent(err, folder) from err

    def status(self) -> bytes:
        """Return the bytes of status."""
        return self._small(self._mm_dir, "status")

    def stat(self) -> bytes:
        """Return the bytes of stat."""
        return self._small(self._dir, "stat", held=False)

    def statm(self) -> bytes:
        """Return the bytes of statm (page counts: size, resident, ...)."""
        return self._small(self._dir, "statm")

    def comm(self) -> bytes:
        """Return the bytes of comm (the task's name and a newline)."""
        return self._small(self._mm_dir, "comm")

    def cmdline(self) -> bytes:
        """Return the bytes of cmdline (NUL-separated)."""
        return self._small(self._mm_dir, "cmdline")

    def cgroup(self) -> bytes:
        """Return the bytes of cgroup."""
        return self._small(self._mm_dir, "cgroup", held=False)

    def numa_maps(self) -> Iterator[bytes]:
        """Yield the text of numa_maps in chunks as the kernel produces it (walks page tables).

        Lazy: the file is opened at the first item and closed when the iterator is dropped.
        A numa_maps absent while the process's directory is there raises Absent, not Gone.
        """
        return self._stream("numa_maps")

    def maps(self) -> Iterator[bytes]:
        """Yield the text of maps (the VMA list; no page walk) in chunks, lazily.

        A maps absent while the process's directory is there raises Absent, not Gone.
        """
        return self._stream("maps")

    def query_maps(self, run: Callable[[int], T]) -> T:
        """Return what ``run`` returns given a descriptor open on ``maps`` (for
        PROCMAP_QUERY, see sources/maps_query.py). Raises MapsQueryUnsupported on a kernel
        without the ioctl; a maps absent while the process's directory is there raises
        Absent, not Gone."""
        try:
            return with_maps_descriptor(f"{self._mm_dir}/maps", run)
        except Gone as err:
            raise self._gone_or_absent(err) from err

    def pagemap(self, pages: Sequence[int]) -> list[bytes]:
        """Return the 8-byte ``pagemap`` entry of each virtual page number in ``pages`` (one
        ``pread`` each: the kernel walks that one page's table entry under the mmap lock).

        An absent pagemap while the process's directory is there raises Absent, not Gone.
        """
        try:
            return read_records(f"{self._mm_dir}/pagemap", "pagemap", [p * 8 for p in pages])
        except Gone as err:
            raise self._gone_or_absent(err) from err

    def pagemap_scan(self, pages: Sequence[int], page_size: int) -> list[bytes] | None:
        """Return the ``PAGEMAP_SCAN`` answer for each virtual page number in ``pages`` (one
        ioctl each), or None where the kernel or the file has no such ioctl.

        An absent pagemap while the process's directory is there raises Absent, not Gone.
        """
        try:
            return scan_pages(f"{self._mm_dir}/pagemap", pages, page_size)
        except Gone as err:
            raise self._gone_or_absent(err) from err

    def fds(self, *, stat_rdev: bool, deadline: Deadline = NEVER) -> tuple[DeviceFd, ...]:
        """Return the accelerator device files the process has open (see process_fds).

        A missing fd folder raises Absent while the process's directory is there (a
        partial tree), Gone when the process is gone; ``Expired`` past ``deadline``.
        """
        try:
            return open_device_files(self._mm.parent, self.mm_pid, stat_rdev=stat_rdev,
                                     deadline=deadline)
        except Gone as err:
            raise self._gone_or_absent(err) from err

    def _stream(self, name: str) -> Iterator[bytes]:
        try:
            yield from stream_chunks(self._mm / name, name)
        except Gone as err:
            raise self._gone_or_absent(err) from err

    def _gone_or_absent(self, err: Gone, folder: str | None = None) -> Gone | Absent:
        """Return ``err`` when the process is gone, Absent when only the file is (ENOENT
        with ``folder``, by default the memory-wide files' folder, still there: psutil's
        rule)."""
        if err.errno != errno.ENOENT:
            return err  # ESRCH: the process is exiting
        try:
            os.stat(folder if folder is not None else self._mm_dir)
        except OSError:
            return err
        return Absent(err.source, err.path, OSError(errno.ENOENT, "absent while the process "
                                                     "lives"))

