"""Parser for ``/proc/<pid>/numa_maps`` (``show_numa_map`` in mm/mempolicy.c).

One line per mapping::

    7fc6258f4000 bind:1 anon=65538 dirty=65538 active=0 N1=65538 kernelpagesize_kB=4
    7f4a06200000 bind:1 file=/anon_hugepage\\040(deleted) huge anon=32 dirty=32 N1=32 \
        kernelpagesize_kB=2048
    7f00 weighted interleave:0-1 file=/dev/shm/pool mapped=4 N0=2 N1=2 kernelpagesize_kB=4

Bytes on a node are ``N<node> x kernelpagesize_kB x 1024``: hugetlb lines count huge pages, THP
inside an ordinary mapping is counted in base pages. The total of a line is the sum of its
``N<node>`` fields (``mapped=``/``active=`` are often omitted).

Pages the kernel maps into every process are not the process's memory and are left out of
the totals: a line with no ``file=``, no ``heap``/``stack``/``huge`` flag and no ``anon=``
count holds no anonymous page, so its pages belong to a kernel special mapping (7.x's vDSO
data page in ``[vvar]``, ``mapped=1 mapmax=<processes>`` on the node it was allocated on;
uprobes' XOL page). The sampled reader leaves the same mappings out by their ``maps`` name.

The grammar lives in one place, :func:`parse_numa_maps_line` (the reference parser, which
builds a full :class:`Mapping`). :func:`parse_numa_maps` totals a whole file given as an
iterable of byte chunks (lines or arbitrary pieces of the text), consumed lazily; it uses the
compiled scanner ``_numa_maps_fast`` when the package was built with a C compiler and the
pure-Python scanner otherwise: whole batches of lines as the kernel prints them are matched by
regular expressions (each distinct line text once), and a batch holding any other line goes
line by line through the reference parser, which names the malformed lines. Property tests
hold both scanners, and the batch path, to the reference parser. Every line is bounded work:
node ids are below the kernel's MAX_NUMNODES, page counts at most 2**40, page sizes at most
16 GiB, policies at most 63 bytes (the size of the kernel's buffer) and lines at most
:data:`MAX_LINE` bytes; anything else is a counted line error, never an exception.
"""

from __future__ import annotations

import collections.abc
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, TypeVar

from numa_exporter.parsers.cpulist import MAX_NODE_ID, parse_cpulist

try:  # the compiled scanner is optional: `pip install .` without a compiler skips it
    from numa_exporter.parsers import _numa_maps_fast
except ImportError:  # pragma: no cover - depends on the build
    _numa_maps_fast = None  # type: ignore[assignment]

COMPILED = _numa_maps_fast is not None
K = TypeVar("K")


class Kind(StrEnum):
    """What backs a mapping's pages."""

    ANON = "anon"
    FILE = "file"
    SHMEM = "shmem"
    HUGETLB = "hugetlb"


# Policy names as mpol_to_str() prints them, mapped to label values.
POLICIES: dict[str, str] = {
    "default": "default",
    "local": "local",
    "prefer": "prefer",
    "bind": "bind",
    "interleave": "interleave",
    "weighted interleave": "weighted_interleave",
    "prefer (many)": "prefer_many",
}
_POLICIES_B = {k.encode(): v for k, v in POLICIES.items()}
_MULTIWORD = (b"weighted interleave", b"prefer (many)")
_FLAGS = frozenset({b"static", b"relative", b"balancing"})
STRICT_POLICIES = frozenset({"bind", "interleave", "weighted_interleave", "prefer_many"})

# Paths whose mappings are shared memory rather than ordinary files. Matched on the path as
# the kernel prints it (seq_path escapes only "\n\t= ", never these prefixes).
SHMEM_PREFIXES = ("/dev/shm/", "/run/shm/", "/SYSV", "/memfd:", "/dev/zero", "/i915")
_SHMEM_PREFIXES_B = tuple(p.encode() for p in SHMEM_PREFIXES)

