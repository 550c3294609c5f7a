"""Sampled placement reader: maps + status + move_pages -> PlacementEstimate, no page walk.

Reading ``numa_maps`` makes the kernel walk every page table entry of the target under its
mmap lock; for a process of hundreds of GiB that stalls its mmap/munmap/page faults for
seconds per scan. This reader instead reads ``maps`` (the VMA list only), asks
``move_pages(2)`` for the node of a few thousand pages (the kernel takes the mmap lock for
16 pages at a time) and scales the shares to the resident counters of ``status``. See
:mod:`numa_exporter.model.sampling` for the design and its error bound.

:class:`SampledReader` is the one owner of what the reader keeps between reads: each
process's parsed VMA list (:class:`~.frames.FrameCache`) and PAGEMAP_SCAN runs
(:class:`~.sparse.ScanCache`), keyed by the process's identity (pid, start time and the
image exec() laid out, as ``model/process_state.py`` keys it), and what this machine can do
(its ``move_pages``, whether the kernel answers PROCMAP_QUERY and PAGEMAP_SCAN). The scanner
calls :meth:`SampledReader.retain` with the processes its table keeps, so a process the
table drops leaves nothing here. What a process's sampled reads learned about its pages
(``SampleMemory``: carried counts, followed pages) lives in its ``ProcessState`` and comes
with each :class:`SampledRequest`.

PID namespaces: move_pages takes a pid of the *caller's* PID namespace, whereas the pids
come from the procfs root the exporter was given. :func:`sampling_available` refuses
sampling when the two namespaces differ (a container without ``--pid=host`` reading the
host's proc at ``/host/proc``): there the pid would name another process, or none.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import random
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path

from numa_exporter.model.process_state import ProcessKey
from numa_exporter.model.sample_memory import SampleMemory
from numa_exporter.model.sampling import (
    DEFAULT_CENSUS_PAGES,
    DEFAULT_CONFIDENCE,
    DEFAULT_TARGET_ERROR,
    PageSampler,
    PlacementEstimate,
    QuerySampler,
    Stratum,
    estimate_placement,
    status_totals,
)
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_maps import DEFAULT_HUGETLBFS_MOUNTS
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.readers.sampled import compiled as sampled_compiled
from numa_exporter.readers.sampled import sparse as sampled_sparse
from numa_exporter.readers.sampled.frames import FrameCache, Way, parse_maps_text
from numa_exporter.readers.sampled.memory import read_with_memory
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import ReadFailed, SourceError
from numa_exporter.sources.move_pages import MovePages, MovePagesUnsupported
from numa_exporter.sources.procfs import ProcessFiles, ProcFS


def page_sampler(move_pages: MovePages, pid: int, compiled: bool = True) -> PageSampler:
    """Return the page sampler of process ``pid``: the extension's where it is built, the
    system call number is known, ``move_pages`` queries as :class:`MovePages` does (a
    subclass with a query of its own keeps it) and ``compiled`` is True; else the
    pure-Python one over ``move_pages.query``."""
    if (compiled and sampled_compiled.COMPILED and move_pages.number is not None
            and type(move_pages).query is MovePages.query):
        return sampled_compiled.CompiledSampler(move_pages, pid)
    return QuerySampler(move_pages.for_pid(pid))


def _ns_pids(status: bytes) -> list[int] | None:
    """Return the NSpid values of a status file (None when absent or malformed)."""
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            parts = line[6:].split()
            if parts and all(p.isdigit() and len(p) < 12 for p in parts):
                return [int(p) for p in parts]
            return None
    return None


def sampling_available(procfs_root: Path, move_pages: MovePages | None = None
                       ) -> tuple[bool, str]:
    """Return (True, how) when sampled placement works for pids of ``procfs_root``, else
    (False, why).

    Checks that move_pages exists for this architecture and kernel (a query of one of our
    own pages), and that the procfs root shows processes of our own PID namespace: its
    ``self/status`` must list exactly one NSpid (ours is that namespace, not a descendant)
    equal to our pid. When we cannot see ourselves there (the root belongs to a namespace we
    are not in), or see ourselves under another pid, sampling is disabled.
    """
    try:
        mp = move_pages or MovePages()
    except MovePagesUnsupported as exc:
        return False, str(exc)
    probe = bytearray(1)
    buf = (ctypes.c_char * 1).from_buffer(probe)
    try:
        mp.query(os.getpid(), [ctypes.addressof(buf)])
    except (MovePagesUnsupported, SourceError) as exc:
        return False, f"move_pages probe failed: {exc}"
    finally:
        del buf
    try:
        text = ProcFS(procfs_root).self_status()
    except SourceError as exc:
        return False, (f"cannot read {procfs_root}/self/status ({exc.reason}): the procfs "
                       "root is not of our PID namespace; pids there are not ours")
    ns = _ns_pids(text)
    if ns is None:
        return False, f"{procfs_root}/self/status has no NSpid line: cannot check namespaces"
    if len(ns) != 1 or ns[0] != os.getpid():
        return False, (f"{procfs_root} is of another PID namespace (we are {ns} there, "
                       f"{os.getpid()} here): move_pages would query other processes; run "
                       "with the host's PID namespace (--pid=host, hostPID: true)")
    return True, f"move_pages via {mp.via}"


def _no_move_pages(files: ProcessFiles, exc: MovePagesUnsupported) -> ReadFailed:
    """Return the read error (ENOSYS) a process's read gets where move_pages is missing."""
    return ReadFailed("move_pages", f"move_pages({files.mm_pid})",
                      OSError(errno.ENOSYS, str(exc)))


