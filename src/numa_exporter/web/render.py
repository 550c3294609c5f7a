"""Rendering the exposition: format and encoding negotiation, ``name[]`` filtering, and a
cache of the snapshot families rendered once per completed scan.

The snapshot-based families change only when a scan completes, so they are rendered once per
snapshot object and per format (and gzip-compressed once, when asked for); a scrape then
adds only the few live self-metrics (``process_*``, ``python_*``). A gzip body is the cached
deflate blocks of the snapshot part followed by freshly compressed blocks of the live part,
in one gzip member (the CRC is carried over), so no scrape recompresses megabytes.
"""

from __future__ import annotations

import re
import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric as MetricLike
from prometheus_client.registry import Collector

Encoder = Callable[[Collector], bytes]
_EOF = b"# EOF\n"
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_CTYPE_OK = re.compile(r"[\x20-\x7e]{1,200}", re.ASCII)
MAX_FORMATS = 4  # cached formats per snapshot; others are rendered uncached


def negotiate_format(accept: str) -> tuple[Encoder, str]:
    """Return (encoder, content type) for an Accept header (text 0.0.4 unless OpenMetrics)."""
    try:
        encoder, ctype = choose_encoder(accept[:1024])
    except Exception:  # a malformed version or escaping in a hostile header
        encoder, ctype = choose_encoder("")
    if not _CTYPE_OK.fullmatch(ctype):
        encoder, ctype = choose_encoder("")
    return encoder, ctype


def wants_gzip(accept_encoding: str) -> bool:
    """Return whether an Accept-Encoding header accepts gzip (``gzip;q=0`` refuses it)."""
    gzip_q: float | None = None
    star_q: float | None = None
    for item in accept_encoding[:1024].split(","):
        coding, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for p in params:
            k, _, v = p.partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:
                    q = 0.0
        c = coding.lower()
        if c in ("gzip", "x-gzip"):
            gzip_q = q if gzip_q is None else max(gzip_q, q)
        elif c == "*":
            star_q = q
    if gzip_q is not None:
        return gzip_q > 0
    return star_q is not None and star_q > 0