MAX_NUMNODES = MAX_NODE_ID + 1  # node ids are 0..1023 (CONFIG_NODES_SHIFT at most 10)
MAX_PAGES = 1 << 40  # pages of one node in one mapping: 4 PiB of 4 KiB pages
MAX_PAGE_KB = 1 << 24  # 16 GiB, the largest huge page any architecture has
MAX_POLICY = 63  # show_numa_map() formats the policy into a 64-byte buffer
MAX_VALUE_DIGITS = 20  # any field value: an unsigned long
MAX_LINE = 1 << 20  # far above the longest line the kernel writes (~40 KiB)
MAX_KEPT_ERRORS = 5
_BATCH = 256 << 10  # text handed to the line scanner at once
_HEX = b"0123456789abcdef"
_OCTAL = re.compile(rb"\\([0-7]{3})")
_COUNTER_KEY = re.compile(rb"[a-z][a-z0-9_]*")
_NODELIST = re.compile(rb"[0-9]{1,4}(?:-[0-9]{1,4})?(?:,[0-9]{1,4}(?:-[0-9]{1,4})?)*")
_KIND_OF = (Kind.ANON, Kind.FILE, Kind.SHMEM, Kind.HUGETLB)  # index = compiled kind code


@dataclass(frozen=True, slots=True)
class Policy:
    """A mapping's memory policy: label name, mode flags and node list (empty: none given)."""

    name: str
    flags: frozenset[str] = frozenset()
    nodes: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Mapping:
    """One parsed numa_maps line."""

    address: int
    policy: Policy
    kind: Kind
    path: str | None
    heap: bool
    stack: bool
    pages_by_node: tuple[tuple[int, int], ...]
    page_size: int  # bytes; 0 when the line has no kernelpagesize_kB
    counters: tuple[tuple[str, int], ...]  # anon=, dirty=, mapped=, ... as printed
    #: its pages are kernel pages mapped into the process (see the module's docstring):
    #: left out of the totals
    kernel: bool = False

    @property
    def bytes_by_node(self) -> dict[int, int]:
        """Return resident bytes per node, as the line prints them."""
        return {n: p * self.page_size for n, p in self.pages_by_node}

    @property
    def counted_bytes_by_node(self) -> dict[int, int]:
        """Return the bytes per node the totals count: none for kernel pages."""
        return {} if self.kernel else self.bytes_by_node


@dataclass(frozen=True, slots=True)
class ParseError:
    """A line the parser could not read: 1-based line number, reason and the line's start."""

    lineno: int
    reason: str
    text: str


class NumaMapsError(ValueError):
    """Raised by :func:`parse_numa_maps_line` for a malformed line."""


def _unescape(raw: bytes) -> str:
    return _OCTAL.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]), raw).decode(
        "utf-8", "surrogateescape"
    )


def _parse_nodelist(text: bytes) -> frozenset[int]:
    """Return the nodes of a list such as ``0-3,8``; raise NumaMapsError if malformed.

    The kernel list format is parsed by ``parsers/cpulist.py`` alone; here only digits,
    commas and dashes are let through (the kernel prints nothing else there).
    """
    nodes = parse_cpulist(text, MAX_NODE_ID) if _NODELIST.fullmatch(text) else None
    if not nodes:
        raise NumaMapsError(f"bad policy nodes {text[:40]!r}")
    return nodes


def parse_policy(raw: bytes) -> Policy:
    """Return the policy printed as ``raw`` (``bind=static:0-1``); raise NumaMapsError if bad."""
    if len(raw) > MAX_POLICY:
        raise NumaMapsError("policy longer than the kernel prints")
    head, colon, nodes_b = raw.partition(b":")
    base, eq, flags_b = head.partition(b"=")
    label = _POLICIES_B.get(base)
    if label is None:
        raise NumaMapsError(f"unknown policy {base[:40]!r}")
    flags: frozenset[str] = frozenset()
    if eq:
        parts = flags_b.split(b"|")
        if not all(p in _FLAGS for p in parts):
            raise NumaMapsError(f"unknown policy flags {flags_b[:40]!r}")
        flags = frozenset(p.decode() for p in parts)
    nodes = _parse_nodelist(nodes_b) if colon else frozenset()
    return Policy(label, flags, nodes)


