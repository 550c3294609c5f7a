"""Parser for ``/proc/<pid>/numa_maps`` (``show_numa_map`` in mm/mempolicy.c).

One line per mapping::

    7fc6258f4000 bind:1 anon=65538 dirty=65538 active=0 N1=65538 kernelpagesize_kB=4
    7f4a06200000 bind:1 file=/anon_hugepage\\040(deleted) huge anon=32 dirty=32 N1=32 \
        kernelpagesize_kB=2048
    7f00 weighted interleave:0-1 file=/dev/shm/pool mapped=4 N0=2 N1=2 kernelpagesize_kB=4

Bytes on a node are ``N<node> x kernelpagesize_kB x 1024``: hugetlb lines count huge pages, THP
inside an ordinary mapping is counted in base pages. The total of a line is the sum of its
``N<node>`` fields (``mapped=``/``active=`` are often omitted).

:func:`parse_numa_maps` consumes lines one at a time so the caller can stream the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from numa_exporter.parsers.cpulist import parse_cpulist


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
_MULTIWORD = ("weighted interleave", "prefer (many)")
STRICT_POLICIES = frozenset({"bind", "interleave", "weighted_interleave", "prefer_many"})

# Paths (after unescaping) whose mappings are shared memory rather than ordinary files.
SHMEM_PREFIXES = ("/dev/shm/", "/run/shm/", "/SYSV", "/memfd:", "/dev/zero", "/i915")
_OCTAL = re.compile(rb"\\([0-7]{3})")
_MAX_NODE = 1 << 12
_COUNTER_KEY = re.compile(r"[a-z][a-z0-9_]*")
_COUNTER_KEY_B = re.compile(rb"[a-z][a-z0-9_]*")


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
    page_size: int  # bytes; 0 when the line has no pages
    counters: tuple[tuple[str, int], ...]  # anon=, dirty=, mapped=, ... as printed

    @property
    def bytes_by_node(self) -> dict[int, int]:
        """Return resident bytes per node."""
        return {n: p * self.page_size for n, p in self.pages_by_node}

    @property
    def total_bytes(self) -> int:
        """Return the resident bytes of the mapping (sum over nodes)."""
        return sum(p for _, p in self.pages_by_node) * self.page_size


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


def _parse_policy(text: str) -> Policy:
    name, _, nodes_s = text.partition(":")
    base, _, flag_s = name.partition("=")
    label = POLICIES.get(base)
    if label is None:
        raise NumaMapsError(f"unknown policy {base!r}")
    flags = frozenset(f for f in flag_s.split("|") if f) if flag_s else frozenset()
    if not flags <= {"static", "relative", "balancing"}:
        raise NumaMapsError(f"unknown policy flags {flag_s!r}")
    nodes: frozenset[int] = frozenset()
    if nodes_s:
        parsed = parse_cpulist(nodes_s)
        if parsed is None:
            raise NumaMapsError(f"bad policy nodes {nodes_s!r}")
        nodes = parsed
    return Policy(label, flags, nodes)


def classify(path: str | None, huge: bool) -> Kind:
    """Return the kind of memory a mapping with this ``file=`` path and ``huge`` flag holds."""
    if huge:
        return Kind.HUGETLB
    if path is None:
        return Kind.ANON
    if path.startswith(SHMEM_PREFIXES):
        return Kind.SHMEM
    return Kind.FILE


def parse_numa_maps_line(line: bytes) -> Mapping:
    """Return the mapping described by one numa_maps line; raise NumaMapsError if malformed."""
    text = line.rstrip(b"\n")
    addr_b, sep, rest_b = text.partition(b" ")
    if not sep or not addr_b:
        raise NumaMapsError("no policy after address")
    try:
        address = int(addr_b, 16)
    except ValueError:
        raise NumaMapsError("address is not hexadecimal") from None
    try:
        rest = rest_b.decode("ascii")
    except UnicodeDecodeError:
        # Only file= paths may carry non-ASCII bytes; split on the raw bytes instead.
        rest = rest_b.decode("ascii", "surrogateescape")
    policy_text = None
    for mw in _MULTIWORD:
        if rest.startswith(mw) and (len(rest) == len(mw) or rest[len(mw)] in ":= "):
            end = rest.find(" ", len(mw))
            policy_text = rest if end < 0 else rest[:end]
            rest = "" if end < 0 else rest[end + 1 :]
            break
    if policy_text is None:
        policy_text, _, rest = rest.partition(" ")
    policy = _parse_policy(policy_text)

    path: str | None = None
    heap = stack = huge = False
    pages: dict[int, int] = {}
    counters: list[tuple[str, int]] = []
    page_kb: int | None = None
    for tok in rest.split(" "):
        if not tok:
            continue
        if tok.startswith("file="):
            raw = tok[5:].encode("ascii", "surrogateescape")
            path = _unescape(raw)
            continue
        if tok == "heap":
            heap = True
            continue
        if tok == "stack":
            stack = True
            continue
        if tok == "huge":
            huge = True
            continue
        key, eq, val = tok.partition("=")
        if not eq or not val.isascii() or not val.isdigit() or len(val) > 20:
            raise NumaMapsError(f"bad field {tok[:40]!r}")
        n = int(val)
        if key == "kernelpagesize_kB":
            page_kb = n
        elif key.startswith("N") and key[1:].isascii() and key[1:].isdigit():
            if len(key) > 6 or int(key[1:]) > _MAX_NODE:
                raise NumaMapsError(f"node id out of range in {tok[:40]!r}")
            node = int(key[1:])
            pages[node] = pages.get(node, 0) + n
        elif _COUNTER_KEY.fullmatch(key):  # anon=, dirty=, ... and future fields
            counters.append((key, n))
        else:
            raise NumaMapsError(f"bad field {tok[:40]!r}")
    if pages and page_kb is None:
        raise NumaMapsError("node pages without kernelpagesize_kB")
    if page_kb is not None and page_kb <= 0:
        raise NumaMapsError("kernelpagesize_kB is zero")
    return Mapping(
        address=address,
        policy=policy,
        kind=classify(path, huge),
        path=path,
        heap=heap,
        stack=stack,
        pages_by_node=tuple(sorted(pages.items())),
        page_size=(page_kb or 0) * 1024,
        counters=tuple(counters),
    )


@dataclass(frozen=True, slots=True)
class NumaMaps:
    """Totals of one numa_maps file.

    ``bytes`` maps (node, kind) to resident bytes; ``policy_bytes`` maps a policy label to
    bytes; ``policy_nodes`` maps (policy label, nodes) to bytes, for binding analysis.
    """

    bytes: dict[tuple[int, Kind], int] = field(default_factory=dict)
    policy_bytes: dict[str, int] = field(default_factory=dict)
    policy_nodes: dict[tuple[str, frozenset[int]], int] = field(default_factory=dict)
    policy_flags: frozenset[str] = frozenset()
    mappings: int = 0
    errors: tuple[ParseError, ...] = ()
    error_count: int = 0

    @property
    def total_bytes(self) -> int:
        """Return resident bytes over all nodes and kinds."""
        return sum(self.bytes.values())

    def node_bytes(self) -> dict[int, int]:
        """Return resident bytes per node, all kinds together."""
        out: dict[int, int] = {}
        for (node, _), b in self.bytes.items():
            out[node] = out.get(node, 0) + b
        return out

    def nodes(self) -> frozenset[int]:
        """Return the nodes holding any of the process's pages."""
        return frozenset(n for (n, _), b in self.bytes.items() if b)


