"""The compiled inner loops of the sampled reader, where the package was built with them.

``_sampled_fast`` (a C extension, optional like the numa_maps scanner) parses ``maps`` into
strata, turns the caller's random draws into sorted page addresses and makes the
``move_pages`` calls and their tally, one call per batch. The pure-Python path
(``parsers/pid_maps.py``, ``model/sampling.py``, ``sources/move_pages.py``) is the reference:
for the same maps text, random state and page statuses both give the same frame and the same
estimate, so the compiled path only changes the cost. A mapping's path is classified in C by
the reference's rules (prefixes, no call into Python: a maps text of 60,000 distinct paths
cost a Python call each); :func:`path_kind` is the reference it is tested against, and the
extension's texts (``SHMEM_PREFIXES``, ...) are tested equal to Python's.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from numa_exporter.model.sampling import Stratum, Tally, sampleable
from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_maps import MAX_ENTRIES, mapping_kind, parse_maps_line
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.move_pages import MovePages, classify_errno

try:  # optional: `pip install .` without a compiler skips it
    from numa_exporter.readers.sampled import _sampled_fast
except ImportError:  # pragma: no cover - depends on the build
    _sampled_fast = None  # type: ignore[assignment]

COMPILED = _sampled_fast is not None
#: hugetlbfs mounts the extension takes at most (more: the pure-Python parse).
MAX_MOUNTS = _sampled_fast.MAX_MOUNTS if _sampled_fast is not None else 0
#: uint64 fields of one known record (start, end, device, inode, kind code).
KNOWN_FIELDS = _sampled_fast.KNOWN_FIELDS if _sampled_fast is not None else 5
#: Kind codes of the extension (index = code).
KINDS = (Kind.ANON, Kind.FILE, Kind.SHMEM, Kind.HUGETLB)
_CODE = {k: i for i, k in enumerate(KINDS)}
#: Bytes of maps text parsed per call (whole lines): bounds what is held at once.
PIECE = 256 << 10


def _u64(raw: bytes) -> array[int]:
    """Return packed native uint64 values as an ``array('Q')``."""
    out = array("Q")
    out.frombytes(raw)
    return out


def path_kind(raw: bytes, hugetlbfs_mounts: tuple[str, ...]) -> int:
    """Return the kind code of an accessible mapping whose maps path column is ``raw``
    (empty: anonymous), or -1 when it holds no pages numa_maps counts; decided by the
    reference parser and :func:`model.sampling.sampleable` on a stand-in line."""
    entry = parse_maps_line(b"0-1000 rw-p 00000000 00:00 0 " + raw)
    if entry is None or not sampleable(entry, hugetlbfs_mounts):
        return -1
    return _CODE[mapping_kind(entry, hugetlbfs_mounts)]


class CompiledFrame:
    """The strata of one VMA list as the extension builds them piece by piece (a maps text
    in pieces, PROCMAP_QUERY in batches), its counts and its known records."""

    def __init__(self) -> None:
        self.starts: dict[Kind, list[bytes]] = {}
        self.cumulative: dict[Kind, list[bytes]] = {}
        self.largest: dict[Kind, int] = {}
        self.order: list[Kind] = []
        self.totals = [0, 0, 0, 0]
        self.known: list[bytes] = []
        self.mappings = 0
        self.errors = 0

    def add(self, kinds: list[tuple[bytes, bytes, int] | None], first: list[int]) -> None:
        """Add one piece's ranges per kind code (``first``: codes in order of first range)."""
        for code in first:
            if KINDS[code] not in self.starts:
                self.order.append(KINDS[code])
        for code, got in enumerate(kinds):
            if got is None:
                continue
            kind = KINDS[code]
            starts, cum, largest = got
            if kind not in self.starts:
                self.starts[kind], self.cumulative[kind] = [], [cum[:8]]
            self.starts[kind].append(starts)
            self.cumulative[kind].append(cum[8:])
            self.largest[kind] = max(self.largest.get(kind, 0), largest)
            self.totals[code] = _u64(cum[-8:])[0]

    def bases(self) -> tuple[int, int, int, int]:
        """Return the pages counted so far per kind code (where the next piece goes on)."""
        t = self.totals
        return (t[0], t[1], t[2], t[3])

    def result(self, page_size: int) -> Parsed:
        """Return the strata in order of first appearance, the counts and known records."""
        strata = {kind: Stratum(kind, _u64(b"".join(self.starts[kind])),
                                _u64(b"".join(self.cumulative[kind])), page_size,
                                self.largest[kind] * page_size)
                  for kind in self.order}
        return Parsed(strata, self.errors, self.mappings, b"".join(self.known))


@dataclass(frozen=True, slots=True)
class Parsed:
    """A VMA list made strata: (strata in order of first appearance, malformed lines,
    mappings) and ``known``, its accessible mappings as packed records (start, end, device,
    inode, kind code; :data:`KNOWN_FIELDS` uint64 each, in address order): what a later
    :func:`query_frame` reuses instead of asking the kernel for their paths again."""

    strata: dict[Kind, Stratum]
    errors: int
    mappings: int
    known: bytes = b""


def mount_prefixes(hugetlbfs_mounts: tuple[str, ...]) -> tuple[bytes, ...]:
    """Return the path prefixes (``<mount>/``, as bytes) that put a mapping under one of
    ``hugetlbfs_mounts``, as ``pid_maps.mapping_kind`` tests them (empty mounts left out)."""
    return tuple((m.rstrip("/") + "/").encode("utf-8", "surrogateescape")
                 for m in hugetlbfs_mounts if m)


