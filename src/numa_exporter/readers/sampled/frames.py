"""The sampling frame of a process: its VMA list made strata, read the cheaper of two ways.

A sampled read draws pages from the process's current mappings, so it needs the VMA list
every time. The kernel gives it two ways: the ``maps`` text (every line printed, and a
``d_path`` per file mapping) and, from Linux 6.11, ``PROCMAP_QUERY`` on the same descriptor
(one ``ioctl`` per VMA, no path unless asked; ``sources/maps_query.py``). Which one costs
less depends on the process: on 60,000 anonymous mappings the text costs about half what
the ioctls do, on 60,000 memfds of distinct names about 1.4x. So :class:`FrameCache`
measures both for each process that has many mappings (the CPU time of this thread over the
read, :func:`time.thread_time_ns`) and uses the cheaper, trying the other again after
:data:`REPROBE_FIRST` reads, then after twice as many each time it is confirmed the dearer
(at most :data:`REPROBE_MAX`).

Both give the same strata for the same VMAs: the ioctl path classifies a VMA by the kind the
last read gave the same VMA (start, end, device, inode: the known records) and asks the
kernel for the path of any other, classified by the same C rules as the text's paths.
Where the extension is not built, the kernel has no ioctl or the process has fewer than
:data:`QUERY_MIN_MAPPINGS` mappings, the text is read.
"""

from __future__ import annotations

import itertools
import math
import time
from array import array
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum

from numa_exporter.model.sampling import Stratum, build_strata, largest_mapping
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_maps import parse_pid_maps
from numa_exporter.readers.sampled import compiled as sampled_compiled
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import ReadFailed
from numa_exporter.sources.maps_query import MapsQueryUnsupported
from numa_exporter.sources.procfs import ProcessFiles

#: Processes with fewer mappings are read by the text only (it costs little either way).
QUERY_MIN_MAPPINGS = 2048
#: Reads after which the way not in use is tried again; doubled each time it is confirmed
#: the dearer, up to REPROBE_MAX.
REPROBE_FIRST = 8
REPROBE_MAX = 256
#: Lines the pure-Python parse reads between two checks of the deadline.
CHECK_LINES = 4096


class Way(Enum):
    """How a VMA list is read."""

    TEXT = "text"
    QUERY = "query"


