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
from typing import Any

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


class SnapshotCache:
    """Renders the cached collector once per key (the snapshot object) and format.

    Thread-safe: concurrent callers for the same key and format wait for one rendering.
    """

    def __init__(self, collector: Collector, key: Callable[[], object]) -> None:
        self.collector = collector
        self.key = key
        self._lock = threading.Lock()
        self._key: object = _Unset
        self._entries: dict[tuple[str, bool], _Entry] = {}
        self._encoders: dict[tuple[str, bool], Encoder] = {}  # what the last snapshot served
        self.renders = 0  # how many times the families were rendered (for tests/bench)

    def _entry(self, ctype: str, compressed: bool, encoder: Encoder) -> _Entry | None:
        key = self.key()
        with self._lock:
            if key is not self._key:
                self._key, self._entries = key, {}
            e = self._entries.get((ctype, compressed))
            if e is None:
                if len({c for c, _ in self._entries}) >= MAX_FORMATS and not any(
                        c == ctype for c, _ in self._entries):
                    return None
                e = self._entries[(ctype, compressed)] = _Entry()
                self._encoders[(ctype, compressed)] = encoder
                while len(self._encoders) > 2 * MAX_FORMATS:
                    del self._encoders[next(iter(self._encoders))]
            return e

    def ready(self, ctype: str, compressed: bool) -> bool:
        """Return whether this format of the current snapshot is rendered (a cheap scrape)."""
        key = self.key()
        with self._lock:
            e = self._entries.get((ctype, compressed)) if key is self._key else None
            return e is not None and e.value is not None

    def stale(self) -> bool:
        """Return whether a newer snapshot than the rendered one exists."""
        return self.key() is not self._key and bool(self._encoders)

    def refresh(self) -> None:
        """Render the new snapshot in the formats the previous one was asked for, so the
        first scrape after a scan finds them ready."""
        if not self.stale():
            return
        for (ctype, compressed), encoder in list(self._encoders.items()):
            if compressed:
                self.deflated(encoder, ctype)
            else:
                self.rendered(encoder, ctype)

    def rendered(self, encoder: Encoder, ctype: str) -> Rendered:
        """Return the snapshot families in this format, rendering them at most once."""
        e = self._entry(ctype, False, encoder)
        if e is None:
            return Rendered.of(encoder, self.collector.collect())
        with e.lock:
            if e.value is None:
                e.value = Rendered.of(encoder, self.collector.collect())
                self.renders += 1
            assert isinstance(e.value, Rendered)
            return e.value

    def deflated(self, encoder: Encoder, ctype: str) -> Deflated:
        """Return the whole snapshot body in this format, compressed at most once."""
        e = self._entry(ctype, True, encoder)
        if e is None:
            return Deflated.of(self.rendered(encoder, ctype).body)
        with e.lock:
            if e.value is None:
                e.value = Deflated.of(self.rendered(encoder, ctype).body)
            assert isinstance(e.value, Deflated)
            return e.value


class _UnsetType:
    pass


_Unset = _UnsetType()


class _Entry:
    __slots__ = ("lock", "value")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: Any = None


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
           names: frozenset[str] | None) -> Exposition:
    """Return the exposition: the cached snapshot families plus the live ones, negotiated."""
    encoder, ctype = negotiate_format(accept)
    live_fams = list(live.collect()) if live is not None else []
    live_body = Rendered.of(encoder, live_fams).select(names)
    tail = live_body + (_EOF if ctype.startswith("application/openmetrics-text") else b"")
    gz = wants_gzip(accept_encoding)
    if names is None and gz:
        return Exposition(gzip_join(cache.deflated(encoder, ctype), tail), ctype, True)
    body = cache.rendered(encoder, ctype).select(names)
    if gz:
        return Exposition((gzip_whole(body + tail),), ctype, True)
    return Exposition((body, tail), ctype, False)