def parse_frame(chunks: Iterable[bytes], page_size: int, hugetlbfs_mounts: tuple[str, ...],
                deadline: Deadline = NEVER, keep_known: bool = False) -> Parsed:
    """Return the strata of a maps text given in chunks, as
    ``build_strata(parse_pid_maps(...).entries)`` gives them, with the counts and (where
    ``keep_known``) the known records. ``deadline`` is checked before each piece of
    :data:`PIECE` bytes is parsed (``Expired`` gives the parse up)."""
    assert _sampled_fast is not None
    fast = _sampled_fast
    mounts = mount_prefixes(hugetlbfs_mounts)  # at most MAX_MOUNTS (else ValueError)
    f = CompiledFrame()

    def feed(text: bytes | memoryview) -> None:
        deadline.check("maps parse")
        got = fast.maps_frame(text, page_size, mounts, max(MAX_ENTRIES - f.mappings, 0),
                              f.bases(), keep_known)
        f.mappings += got[0]
        f.errors += got[1]
        f.add(got[2], got[3])
        if keep_known:
            f.known.append(got[4])  # type: ignore[misc]

    rest = b""
    buf: list[bytes] = []
    size = 0
    for chunk in chunks:
        buf.append(chunk)
        size += len(chunk)
        if size >= PIECE:
            rest = _feed_pieces(rest + b"".join(buf), feed)
            buf, size = [], 0
    text = rest + b"".join(buf)
    if text:
        feed(text)
    return f.result(page_size)


#: VMAs one PROCMAP_QUERY batch asks for between two checks of the deadline.
QUERY_BATCH = 8192


def query_frame(fd: int, page_size: int, hugetlbfs_mounts: tuple[str, ...], known: bytes,
                deadline: Deadline = NEVER) -> tuple[Parsed, int]:
    """Return the strata of the VMA list of the maps descriptor ``fd`` read with
    PROCMAP_QUERY (Linux 6.11), and how many paths the kernel was asked for. A VMA found in
    ``known`` (same start, end, device and inode) keeps its kind; any other is asked for its
    path once and classified by the rules of :func:`parse_frame`, so both give the same
    strata for the same VMAs. Raises OSError as the ioctl fails (ENOTTY: no such ioctl);
    ``deadline`` is checked before each batch of :data:`QUERY_BATCH` VMAs."""
    assert _sampled_fast is not None
    mounts = mount_prefixes(hugetlbfs_mounts)
    f = CompiledFrame()
    addr, pos, names, done = 0, 0, 0, False
    while not done:
        deadline.check("maps query")
        n, kinds, first, addr, done_flag, got, pos, asked = _sampled_fast.query_frame(
            fd, addr, QUERY_BATCH, page_size, mounts, max(MAX_ENTRIES - f.mappings, 0),
            f.bases(), known, pos)
        done = bool(done_flag)
        f.mappings += n
        names += asked
        f.add(kinds, first)
        f.known.append(got)
    return f.result(page_size), names


def _feed_pieces(text: bytes, feed: Callable[[memoryview], None]) -> bytes:
    """Feed the whole lines of ``text`` in pieces of about :data:`PIECE` bytes (a longer
    line whole); return the rest after the last newline."""
    view = memoryview(text)
    start = 0
    while True:
        cut = text.rfind(b"\n", start, start + PIECE) + 1
        if cut <= start:  # no newline within a piece: up to the next one
            cut = text.find(b"\n", start + PIECE) + 1
        if cut <= start:
            return text[start:]
        feed(view[start:cut])
        start = cut


class CompiledSampler:
    """The compiled :class:`model.sampling.PageSampler` of one process: the random numbers
    are drawn in Python from the caller's generator (``random()``, as the reference draws
    them) and turned into sorted addresses in C; queries and tallies one batch per call,
    paced like ``MovePages.query``."""

    def __init__(self, move_pages: MovePages, pid: int) -> None:
        if move_pages.number is None:
            raise ValueError("the compiled sampler needs move_pages' system call number")
        assert _sampled_fast is not None
        self._fast = _sampled_fast
        self.mp = move_pages
        self.nr = move_pages.number
        self.pid = pid
        self.calls = 0  # move_pages system calls made

    def every_page(self, stratum: Stratum) -> Sequence[int]:
        """Return the address of every page of ``stratum``, in order."""
        return _u64(self._fast.pages(_buf(stratum.starts), _buf(stratum.cumulative),
                                     stratum.page_size))

    def draw(self, stratum: Stratum, n: int, rng: random.Random) -> Sequence[int]:
        """Return ``n`` sorted addresses, as ``model.sampling.draw_addresses`` draws them
        (the same ``rng.random()`` calls, in the same order)."""
        rand = rng.random
        fractions = array("d", [rand() for _ in range(n)])
        return _u64(self._fast.draw(fractions, _buf(stratum.starts),
                                    _buf(stratum.cumulative), stratum.page_size))

    def tally(self, addresses: Sequence[int], lo: int, hi: int, into: Tally) -> None:
        """Query ``addresses[lo:hi]`` with one move_pages call and count the statuses."""
        self.mp.pace()
        err, queried, resident, other, nodes = self._fast.query(
            self.nr, self.pid, _buf(addresses), lo, hi, MAX_NODE_ID)
        self.mp.called()
        self.calls += 1
        if err:
            raise classify_errno(err, f"move_pages({self.pid})")
        into.add_counts(queried, resident, other, nodes)


def _buf(values: Sequence[int]) -> array[int]:
    """Return ``values`` as an ``array('Q')`` (itself when it is one)."""
    if isinstance(values, array) and values.typecode == "Q":
        return values
    return array("Q", values)