def maps_lines(files: ProcessFiles) -> Iterator[bytes]:
    """Yield the lines of ``maps`` (the VMA list; reading it walks no page tables)."""
    return _lines(files.maps())


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Yield the lines of a text given in chunks, each with its newline (the last may lack
    one); only a newline ends a line, as the kernel writes them."""
    rest = b""
    for chunk in chunks:
        *whole, rest = (rest + chunk).split(b"\n")
        for line in whole:
            yield line + b"\n"
    if rest:
        yield rest


@dataclass(frozen=True, slots=True)
class Frame:
    """The sampling frame of one VMA list: its strata and what the scan keeps of it."""

    strata: dict[Kind, Stratum]
    parse_errors: int
    largest_mapping: int
    mappings: int


@dataclass(slots=True)
class Costs:
    """What reading one process's VMA list cost each way (ns of CPU per mapping, the last
    read that way; None: not tried), the way in use and when to try the other again."""

    text: float | None = None
    query: float | None = None
    reads: int = 0
    reprobe: int = REPROBE_FIRST

    def best(self) -> Way | None:
        """Return the cheaper way as last measured (None: one of them not tried)."""
        if self.text is None or self.query is None:
            return None
        return Way.QUERY if self.query < self.text else Way.TEXT

    def choose(self) -> Way:
        """Return the way of the next read: the query until it was tried once, then the
        cheaper, and the other when it is due to be tried again."""
        if self.query is None:
            return Way.QUERY
        best = self.best() or Way.TEXT
        if self.reads >= self.reprobe:
            return Way.TEXT if best is Way.QUERY else Way.QUERY
        return best

    def failed(self, way: Way) -> None:
        """Record a read ``way`` that failed: the other is used until ``way`` is due to be
        tried again (the wait doubling while it keeps failing)."""
        self.record(way, math.inf, 1)

    def record(self, way: Way, ns: float, mappings: int) -> None:
        """Record a read ``way`` that cost ``ns`` of CPU over ``mappings`` mappings."""
        before = self.best()
        if way is Way.TEXT:
            self.text = ns / max(mappings, 1)
        else:
            self.query = ns / max(mappings, 1)
        after = self.best()
        if before is None:  # the first of both measured: wait from here
            self.reads = 0
        elif way is not before:  # the other way, tried again
            confirmed = after is before
            self.reprobe = min(self.reprobe * 2, REPROBE_MAX) if confirmed else REPROBE_FIRST
            self.reads = 0
        elif after is not before:  # the way in use became the dearer: switch
            self.reprobe, self.reads = REPROBE_FIRST, 0
        else:
            self.reads += 1


@dataclass(slots=True)
class _Kept:
    """One process's last frame, the text it came from (None: read by the ioctl), its known
    records and its read costs."""

    text: bytes | None
    frame: Frame
    known: bytes = b""
    costs: Costs = field(default_factory=Costs)

    @property
    def size(self) -> int:
        """Return the bytes it holds (texts and records)."""
        return len(self.text or b"") + len(self.known)


class FrameCache:
    """The last frame per process (keyed by its identity, see ``readers/sampled/reader.py``),
    reused while the process's VMA list is the same: the list is
    still read each time (no page walk), but not made strata again. A process of many
    threads has a mapping per thread stack, one of many memfds a mapping per file; parsing
    them was most of a sampled read. Also the choice of way per process (module docstring).

    ``query_usable`` says whether this kernel answers PROCMAP_QUERY (None: not asked yet).

    Bounded: at most ``max_entries`` processes, texts of at most ``max_text`` bytes (a bigger one
    is parsed as it streams and not kept) and ``max_bytes`` of kept texts and records in all
    (the oldest go first).
    """

    def __init__(self, max_entries: int = 256, max_text: int = 16 << 20,
                 max_bytes: int = 64 << 20) -> None:
        self.max_entries = max_entries
        self.max_text = max_text
        self.max_bytes = max_bytes
        self.kept_bytes = 0
        self.query_usable: bool | None = None
        self._frames: dict[Hashable, _Kept] = {}

    def __len__(self) -> int:
        return len(self._frames)

    def retain(self, keys: frozenset[Hashable]) -> None:
        """Forget the frame of every process whose key is not in ``keys``."""
        for key in [k for k in self._frames if k not in keys]:
            self._drop(key)

    def read(self, key: Hashable, files: ProcessFiles, page_size: int,
             hugetlbfs_mounts: tuple[str, ...], compiled: bool = True,
             deadline: Deadline = NEVER) -> tuple[Frame, Way]:
        """Return the frame of process ``files`` (kept under ``key``) and the way it was
        read: by PROCMAP_QUERY where that measured cheaper for this process (module
        docstring), else by the text. Raises the classified SourceError of the read;
        ``Expired`` past ``deadline``."""
        kept = self._frames.get(key)
        if (kept is not None and kept.known and self.query_usable is not False and compiled
                and sampled_compiled.COMPILED
                and len(hugetlbfs_mounts) <= sampled_compiled.MAX_MOUNTS
                and kept.frame.mappings >= QUERY_MIN_MAPPINGS
                and kept.costs.choose() is Way.QUERY):
            began = time.thread_time_ns()
            try:
                frame = self._query(key, files, kept, page_size, hugetlbfs_mounts, deadline)
            except MapsQueryUnsupported:
                self.query_usable = False
            except ReadFailed:  # a path too long, a list changing too fast: the text
                kept.costs.failed(Way.QUERY)
            else:
                self.query_usable = True
                kept.costs.record(Way.QUERY, time.thread_time_ns() - began, frame.mappings)
                return frame, Way.QUERY
        began = time.thread_time_ns()
        frame = self.frame(key, deadline.each(files.maps()), page_size,
                           hugetlbfs_mounts, compiled, deadline)
        now = self._frames.get(key)
        if now is not None:
            now.costs.record(Way.TEXT, time.thread_time_ns() - began, frame.mappings)
        return frame, Way.TEXT

    def _query(self, key: Hashable, files: ProcessFiles, kept: _Kept, page_size: int,
               hugetlbfs_mounts: tuple[str, ...], deadline: Deadline) -> Frame:
        """Return the frame read by PROCMAP_QUERY: the kept one (with its text) when the
        strata are the same, else a new one; keep it with the query's known records."""
        parsed, _ = files.query_maps(lambda fd: sampled_compiled.query_frame(
            fd, page_size, hugetlbfs_mounts, kept.known, deadline))
        if same_strata(parsed.strata, kept.frame.strata):
            # the kept frame stands, and so does the text it came from: a text read that
            # finds it unchanged need not parse it again
            self._keep(key, _Kept(kept.text, kept.frame, parsed.known, kept.costs))
            return kept.frame
        frame = Frame(parsed.strata, parsed.errors, largest_mapping(parsed.strata),
                      parsed.mappings)
        self._keep(key, _Kept(None, frame, parsed.known, kept.costs))
        return frame

    def frame(self, key: Hashable, chunks: Iterable[bytes], page_size: int,
              hugetlbfs_mounts: tuple[str, ...], compiled: bool = True,
              deadline: Deadline = NEVER) -> Frame:
        """Return the frame of the maps text of process ``key`` given in ``chunks``: the kept one
        when the text is the same, else parsed (and kept when it is small enough);
        ``compiled``: parse with the extension where it is built; ``deadline`` is checked
        as the parse goes (``Expired`` gives it up)."""
        it = iter(chunks)
        head: list[bytes] = []
        size = 0
        for chunk in it:
            head.append(chunk)
            size += len(chunk)
            if size > self.max_text:  # too big to keep: parse it as it streams
                self._drop(key)
                return parse_maps_text(itertools.chain(head, it), page_size,
                                       hugetlbfs_mounts, compiled, deadline)
        text = b"".join(head)
        kept = self._frames.get(key)
        costs = kept.costs if kept is not None else Costs()
        if kept is not None and kept.text == text:
            return kept.frame
        got, known = _parse_known((text,), page_size, hugetlbfs_mounts, compiled, deadline,
                                  True)
        if got.mappings < QUERY_MIN_MAPPINGS:
            known = b""
        self._keep(key, _Kept(text, got, known, costs))
        return got

    def _drop(self, key: Hashable) -> None:
        """Forget the kept frame of process ``key``."""
        old = self._frames.pop(key, None)
        if old is not None:
            self.kept_bytes -= old.size

    def _keep(self, key: Hashable, kept: _Kept) -> None:
        """Keep ``kept`` as process ``key``'s, the newest; drop the oldest while the bounds
        are exceeded."""
        self._drop(key)
        if self.max_entries <= 0 or kept.size > self.max_bytes:
            return
        while self._frames and (len(self._frames) >= self.max_entries
                                or self.kept_bytes + kept.size > self.max_bytes):
            self._drop(next(iter(self._frames)))
        self._frames[key] = kept
        self.kept_bytes += kept.size