MAX_KEPT_ERRORS = 5


_SHMEM_PREFIXES_B = tuple(p.encode() for p in SHMEM_PREFIXES)


def _kind_b(path: bytes | None, huge: bool) -> Kind:
    """Return :func:`classify` of a still-escaped path (escapes never touch the prefixes)."""
    if huge:
        return Kind.HUGETLB
    if path is None:
        return Kind.ANON
    return Kind.SHMEM if path.startswith(_SHMEM_PREFIXES_B) else Kind.FILE


def _policy_cached(cache: dict[bytes, Policy], raw: bytes) -> Policy:
    pol = cache.get(raw)
    if pol is None:
        pol = _parse_policy(raw.decode("ascii", "surrogateescape"))
        if len(cache) < 256:
            cache[raw] = pol
    return pol


# The kernel's own field order; a line that does not fit goes to the token parser below.
_LINE_RE = re.compile(
    rb"[0-9a-f]{1,16} (weighted interleave\S*|prefer \(many\)\S*|\S+)"
    rb"(?: file=(\S+)| heap| stack)?( huge)?(?: [a-z][a-z0-9_]*=\d{1,20})*"
    rb"((?: N\d{1,4}=\d{1,20})*) kernelpagesize_kB=([1-9]\d{0,19})"
)
_NODE_RE = re.compile(rb" N(\d+)=(\d+)")