def _kind(path: bytes | None, huge: bool) -> Kind:
    if huge:
        return Kind.HUGETLB
    if path is None:
        return Kind.ANON
    return Kind.SHMEM if path.startswith(_SHMEM_PREFIXES_B) else Kind.FILE


def classify(path: str | None, huge: bool) -> Kind:
    """Return the kind of memory a mapping with this ``file=`` path and ``huge`` flag holds."""
    return _kind(None if path is None else path.encode("utf-8", "surrogateescape"), huge)


def _split_policy(rest: bytes) -> tuple[bytes, bytes]:
    """Return (policy text, fields) of a line after its address."""
    for mw in _MULTIWORD:
        n = len(mw)
        if rest.startswith(mw) and (len(rest) == n or rest[n] in b":= "):
            end = rest.find(b" ", n)
            return (rest, b"") if end < 0 else (rest[:end], rest[end + 1 :])
    pol, _, fields = rest.partition(b" ")
    return pol, fields


class _Fields(NamedTuple):
    kind: Kind
    path: bytes | None
    heap: bool
    stack: bool
    page_kb: int  # 0: no kernelpagesize_kB field
    pages: dict[int, int]
    kernel: bool  # kernel pages mapped into the process: not counted


_KERNEL_COUNTERS = frozenset({b"anon", b"dirty", b"mapped", b"mapmax", b"swapcache",
                              b"active", b"writeback"})


def _parse_fields(fields: bytes, counters: list[tuple[str, int]] | None = None) -> _Fields:
    """Return the fields after the policy; raise NumaMapsError if one is malformed.

    ``counters`` (anon=, dirty=, ...) are appended to when given.
    """
    path: bytes | None = None
    heap = stack = huge = anon = False
    pages: dict[int, int] = {}
    page_kb = 0
    for tok in fields.split(b" "):
        if not tok:
            continue
        key, eq, val = tok.partition(b"=")
        if not eq:
            if tok == b"heap":
                heap = True
            elif tok == b"stack":
                stack = True
            elif tok == b"huge":
                huge = True
            else:
                raise NumaMapsError(f"bad field {tok[:40]!r}")
            continue
        if key == b"file":
            path = val
            continue
        if not (0 < len(val) <= MAX_VALUE_DIGITS and val.isdigit()):
            raise NumaMapsError(f"bad field {tok[:40]!r}")
        if key in _KERNEL_COUNTERS:
            anon = anon or key == b"anon"
            if counters is not None:
                counters.append((key.decode(), int(val)))
        elif key.startswith(b"N") and (node_b := key[1:]).isdigit():
            if len(node_b) > 4 or (node := int(node_b)) >= MAX_NUMNODES:
                raise NumaMapsError(f"node id out of range in {tok[:40]!r}")
            n = int(val)
            if n > MAX_PAGES:
                raise NumaMapsError(f"page count out of range in {tok[:40]!r}")
            pages[node] = pages.get(node, 0) + n
        elif key == b"kernelpagesize_kB":
            page_kb = int(val)
            if not 0 < page_kb <= MAX_PAGE_KB:
                raise NumaMapsError(f"page size out of range in {tok[:40]!r}")
        elif _COUNTER_KEY.fullmatch(key):  # a future lowercase field
            if counters is not None:
                counters.append((key.decode(), int(val)))
        else:
            raise NumaMapsError(f"bad field {tok[:40]!r}")
    if pages and not page_kb:
        raise NumaMapsError("node pages without kernelpagesize_kB")
    kernel = bool(pages) and path is None and not (heap or stack or huge or anon)
    return _Fields(_kind(path, huge), path, heap, stack, page_kb, pages, kernel)


def _address(text: bytes) -> int | None:
    """Return a lowercase hex address of 1-16 digits, else None."""
    if not (0 < len(text) <= 16) or text.translate(None, _HEX):
        return None
    return int(text, 16)