@dataclass(frozen=True, slots=True)
class SampledSettings:
    """How a :class:`SampledReader` reads, the same for every read.

    ``target_error``/``confidence``/``census_pages``: the sample design
    (:mod:`numa_exporter.model.sampling`); ``page_size`` (None: this machine's);
    ``compiled``: parse maps, draw and query with the extension where it is built (the same
    estimate for the same random state; False: the pure-Python path); ``narrow``: draw a
    sparse stratum's pages from its present runs (``sparse.py``, PAGEMAP_SCAN where the
    kernel has it), with ``pagemap_read`` also from the ``pagemap`` entries where it has
    not; ``keep_frames``/``keep_scans``: keep each process's parsed maps while
    its text does not change, and its PAGEMAP_SCAN runs between reads (False: afresh each
    read).
    """

    target_error: float = DEFAULT_TARGET_ERROR
    confidence: float = DEFAULT_CONFIDENCE
    census_pages: int = DEFAULT_CENSUS_PAGES
    hugetlbfs_mounts: tuple[str, ...] = DEFAULT_HUGETLBFS_MOUNTS
    page_size: int | None = None
    compiled: bool = True
    narrow: bool = True
    pagemap_read: bool = True
    keep_frames: bool = True
    keep_scans: bool = True


@dataclass(frozen=True, slots=True)
class SampledRequest:
    """One sampled read of one process.

    ``key``: the process's identity (None: its pid alone, for a read outside a scan);
    ``max_queries`` bounds the pages queried (the scan sizes it to the full read's cost);
    ``deadline`` is checked before each chunk of ``maps`` is read, before each piece of it
    is parsed and before each move_pages batch (``Expired`` gives the read up);
    ``memory``: what earlier reads of this process learned (``memory.py``: carried counts,
    followed pages; updated by the read), with ``host_migrated`` the host's migrated-pages
    counter now (None: unknown); None: a read on its own; ``faulted``: the process took a
    fault or changed size since its last read (True: or unknown); ``rng``: the random state
    of the draws (None: a new one).
    """

    key: ProcessKey | None = None
    max_queries: int | None = None
    deadline: Deadline = NEVER
    memory: SampleMemory | None = None
    host_migrated: int | None = None
    faulted: bool = True
    rng: random.Random | None = None


#: What a process's kept state is filed under: pid, start time and exec image (None: not
#: known), so a recycled pid or an exec() starts afresh.
Identity = tuple[int, int, tuple[int, ...] | None]


def identity(key: ProcessKey) -> Identity:
    """Return the identity a process's kept state is filed under (the image compared too,
    unlike ``ProcessKey``'s equality)."""
    return (key.pid, key.start_ticks, key.image)