class _One:
    """A collector that yields the given families (what the encoders take)."""

    def __init__(self, families: Iterable[MetricLike]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[MetricLike]:
        return self.families


def family_names(metric: MetricLike) -> frozenset[str]:
    """Return the names ``name[]`` may select a family by: its own and its samples'."""
    names = {metric.name}
    if metric.type == "counter":
        names.add(metric.name + "_total")
    names.update(s.name for s in metric.samples)
    return frozenset(names)


def _render(encoder: Encoder, families: Iterable[MetricLike]) -> bytes:
    body = encoder(_One(families))
    return body[:-len(_EOF)] if body.endswith(_EOF) else body


@dataclass(frozen=True, slots=True)
class Rendered:
    """One format's rendering of a set of families (OpenMetrics without its ``# EOF``)."""

    parts: tuple[tuple[frozenset[str], bytes], ...]
    body: bytes

    @classmethod
    def of(cls, encoder: Encoder, families: Iterable[MetricLike]) -> Rendered:
        """Return the families rendered one by one (for filtering) and joined."""
        parts = tuple((family_names(f), _render(encoder, [f])) for f in families)
        return cls(parts, b"".join(p for _, p in parts))

    def select(self, names: frozenset[str] | None) -> bytes:
        """Return the body, or only the families ``names`` selects."""
        if names is None:
            return self.body
        return b"".join(p for n, p in self.parts if n & names)


@dataclass(frozen=True, slots=True)
class Deflated:
    """Raw deflate blocks (sync-flushed, not final) of a body, with its CRC and length."""

    blocks: bytes
    crc: int
    size: int

    @classmethod
    def of(cls, body: bytes, level: int = 6) -> Deflated:
        """Return ``body`` compressed so more blocks may follow it."""
        c = zlib.compressobj(level, zlib.DEFLATED, -15)
        return cls(c.compress(body) + c.flush(zlib.Z_SYNC_FLUSH), zlib.crc32(body), len(body))


def gzip_join(head: Deflated, tail: bytes) -> tuple[bytes, ...]:
    """Return the pieces of one gzip member holding head's body followed by ``tail``.

    The cached deflate blocks are one of the pieces, not copied.
    """
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    rest = c.compress(tail) + c.flush(zlib.Z_FINISH)
    crc = zlib.crc32(tail, head.crc)
    size = (head.size + len(tail)) & 0xFFFFFFFF
    return (_GZIP_HEADER, head.blocks, rest + struct.pack("<II", crc, size))


def gzip_whole(body: bytes) -> bytes:
    """Return ``body`` as one gzip member."""
    return b"".join(gzip_join(Deflated(b"", 0, 0), body))


Cached = Rendered | Deflated


class SnapshotCache:
    """Renders the cached collector once per key (the snapshot object) and format.

    Thread-safe; one rendering at a time, and callers asking for a format being rendered
    wait for that rendering instead of starting another. The previous snapshot's renderings
    are kept until the new ones exist, for scrapes that must not wait (``peek``).
    """

    def __init__(self, collector: Collector, key: Callable[[], object]) -> None:
        self.collector = collector
        self.key = key
        self._lock = threading.Lock()  # guards the dictionaries
        self._render_lock = threading.RLock()
        self._key: object = _Unset
        self._cur: dict[tuple[str, bool], Cached] = {}
        self._prev: dict[tuple[str, bool], Cached] = {}
        self._encoders: dict[tuple[str, bool], Encoder] = {}  # formats asked for, bounded
        self.renders = 0  # how many times the families were rendered (for tests/bench)

    def _roll(self, key: object) -> None:
        """Make ``key`` current (caller holds the lock)."""
        if key is not self._key:
            if self._cur:
                self._prev = self._cur
            self._key, self._cur = key, {}

    def peek(self, ctype: str, compressed: bool) -> Cached | None:
        """Return the current rendering of this format, else the previous snapshot's, else
        None; never renders."""
        fmt = (ctype, compressed)
        with self._lock:  # _cur holds the newest renderings, whether or not a scan ended since
            return self._cur.get(fmt) or self._prev.get(fmt)

    def ready(self, ctype: str, compressed: bool) -> bool:
        """Return whether this format of the current snapshot is rendered."""
        with self._lock:
            return self.key() is self._key and (ctype, compressed) in self._cur

    def stale(self) -> bool:
        """Return whether a newer snapshot exists than the one last rendered."""
        return bool(self._encoders) and self.key() is not self._key

    def get(self, encoder: Encoder, ctype: str, compressed: bool) -> Cached:
        """Return the current snapshot in this format (deflated when ``compressed``),
        rendering it when needed."""
        fmt = (ctype, compressed)
        with self._lock:
            self._roll(self.key())
            hit = self._cur.get(fmt)
            if hit is not None:
                return hit
        with self._render_lock:
            key = self.key()
            with self._lock:
                self._roll(key)
                hit = self._cur.get(fmt)
                if hit is not None:
                    return hit
            value: Cached
            if compressed:
                r = self.get(encoder, ctype, False)
                assert isinstance(r, Rendered)
                value = Deflated.of(r.body)
            else:
                value = Rendered.of(encoder, self.collector.collect())
                self.renders += 1
            with self._lock:
                known = {c for c, _ in self._cur}
                if key is self._key and (ctype in known or len(known) < MAX_FORMATS):
                    self._cur[fmt] = value
                    self._encoders[fmt] = encoder
                    while len(self._encoders) > 2 * MAX_FORMATS:
                        del self._encoders[next(iter(self._encoders))]
            return value

    def rendered(self, encoder: Encoder, ctype: str) -> Rendered:
        """Return the current snapshot's families in this format."""
        r = self.get(encoder, ctype, False)
        assert isinstance(r, Rendered)
        return r

    def deflated(self, encoder: Encoder, ctype: str) -> Deflated:
        """Return the current snapshot's whole body in this format, deflated."""
        d = self.get(encoder, ctype, True)
        assert isinstance(d, Deflated)
        return d

    def refresh(self) -> None:
        """Render the current snapshot in every format asked for before, so scrapes after a
        scan find them ready."""
        with self._lock:
            formats = list(self._encoders.items())
        for (ctype, compressed), encoder in formats:
            self.get(encoder, ctype, compressed)


class _UnsetType:
    pass


_Unset = _UnsetType()


@dataclass(frozen=True, slots=True)
class Exposition:
    """A response body, in pieces that are written one after the other (the large cached
    piece is shared by every scrape of a snapshot, never copied), with its headers' values."""

    parts: tuple[bytes, ...]
    content_type: str
    gzipped: bool

    @property
    def body(self) -> bytes:
        """Return the whole body (a copy: for tests)."""
        return b"".join(self.parts)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)


def expose(cache: SnapshotCache, live: Collector | None, accept: str, accept_encoding: str,
           names: frozenset[str] | None, wait: bool = True) -> Exposition | None:
    """Return the exposition: the cached snapshot families plus the live ones, negotiated.

    With ``wait`` the current snapshot is used, rendered if needed; without it whatever is
    already rendered (this snapshot's or the previous one's) is used, and None returned
    when nothing is, or when the answer needs compressing a filtered body.
    """
    encoder, ctype = negotiate_format(accept)
    gz = wants_gzip(accept_encoding)
    whole_gz = names is None and gz
    cached: Cached | None
    if wait:
        cached = cache.get(encoder, ctype, whole_gz)
    elif gz and names is not None:
        return None
    else:
        cached = cache.peek(ctype, whole_gz)
        if cached is None:
            return None
    live_fams = list(live.collect()) if live is not None else []
    live_body = Rendered.of(encoder, live_fams).select(names)
    tail = live_body + (_EOF if ctype.startswith("application/openmetrics-text") else b"")
    if isinstance(cached, Deflated):
        return Exposition(gzip_join(cached, tail), ctype, True)
    body = cached.select(names)
    if gz:
        return Exposition((gzip_whole(body + tail),), ctype, True)
    return Exposition((body, tail), ctype, False)