def parse_numa_maps_line(line: bytes) -> Mapping:
    """Return the mapping described by one numa_maps line; raise NumaMapsError if malformed.

    The reference grammar: the compiled and the pure-Python totals agree with it.
    """
    text = line.rstrip(b"\n")
    if len(text) > MAX_LINE:
        raise NumaMapsError("line too long")
    addr_b, sep, rest = text.partition(b" ")
    if not sep:
        raise NumaMapsError("no policy after address")
    address = _address(addr_b)
    if address is None:
        raise NumaMapsError("address is not hexadecimal")
    pol_b, fields_b = _split_policy(rest)
    policy = parse_policy(pol_b)
    counters: list[tuple[str, int]] = []
    f = _parse_fields(fields_b, counters)
    return Mapping(
        address=address,
        policy=policy,
        kind=f.kind,
        path=None if f.path is None else _unescape(f.path),
        heap=f.heap,
        stack=f.stack,
        pages_by_node=tuple(sorted(f.pages.items())),
        page_size=f.page_kb * 1024,
        counters=tuple(counters),
        kernel=f.kernel,
    )


@dataclass(frozen=True, slots=True)
class NumaMaps:
    """Totals of one numa_maps file.

    ``bytes`` maps (node, kind) to resident bytes; ``policy_bytes`` maps a policy label to
    bytes; ``policy_nodes`` maps (policy label, nodes) to bytes, for binding analysis;
    ``off_policy_bytes`` are bytes of ``bind`` mappings that sit on nodes their policy does
    not name (moved there by ``migratepages``, or by an ``mbind`` without MPOL_MF_MOVE);
    ``weighted_nodes`` maps (policy nodes, node) to the bytes of ``weighted interleave``
    mappings, for comparing their split with the node weights.
    """

    bytes: dict[tuple[int, Kind], int] = field(default_factory=dict)
    policy_bytes: dict[str, int] = field(default_factory=dict)
    policy_nodes: dict[tuple[str, frozenset[int]], int] = field(default_factory=dict)
    off_policy_bytes: int = 0
    weighted_nodes: dict[tuple[frozenset[int], int], int] = field(default_factory=dict)
    mappings: int = 0
    errors: tuple[ParseError, ...] = ()
    error_count: int = 0

    def node_bytes(self) -> dict[int, int]:
        """Return resident bytes per node, all kinds together."""
        return fold_nodes(self.bytes)


def fold_nodes(memory: collections.abc.Mapping[tuple[int, K], int]) -> dict[int, int]:
    """Return bytes per node of bytes per (node, kind), all kinds together (the one fold
    every placement result and sample uses)."""
    out: dict[int, int] = {}
    for (node, _), b in memory.items():
        out[node] = out.get(node, 0) + b
    return out


# --- totals -------------------------------------------------------------------------------
# Both scanners report into _Totals: pages per (raw policy, kind code, page kB, node), the raw
# policies of valid lines, counts and the positions of the first malformed lines.

_Entry = tuple[bytes, int, int, int, int]  # raw policy, kind code, page kB, node, pages