def same_strata(a: dict[Kind, Stratum], b: dict[Kind, Stratum]) -> bool:
    """Return True when ``a`` and ``b`` hold the same ranges of the same kinds in the same
    order (what a draw depends on)."""
    return list(a) == list(b) and all(
        _raw(s.starts) == _raw(b[k].starts) and _raw(s.cumulative) == _raw(b[k].cumulative)
        and s.page_size == b[k].page_size for k, s in a.items())


def _raw(values: Sequence[int]) -> bytes:
    """Return the packed values of an ``array('Q')`` (or of any int sequence)."""
    return values.tobytes() if isinstance(values, array) else array("Q", values).tobytes()


def parse_maps_text(chunks: Iterable[bytes], page_size: int,
                    hugetlbfs_mounts: tuple[str, ...], compiled: bool = True,
                    deadline: Deadline = NEVER) -> Frame:
    """Return the frame of a maps text given in chunks (with the extension where it is
    built and ``compiled`` is True: the same frame, at a fraction of the cost); ``deadline``
    is checked before each piece of the text is parsed (``Expired`` gives it up)."""
    return _parse_known(chunks, page_size, hugetlbfs_mounts, compiled, deadline, False)[0]


def _parse_known(chunks: Iterable[bytes], page_size: int, hugetlbfs_mounts: tuple[str, ...],
                 compiled: bool, deadline: Deadline, keep_known: bool
                 ) -> tuple[Frame, bytes]:
    """Return :func:`parse_maps_text`'s frame and its known records (empty unless
    ``keep_known`` and parsed by the extension)."""
    if (compiled and sampled_compiled.COMPILED
            and len(hugetlbfs_mounts) <= sampled_compiled.MAX_MOUNTS):
        got = sampled_compiled.parse_frame(chunks, page_size, hugetlbfs_mounts, deadline,
                                           keep_known)
        return Frame(got.strata, got.errors, largest_mapping(got.strata),
                     got.mappings), got.known
    maps = parse_pid_maps(_checked(_lines(chunks), deadline))
    strata = build_strata(maps.entries, page_size, hugetlbfs_mounts)
    return Frame(strata, maps.error_count, largest_mapping(strata), len(maps.entries)), b""


def _checked(lines: Iterator[bytes], deadline: Deadline) -> Iterator[bytes]:
    """Yield ``lines``, checking ``deadline`` before every :data:`CHECK_LINES` of them."""
    for i, line in enumerate(lines):
        if i % CHECK_LINES == 0:
            deadline.check("maps parse")
        yield line
