"""Sampled placement reader: maps + status + move_pages -> PlacementEstimate, no page walk.

Reading ``numa_maps`` makes the kernel walk every page table entry of the target under its
mmap lock; for a process of hundreds of GiB that stalls its mmap/munmap/page faults for
seconds per scan. This reader instead reads ``maps`` (the VMA list only), asks
``move_pages(2)`` for the node of a few thousand pages (the kernel takes the mmap lock for
16 pages at a time) and scales the shares to the resident counters of ``status``. See
:mod:`numa_exporter.model.sampling` for the design and its error bound.

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
from pathlib import Path

from numa_exporter.model.sample_memory import SampleMemory
from numa_exporter.model.sampling import (
    DEFAULT_CENSUS_PAGES,
    DEFAULT_CONFIDENCE,
    DEFAULT_TARGET_ERROR,
    PageSampler,
    PlacementEstimate,
    QuerySampler,
    estimate_placement,
    status_totals,
)
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_maps import DEFAULT_HUGETLBFS_MOUNTS
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.readers import sampled_compiled, sampled_sparse
from numa_exporter.readers.maps_frames import FRAMES, FrameCache, Way, parse_maps_text
from numa_exporter.readers.sampled_memory import read_with_memory
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import ReadFailed, SourceError
from numa_exporter.sources.move_pages import MovePages, MovePagesUnsupported
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

_MOVE_PAGES: MovePages | None = None


def page_sampler(move_pages: MovePages, pid: int, compiled: bool = True) -> PageSampler:
    """Return the page sampler of process ``pid``: the extension's where it is built, the
    system call number is known, ``move_pages`` queries as :class:`MovePages` does (a
    subclass with a query of its own keeps it) and ``compiled`` is True; else the
    pure-Python one over ``move_pages.query``."""
    if (compiled and sampled_compiled.COMPILED and move_pages.number is not None
            and type(move_pages).query is MovePages.query):
        return sampled_compiled.CompiledSampler(move_pages, pid)
    return QuerySampler(move_pages.for_pid(pid))


def default_move_pages() -> MovePages:
    """Return this machine's move_pages (made once); raise MovePagesUnsupported where there
    is none."""
    global _MOVE_PAGES
    if _MOVE_PAGES is None:
        _MOVE_PAGES = MovePages()
    return _MOVE_PAGES


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
        mp = move_pages or default_move_pages()
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


def _move_pages_for(files: ProcessFiles, move_pages: MovePages | None) -> MovePages:
    """Return ``move_pages``, or this machine's when None. Raises ReadFailed (ENOSYS)
    when it has none: it surfaces as a read error; :func:`sampling_available` says why."""
    try:
        return move_pages or default_move_pages()
    except MovePagesUnsupported as exc:
        raise _no_move_pages(files, exc) from exc


def read_sampled(
    files: ProcessFiles,
    status: PidStatus,
    *,
    target_error: float = DEFAULT_TARGET_ERROR,
    confidence: float = DEFAULT_CONFIDENCE,
    rng: random.Random | None = None,
    move_pages: MovePages | None = None,
    page_size: int | None = None,
    census_pages: int = DEFAULT_CENSUS_PAGES,
    max_queries: int | None = None,
    hugetlbfs_mounts: tuple[str, ...] = DEFAULT_HUGETLBFS_MOUNTS,
    deadline: Deadline = NEVER,
    frames: FrameCache | None = FRAMES,
    compiled: bool = True,
    narrow: bool = True,
    memory: SampleMemory | None = None,
    host_migrated: int | None = None,
    scans: sampled_sparse.ScanCache | None = sampled_sparse.SCANS,
) -> PlacementEstimate:
    """Return the sampled placement of one process.

    ``status`` is the parsed status of the same process, read just before. Raises the
    classified SourceError of maps or move_pages (Gone, Denied, ReadFailed; ReadFailed also
    when this machine has no move_pages at all: call :func:`sampling_available` once first).
    ``max_queries`` bounds the pages queried (the scan sizes it to the full read's cost);
    ``deadline`` is checked before each chunk of ``maps`` is read, before each piece of it
    is parsed and before each move_pages batch (``Expired`` gives the read up: the parse
    counts against the scan's deadline).
    ``frames`` keeps each pid's parsed maps while its text does not change (None: parse
    every time). ``compiled``: parse maps, draw and query with the extension where it is
    built (the same estimate for the same ``rng``; False: the pure-Python path). ``narrow``:
    draw a sparse stratum's pages from its present runs (``readers/sampled_sparse.py``,
    PAGEMAP_SCAN where the kernel has it); ``scans`` keeps each pid's scan between reads
    (None: scan afresh each time); the bytes of a reservation's part not scanned yet are
    reported unsampled. ``memory``: what earlier reads of this process learned
    (``readers/sampled_memory.py``: carried counts, followed pages; updated here), with
    ``host_migrated`` the host's migrated-pages counter now; None: a read on its own.
    Matches ``scan/process.py``'s ``SampledReader`` protocol.
    """
    mp = _move_pages_for(files, move_pages)
    size = page_size or os.sysconf("SC_PAGE_SIZE")
    if frames is None:
        frame = parse_maps_text(deadline.each(files.maps()), size, hugetlbfs_mounts,
                                compiled, deadline)
        way = Way.TEXT
    else:
        frame, way = frames.read(files, size, hugetlbfs_mounts, compiled, deadline)
    totals = status_totals(status)
    strata = frame.strata
    unscanned: dict[Kind, sampled_sparse.Unscanned] = {}
    if narrow:
        state = scans.state(files.pid) if scans is not None else None
        strata, unscanned = sampled_sparse.narrowed(files.mm_dir, strata, totals, state)
    path = "pagemap_scan" if any(strata.get(k) is not s for k, s in frame.strata.items()) \
        else "move_pages"
    sampler = page_sampler(mp, files.mm_pid, compiled)
    rng = rng if rng is not None else random.Random()

    def estimate(queries: int | None) -> PlacementEstimate:
        return estimate_placement(strata, totals, None, sampler=sampler,
                                  target_error=target_error, confidence=confidence,
                                  rng=rng, census_pages=census_pages, max_queries=queries,
                                  deadline=deadline)

    try:
        if memory is None:
            est = estimate(max_queries)
        else:
            est = read_with_memory(memory, frame.strata, strata, totals,
                                   mp.for_pid(files.mm_pid), estimate,
                                   host_migrated=host_migrated, max_queries=max_queries,
                                   rng=rng, deadline=deadline)
    except MovePagesUnsupported as exc:  # ENOSYS from the kernel
        raise _no_move_pages(files, exc) from exc
    est = sampled_sparse.set_aside(est, unscanned, totals, size)
    return dataclasses.replace(est, parse_errors=frame.parse_errors,
                               largest_mapping=frame.largest_mapping, mappings=frame.mappings,
                               path=path, maps_way=way.value)