class _Totals:
    __slots__ = ("cache", "errors", "kinds", "mappings", "n_err", "pages", "policies",
                 "policy_ok")

    def __init__(self) -> None:
        self.pages: dict[tuple[bytes, int, int, int], int] = {}
        self.policies: set[bytes] = set()
        self.policy_ok: dict[bytes, Policy | None] = {}
        self.cache: dict[bytes, tuple[bytes, int, int, tuple[tuple[int, int], ...]] | None] = {}
        self.kinds: dict[bytes, int] = {}  # kind code of a " file=..."/" heap"/" stack"/"" text
        self.mappings = 0
        self.n_err = 0
        self.errors: list[ParseError] = []

    def check_policy(self, raw: bytes) -> bool:
        """Return whether ``raw`` is a valid policy (parsed once, kept for the result)."""
        if raw in self.policy_ok:
            return self.policy_ok[raw] is not None
        try:
            pol: Policy | None = parse_policy(raw)
        except NumaMapsError:
            pol = None
        if len(self.policy_ok) < 4096:
            self.policy_ok[raw] = pol
        return pol is not None

    def error(self, lineno: int, line: bytes, reason: str = "") -> None:
        self.n_err += 1
        if len(self.errors) < MAX_KEPT_ERRORS:
            if not reason:
                try:
                    parse_numa_maps_line(line)
                    reason = "malformed line"  # pragma: no cover - the scanners agree
                except NumaMapsError as exc:
                    reason = str(exc)
            self.errors.append(
                ParseError(lineno, reason, line[:80].decode("ascii", "backslashreplace"))
            )

    def add(self, entries: Iterable[_Entry], seen: Iterable[bytes]) -> None:
        pages = self.pages
        for pol, kind, kb, node, n in entries:
            key = (pol, kind, kb, node)
            pages[key] = pages.get(key, 0) + n
        self.policies.update(seen)

    def result(self) -> NumaMaps:
        by: dict[tuple[int, Kind], int] = {}
        pol_bytes: dict[str, int] = {}
        pol_nodes: dict[tuple[str, frozenset[int]], int] = {}
        policies: dict[bytes, Policy] = {}
        weighted: dict[tuple[frozenset[int], int], int] = {}
        off = 0
        for raw in self.policies:
            pol = self.policy_ok.get(raw) or parse_policy(raw)  # valid: it was checked
            policies[raw] = pol
            pol_bytes.setdefault(pol.name, 0)
            pol_nodes.setdefault((pol.name, pol.nodes), 0)
        for (raw, kind, kb, node), n in self.pages.items():
            b = n * kb * 1024
            key = (node, _KIND_OF[kind])
            by[key] = by.get(key, 0) + b
            pol = policies[raw]
            pol_bytes[pol.name] += b
            pol_nodes[(pol.name, pol.nodes)] += b
            if pol.name == "bind" and pol.nodes and node not in pol.nodes:
                off += b
            elif pol.name == "weighted_interleave" and b:
                wkey = (pol.nodes, node)
                weighted[wkey] = weighted.get(wkey, 0) + b
        return NumaMaps(bytes=by, policy_bytes=pol_bytes, policy_nodes=pol_nodes,
                        off_policy_bytes=off, weighted_nodes=weighted, mappings=self.mappings,
                        errors=tuple(self.errors),
                        error_count=self.n_err)


_KIND_CODE = {k: i for i, k in enumerate(_KIND_OF)}
_Line = tuple[bytes, int, int, tuple[tuple[int, int], ...]]


def _parse_rest(tot: _Totals, rest: bytes) -> _Line | None:
    """Return (raw policy, kind code, page kB, pages) of a line after its address, or None."""
    pol_b, fields_b = _split_policy(rest)
    if not tot.check_policy(pol_b):
        return None
    try:
        f = _parse_fields(fields_b)
    except NumaMapsError:
        return None
    return pol_b, _KIND_CODE[f.kind], f.page_kb, () if f.kernel else tuple(f.pages.items())


def _scan_lines(tot: _Totals, text: bytes, lineno: int) -> int:
    """Total the lines of ``text`` into ``tot`` one by one; return how many lines there were.

    The exact path: every malformed line is counted with its number and reason. Lines with
    the same text after the address (the common case: many mappings alike) are parsed once.
    """
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    cache = tot.cache
    counts: dict[bytes, int] = {}
    parsed: dict[bytes, _Line] = {}
    hexdigits = _HEX
    for i, line in enumerate(lines, lineno + 1):
        addr, sep, rest = line.partition(b" ")
        if sep and 0 < len(addr) <= 16 and not addr.translate(None, hexdigits):
            if len(line) <= MAX_LINE:
                n = counts.get(rest)
                if n is not None:
                    counts[rest] = n + 1
                    continue
                if rest in cache:
                    r = cache[rest]
                else:
                    r = _parse_rest(tot, rest)
                    if len(cache) < 4096:
                        cache[rest] = r
                if r is not None:
                    counts[rest] = 1
                    parsed[rest] = r
                    continue
        elif len(line) <= MAX_LINE and not line.strip():
            continue
        tot.error(i, line)
    entries: list[_Entry] = []
    seen: set[bytes] = set()
    for rest, n in counts.items():
        pol, kind, kb, pages = parsed[rest]
        seen.add(pol)
        entries.extend((pol, kind, kb, node, p * n) for node, p in pages)
        tot.mappings += n
    tot.add(entries, seen)
    return len(lines)