class SampledReader:
    """The sampled reader and the one owner of what it keeps (module docstring).

    Call it (or :meth:`read`) with a process's files, status and a
    :class:`SampledRequest`; :meth:`retain` drops the state of every process the scanner's
    table no longer holds. ``move_pages``: this machine's (None: made on the first read;
    a machine without it fails each read with ReadFailed, ENOSYS). Matches
    ``scan/process.py``'s ``SampledReader`` protocol.
    """

    def __init__(self, settings: SampledSettings | None = None,
                 move_pages: MovePages | None = None,
                 frames: FrameCache | None = None,
                 scans: sampled_sparse.ScanCache | None = None) -> None:
        self.settings = settings or SampledSettings()
        self._move_pages = move_pages
        self.frames = frames or FrameCache()
        self.scans = scans or sampled_sparse.ScanCache()

    def retain(self, keys: Iterable[ProcessKey]) -> None:
        """Drop what is kept of every process not among ``keys`` (the processes the
        scanner's table holds)."""
        keep: frozenset[Hashable] = frozenset(identity(k) for k in keys)
        self.frames.retain(keep)
        self.scans.retain(keep)

    def kept(self) -> int:
        """Return the processes anything is kept of (frames or scans)."""
        return len(self.frames) + len(self.scans)

    def move_pages(self, files: ProcessFiles) -> MovePages:
        """Return this machine's move_pages (made once). Raises ReadFailed (ENOSYS) when
        it has none: it surfaces as a read error; :func:`sampling_available` says why."""
        if self._move_pages is None:
            try:
                self._move_pages = MovePages()
            except MovePagesUnsupported as exc:
                raise _no_move_pages(files, exc) from exc
        return self._move_pages

    def __call__(self, files: ProcessFiles, status: PidStatus,
                 request: SampledRequest | None = None) -> PlacementEstimate:
        """Return :meth:`read`'s estimate."""
        return self.read(files, status, request)

    def read(self, files: ProcessFiles, status: PidStatus,
             request: SampledRequest | None = None) -> PlacementEstimate:
        """Return the sampled placement of one process.

        ``status`` is the parsed status of the same process, read just before. Raises the
        classified SourceError of maps or move_pages (Gone, Denied, ReadFailed; ReadFailed
        also when this machine has no move_pages at all: call :func:`sampling_available`
        once first), ``Expired`` past the request's deadline. The bytes of a reservation's
        part not scanned yet are reported unsampled.
        """
        req = request or SampledRequest()
        conf = self.settings
        deadline = req.deadline
        mp = self.move_pages(files)
        size = conf.page_size or os.sysconf("SC_PAGE_SIZE")
        ident: Identity = identity(req.key or ProcessKey(files.pid, -1))
        if not conf.keep_frames:
            frame = parse_maps_text(deadline.each(files.maps()), size,
                                    conf.hugetlbfs_mounts, conf.compiled, deadline)
            way = Way.TEXT
        else:
            frame, way = self.frames.read(ident, files, size, conf.hugetlbfs_mounts,
                                          conf.compiled, deadline)
        totals = status_totals(status)
        strata = frame.strata
        unscanned: dict[Kind, sampled_sparse.Unscanned] = {}
        if conf.narrow:
            state = self.scans.state(ident) if conf.keep_scans else None
            strata, unscanned = sampled_sparse.narrowed(
                files.mm_dir, strata, totals, self.scans, state,
                os.sysconf("SC_PAGE_SIZE"), conf.pagemap_read)
        path = ("pagemap_scan" if any(strata.get(k) is not s for k, s in frame.strata.items())
                else "move_pages")
        sampler = page_sampler(mp, files.mm_pid, conf.compiled)
        rng = req.rng if req.rng is not None else random.Random()

        def estimate_of(parts: dict[Kind, Stratum], bytes_of: dict[Kind, int],
                        queries: int | None) -> PlacementEstimate:
            return estimate_placement(parts, bytes_of, None, sampler=sampler,
                                      target_error=conf.target_error,
                                      confidence=conf.confidence, rng=rng,
                                      census_pages=conf.census_pages, max_queries=queries,
                                      deadline=deadline)

        def estimate(queries: int | None) -> PlacementEstimate:
            return estimate_of(strata, totals, queries)

        try:
            if req.memory is None:
                est = estimate(req.max_queries)
            else:
                est = read_with_memory(req.memory, frame.strata, strata, totals,
                                       mp.for_pid(files.mm_pid), estimate,
                                       host_migrated=req.host_migrated,
                                       max_queries=req.max_queries, rng=rng,
                                       deadline=deadline, estimate_of=estimate_of,
                                       faulted=req.faulted)
        except MovePagesUnsupported as exc:  # ENOSYS from the kernel
            raise _no_move_pages(files, exc) from exc
        est = sampled_sparse.set_aside(est, unscanned, totals, size)
        return dataclasses.replace(est, parse_errors=frame.parse_errors,
                                   largest_mapping=frame.largest_mapping,
                                   mappings=frame.mappings, path=path, maps_way=way.value)


def read_sampled(files: ProcessFiles, status: PidStatus,
                 request: SampledRequest | None = None,
                 settings: SampledSettings | None = None,
                 move_pages: MovePages | None = None) -> PlacementEstimate:
    """Return the sampled placement of one process read on its own: by a reader of its own
    that keeps nothing for a next read (see :meth:`SampledReader.read`)."""
    return SampledReader(settings, move_pages).read(files, status, request)