def _regex_line(line: bytes, cache: dict[bytes, Policy]
                ) -> tuple[Policy, Kind, int, list[tuple[int, int]]] | None:
    """Return what :func:`_token_line` returns for a line in the kernel's order, else None."""
    m = _LINE_RE.fullmatch(line)
    if m is None:
        return None
    raw_pol, path, huge, nodes_b, kps = m.groups()
    pages = [(int(a), int(b)) for a, b in _NODE_RE.findall(nodes_b)]
    if any(n > _MAX_NODE for n, _ in pages):
        return None
    return _policy_cached(cache, raw_pol), _kind_b(path, bool(huge)), int(kps) * 1024, pages


def _token_line(line: bytes, cache: dict[bytes, Policy]
               ) -> tuple[Policy, Kind, int, list[tuple[int, int]]]:
    """Return (policy, kind, page size, [(node, pages)]) of a line; NumaMapsError if bad.

    Agrees with :func:`parse_numa_maps_line` (a property test holds them together) but does
    not build a Mapping or keep counters.
    """
    parts = line.split(b" ")
    if len(parts) < 2 or not parts[0]:
        raise NumaMapsError("no policy after address")
    try:
        int(parts[0], 16)
    except ValueError:
        raise NumaMapsError("address is not hexadecimal") from None
    i = 2
    raw_pol = parts[1]
    if raw_pol in (b"weighted", b"prefer") and len(parts) > 2 and (
        (raw_pol == b"weighted" and parts[2].startswith(b"interleave"))
        or (raw_pol == b"prefer" and parts[2].startswith(b"(many)"))
    ):
        raw_pol = raw_pol + b" " + parts[2]
        i = 3
    policy = _policy_cached(cache, raw_pol)
    huge = False
    path: bytes | None = None
    page_kb = -1
    pages: list[tuple[int, int]] = []
    for tok in parts[i:]:
        if not tok:
            continue
        if tok.startswith(b"file="):
            path = tok[5:]
            continue
        if tok == b"huge":
            huge = True
            continue
        if tok == b"heap" or tok == b"stack":
            continue
        key, eq, val = tok.partition(b"=")
        if not eq or not val.isdigit() or len(val) > 20:
            raise NumaMapsError(f"bad field {tok[:40]!r}")
        if key[:1] == b"N" and key[1:].isdigit():
            if len(key) > 6 or int(key[1:]) > _MAX_NODE:
                raise NumaMapsError(f"node id out of range in {tok[:40]!r}")
            pages.append((int(key[1:]), int(val)))
        elif key == b"kernelpagesize_kB":
            page_kb = int(val)
        elif not _COUNTER_KEY_B.fullmatch(key):
            raise NumaMapsError(f"bad field {tok[:40]!r}")
    if pages and page_kb < 0:
        raise NumaMapsError("node pages without kernelpagesize_kB")
    if page_kb == 0:
        raise NumaMapsError("kernelpagesize_kB is zero")
    return policy, _kind_b(path, huge), max(page_kb, 0) * 1024, pages


def parse_numa_maps(lines: Iterable[bytes]) -> NumaMaps:
    """Return the totals of a numa_maps text given line by line; malformed lines are counted."""
    by: dict[tuple[int, Kind], int] = {}
    pol: dict[str, int] = {}
    pol_nodes: dict[tuple[str, frozenset[int]], int] = {}
    flags: set[str] = set()
    errors: list[ParseError] = []
    cache: dict[bytes, Policy] = {}
    n_err = 0
    n_map = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip(b"\n")
        if not line.strip():
            continue
        try:
            hit = _regex_line(line, cache)
            policy, kind, page_size, pages = hit or _token_line(line, cache)
        except NumaMapsError as exc:
            n_err += 1
            if len(errors) < MAX_KEPT_ERRORS:
                errors.append(
                    ParseError(lineno, str(exc), line[:80].decode("ascii", "backslashreplace"))
                )
            continue
        n_map += 1
        if policy.flags:
            flags.update(policy.flags)
        total = 0
        for node, n in pages:
            b = n * page_size
            key = (node, kind)
            by[key] = by.get(key, 0) + b
            total += b
        pol[policy.name] = pol.get(policy.name, 0) + total
        pk = (policy.name, policy.nodes)
        pol_nodes[pk] = pol_nodes.get(pk, 0) + total
    return NumaMaps(
        bytes=by,
        policy_bytes=pol,
        policy_nodes=pol_nodes,
        policy_flags=frozenset(flags),
        mappings=n_map,
        errors=tuple(errors),
        error_count=n_err,
    )