# The batch path: lines exactly as show_numa_map() prints them, matched by the regular
# expressions below a whole batch at a time. Every text they match is a text the reference
# grammar accepts with the same totals (a property test holds them to it); anything else
# sends the batch to _scan_lines. The bounds of the grammar are written into them: node ids
# below MAX_NUMNODES (1-4 digits), at most 12 digits of pages (below MAX_PAGES), values of at
# most 20 digits; the policy and the page size are checked once per distinct value. Atomic
# groups and possessive repeats keep the matching linear in the text.
_ADDRESS_LINE = re.compile(rb"^[0-9a-f]{1,16} ([^\n]*+)", re.MULTILINE)
_END = rb"(?= |$)"
_REST = re.compile(
    rb"^((?>weighted interleave(?:[:=][^ \n]*+)?|prefer \(many\)(?:[:=][^ \n]*+)?|[^ \n]++))"
    rb"((?> file=[^ \n]*+| heap" + _END + rb"| stack" + _END + rb")?+)"
    rb"((?> huge" + _END + rb")?+)"
    rb"(?> (?!file=)[a-z][a-z0-9_]*+=[0-9]{1,20}+" + _END + rb")*+"
    rb"(?>((?> N(?:0?[0-9]{1,3}|10[01][0-9]|102[0-3])=[0-9]{1,12}+" + _END + rb")*+)"
    rb" kernelpagesize_kB=([0-9]{1,20}+))?+$",
    re.MULTILINE,
)
_NODE_FIELD = re.compile(rb" N([0-9]+)=([0-9]+)")
_FILE = b" file="
_ANON = b" anon="
_HUGETLB = _KIND_OF.index(Kind.HUGETLB)


def _scan_batch(tot: _Totals, text: bytes, start: int, stop: int) -> int | None:
    """Total the lines of ``text[start:stop]`` (at most MAX_LINE bytes, starting a line) into
    ``tot`` a batch at a time; return the line count, or None (``tot`` untouched but for its
    caches) when any line is not as the kernel prints it."""
    n_lines = text.count(b"\n", start, stop)
    if stop > start and text[stop - 1] != 0x0A:
        n_lines += 1
    rests = _ADDRESS_LINE.findall(text, start, stop)
    if len(rests) != n_lines:  # a bad address, a blank line: the exact path says which
        return None
    counts = Counter(rests)
    fields = _REST.findall(b"\n".join(counts))
    if len(fields) != len(counts):
        return None
    # per (policy, kind, page size): the node fields of lines seen up to 4 times (repeated
    # and joined, parsed in one go) and those of lines seen more often, with their counts
    groups: dict[tuple[bytes, int, bytes], tuple[list[bytes], list[tuple[bytes, int]]]] = {}
    kinds = tot.kinds
    for rest, (pol, where, huge, nodes, kb), n in zip(counts, fields, counts.values(),
                                                      strict=True):
        if not (huge or where) and nodes and _ANON not in rest:
            nodes = b""  # kernel pages mapped into the process: not counted
        if huge:
            kind = _HUGETLB
        elif (kind := kinds.get(where, -1)) < 0:
            kind = _KIND_CODE[_kind(where[len(_FILE):] if where.startswith(_FILE) else None,
                                    False)]
            if len(kinds) < 4096:
                kinds[where] = kind
        key = (pol, kind, kb)
        group = groups.get(key)
        if group is None:
            group = groups[key] = ([], [])
        if n <= 4:
            group[0].extend((nodes,) * n)
        else:
            group[1].append((nodes, n))
    entries: list[_Entry] = []
    seen: set[bytes] = set()
    for (pol, kind, kb_b), (once, more) in groups.items():
        page_kb = int(kb_b) if kb_b else 0
        if not tot.check_policy(pol) or (kb_b and not 0 < page_kb <= MAX_PAGE_KB):
            return None
        seen.add(pol)
        pages: dict[bytes, int] = {}
        for node, p in _NODE_FIELD.findall(b"".join(once)):
            pages[node] = pages.get(node, 0) + int(p)
        for nodes, n in more:
            for node, p in _NODE_FIELD.findall(nodes):
                pages[node] = pages.get(node, 0) + int(p) * n
        entries.extend((pol, kind, page_kb, int(node), p) for node, p in pages.items())
    tot.mappings += n_lines
    tot.add(entries, seen)
    return n_lines


def _scan_python(tot: _Totals, text: bytes, end: int, lineno: int) -> int:
    """Total the lines of ``text[:end]`` into ``tot``; return how many lines there were.

    Pieces of at most MAX_LINE bytes go through the batch path, and through the exact
    line-by-line path when it declines them (or when a line is longer than that).
    """
    n = 0
    start = 0
    while start < end:
        stop = end
        if end - start > MAX_LINE:
            cut = text.rfind(b"\n", start, start + MAX_LINE) + 1
            # no newline within MAX_LINE: one line longer than that, which the exact path counts
            stop = cut if cut > start else text.find(b"\n", start + MAX_LINE, end) + 1 or end
        got = _scan_batch(tot, text, start, stop) if stop - start <= MAX_LINE else None
        if got is None:
            got = _scan_lines(tot, text[start:stop], lineno + n)
        n += got
        start = stop
    return n


def _scan_compiled(tot: _Totals, text: bytes, end: int, lineno: int) -> int:
    """Total the lines of ``text[:end]`` with the compiled scanner; return the line count."""
    assert _numa_maps_fast is not None
    n_lines, n_map, n_err, errs, entries, seen = _numa_maps_fast.scan(
        text, end, lineno, tot.check_policy
    )
    tot.mappings += n_map
    tot.n_err += n_err - len(errs)
    for ln, start, stop in errs:
        tot.error(ln, text[start:stop])
    tot.add(entries, seen)
    return n_lines


_Scanner = Callable[[_Totals, bytes, int, int], int]


def parse_numa_maps(chunks: Iterable[bytes], *, compiled: bool | None = None) -> NumaMaps:
    """Return the totals of a numa_maps text given as byte chunks; malformed lines are counted.

    ``chunks`` may be lines or any pieces of the text; they are consumed one at a time (at
    most about 256 KiB plus one line is held). ``compiled`` picks the scanner: None uses the
    compiled one where it was built (:data:`COMPILED`), False the pure-Python one, True the
    compiled one (only where COMPILED). Never raises for bad input; exceptions raised by the
    iterable (a read error, a deadline) pass through.
    """
    scan: _Scanner = _scan_compiled if (COMPILED if compiled is None else compiled) else (
        _scan_python)
    tot = _Totals()
    lineno = 0
    parts: list[bytes] = []
    size = 0
    skipping = False  # inside a line longer than MAX_LINE: drop bytes up to its newline
    for chunk in chunks:
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            skipping = False
            chunk = chunk[nl + 1 :]
        parts.append(chunk)
        size += len(chunk)
        if size < _BATCH:
            continue
        text = b"".join(parts)
        cut = text.rfind(b"\n") + 1
        if cut:
            lineno += scan(tot, text, cut, lineno)
        if len(text) - cut > MAX_LINE:
            lineno += 1
            tot.error(lineno, text[cut : cut + 80], "line too long")
            parts, size, skipping = [], 0, True
            continue
        parts = [text[cut:]]
        size = len(parts[0])
    if parts:
        text = b"".join(parts)
        scan(tot, text, len(text), lineno)
    return tot.result()
