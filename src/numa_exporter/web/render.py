"""Rendering the exposition: ``name[]`` filtering and a cache of the snapshot families
rendered once per completed scan.

The snapshot-based families change only when a scan completes, so they are rendered once per
snapshot object and per body format (and gzip-compressed once, when asked for); a scrape then
adds only the few live self-metrics (``process_*``, ``python_*``). A gzip body is the cached
deflate blocks of the snapshot part followed by freshly compressed blocks of the live part,
in one gzip member (the CRC is carried over), so no scrape recompresses megabytes.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric as MetricLike
from prometheus_client.registry import Collector

from .negotiate import Body, Format, negotiate_format, wants_gzip

_EOF = b"# EOF\n"
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


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


def _render(body_kind: Body, families: Iterable[MetricLike]) -> bytes:
    body = body_kind.encode(_One(families))
    return body[:-len(_EOF)] if body.endswith(_EOF) else body


FamilyKey = tuple[object, ...]
# A family's rendering by everything the encoders write of it, from the last rendering of a
# body format: most families of a snapshot are those of the one before.
Memo = dict[FamilyKey, tuple[frozenset[str], bytes]]


def family_key(metric: MetricLike) -> FamilyKey | None:
    """Return a key equal for two families exactly when the encoders write them the same:
    names, type, help, unit, and each sample's name, labels in their order, value (a float
    by its bits: -0.0 is not 0.0) and timestamp; None for a family with exemplars, native
    histograms or timestamps that are not plain numbers (not remembered)."""
    samples: list[object] = []
    for s in metric.samples:
        if s.exemplar is not None or s.native_histogram is not None or not (
                s.timestamp is None or type(s.timestamp) in (int, float)):
            return None
        v = s.value
        samples.append((s.name, tuple(s.labels.items()),
                        v.hex() if type(v) is float else (type(v), v), s.timestamp))
    return (metric.name, metric.type, metric.documentation, metric.unit, tuple(samples))


@dataclass(frozen=True, slots=True)
class Rendered:
    """One format's rendering of a set of families (OpenMetrics without its ``# EOF``)."""

    parts: tuple[tuple[frozenset[str], bytes], ...]
    body: bytes

    @classmethod
    def of(cls, body_kind: Body, families: Iterable[MetricLike], memo: Memo | None = None,
           remember: Memo | None = None) -> Rendered:
        """Return the families rendered one by one (for filtering) and joined.

        A family found in ``memo`` (by :func:`family_key`) is taken from there instead of
        rendered; with ``remember``, every family rendered or taken is put in it.
        """
        parts: list[tuple[frozenset[str], bytes]] = []
        for f in families:
            key = family_key(f) if remember is not None or memo else None
            part = memo.get(key) if memo and key is not None else None
            if part is None:
                part = (family_names(f), _render(body_kind, [f]))
            if remember is not None and key is not None:
                remember[key] = part
            parts.append(part)
        return cls(tuple(parts), b"".join(p for _, p in parts))

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
    """Renders the cached collector once per key (the snapshot object) and body format.

    There are at most four renderings per snapshot: the text and the OpenMetrics body, each
    plain and deflated, whatever clients put in their headers (see ``negotiate``).
    Thread-safe; one rendering at a time, and callers asking for a format being rendered
    wait for that rendering instead of starting another. The previous snapshot's renderings
    are kept until the new ones exist, for scrapes that must not wait (``peek``); a
    rendering older than the snapshot just before the current one is never served.

    A new snapshot is rendered ahead of the next scrape (``stale``) only while scrapes keep
    pace with scans: when the snapshot it replaces was served to a scrape. Where scans
    outpace scrapes (``--scan.interval=1s`` scraped every 15 s), the snapshots nobody reads
    are not rendered; the next scrape renders the current one and waits for it.
    """

    def __init__(self, collector: Collector, key: Callable[[], object]) -> None:
        self.collector = collector
        self.key = key
        self._lock = threading.Lock()  # guards the dictionaries
        self._render_lock = threading.RLock()
        self._key: object = _Unset  # the snapshot _cur renders
        self._prev_key: object = _Unset  # the snapshot _prev renders
        self._cur: dict[tuple[Body, bool], Cached] = {}
        self._prev: dict[tuple[Body, bool], Cached] = {}
        self._latest: object = _Unset  # the newest snapshot seen, and the one before it
        self._before: object = _Unset
        self._served: object = _Unset  # the snapshot of the last rendering a scrape got
        self._asked: set[tuple[Body, bool]] = set()  # formats asked for: at most four
        self._memo: dict[Body, Memo] = {}  # the last rendering's families, per format
        self.renders = 0  # how many times the families were rendered (for tests/bench)

    def _roll(self, key: object) -> None:
        """Make ``key`` current (caller holds the lock)."""
        self._observe(key)
        if key is not self._key:
            if self._cur:
                self._prev, self._prev_key = self._cur, self._key
            self._key, self._cur = key, {}

    def _observe(self, now: object) -> object:
        """Note ``now`` as the newest snapshot (the one seen before it becomes ``_before``);
        return it. The server calls ``stale`` on every publication, so ``_before`` is the
        snapshot ``now`` replaced (caller holds the lock)."""
        if now is not self._latest:
            self._before, self._latest = self._latest, now
        return now

    def peek(self, body: Body, compressed: bool) -> Cached | None:
        """Return the current snapshot's rendering of this format, else the one of the
        snapshot just before it (while the current one renders), else None; never renders.
        A rendering it returns counts as served."""
        fmt = (body, compressed)
        with self._lock:
            now = self._observe(self.key())
            for key, done in ((self._key, self._cur), (self._prev_key, self._prev)):
                hit = done.get(fmt)
                if hit is not None and key is not _Unset and (key is now or key is self._before):
                    self._served = key
                    return hit
            return None

    def ready(self, body: Body, compressed: bool) -> bool:
        """Return whether this format of the current snapshot is rendered."""
        with self._lock:
            return self.key() is self._key and (body, compressed) in self._cur

    def stale(self) -> bool:
        """Return whether a newer snapshot exists than the one last rendered and is worth
        rendering ahead of the next scrape: a format was asked for, and the snapshot it
        replaced was served to a scrape (scrapes keep pace with scans)."""
        with self._lock:
            now = self._observe(self.key())
            return (bool(self._asked) and now is not self._key
                    and self._served is not _Unset and self._served is self._before)

    def get(self, body: Body, compressed: bool, served: bool = True) -> Cached:
        """Return the current snapshot in this format (deflated when ``compressed``),
        rendering it when needed; ``served``: for a scrape (not a rendering ahead)."""
        fmt = (body, compressed)
        with self._lock:
            self._roll(self.key())
            hit = self._cur.get(fmt)
            if hit is not None:
                if served:
                    self._served = self._key
                return hit
        with self._render_lock:
            key = self.key()
            with self._lock:
                self._roll(key)
                hit = self._cur.get(fmt)
                if hit is not None:
                    if served:
                        self._served = key
                    return hit
            value: Cached
            if compressed:
                r = self.get(body, False, served)
                assert isinstance(r, Rendered)
                value = Deflated.of(r.body)
            else:
                remember: Memo = {}
                value = Rendered.of(body, self.collector.collect(), self._memo.get(body),
                                    remember)
                self._memo[body] = remember  # only the last rendering's: bounded
                self.renders += 1
            with self._lock:
                if key is self._key:
                    self._cur[fmt] = value
                self._asked.add(fmt)
                if served:
                    self._served = key
            return value

    def rendered(self, body: Body) -> Rendered:
        """Return the current snapshot's families in this format."""
        r = self.get(body, False)
        assert isinstance(r, Rendered)
        return r

    def deflated(self, body: Body) -> Deflated:
        """Return the current snapshot's whole body in this format, deflated."""
        d = self.get(body, True)
        assert isinstance(d, Deflated)
        return d

    def sizes(self) -> dict[tuple[str, str], int]:
        """Return (format, encoding) -> bytes of the newest rendering of each format asked
        for (this snapshot's, else the previous one's)."""
        with self._lock:
            both = {**self._prev, **self._cur}
        return {(body.value, "gzip" if gz else "identity"):
                len(v.blocks) if isinstance(v, Deflated)
                else len(v.body)
                for (body, gz), v in both.items()}

    def refresh(self) -> None:
        """Render the current snapshot in every format asked for before, so scrapes after a
        scan find them ready."""
        with self._lock:
            formats = sorted(self._asked, key=lambda f: (f[0].value, f[1]))
        for body, compressed in formats:
            self.get(body, compressed, served=False)


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


@dataclass(frozen=True, slots=True)
class Ask:
    """What one scrape asks for, negotiated: the format, gzip or not, and the ``name[]``
    selection (None: every family)."""

    format: Format
    gzip: bool
    names: frozenset[str] | None = None

    @classmethod
    def of(cls, accept: str, accept_encoding: str, names: frozenset[str] | None) -> Ask:
        """Return what the headers and the selection ask for."""
        return cls(negotiate_format(accept), wants_gzip(accept_encoding), names)

    @property
    def cached(self) -> bool:
        """Return whether the answer is made of cached renderings (plus the few live
        families): False only for a ``name[]`` selection to compress, which is compressed
        for this scrape alone."""
        return not (self.gzip and self.names is not None)


def expose(cache: SnapshotCache, live: Collector | None, ask: Ask,
           wait: bool = True) -> Exposition | None:
    """Return the exposition: the cached snapshot families plus the live ones, as asked.

    With ``wait`` the current snapshot is used, rendered if needed; without it whatever is
    already rendered (this snapshot's or the previous one's) is used, and None returned
    when nothing is, or when the answer is not ``ask.cached`` (it costs a compression).
    """
    body_kind = ask.format.body
    whole_gz = ask.names is None and ask.gzip
    cached: Cached | None
    if wait:
        cached = cache.get(body_kind, whole_gz)
    elif not ask.cached:
        return None
    else:
        cached = cache.peek(body_kind, whole_gz)
        if cached is None:
            return None
    ctype = ask.format.content_type
    live_fams = list(live.collect()) if live is not None else []
    live_body = Rendered.of(body_kind, live_fams).select(ask.names)
    tail = live_body + (_EOF if ask.format.openmetrics else b"")
    if isinstance(cached, Deflated):
        return Exposition(gzip_join(cached, tail), ctype, True)
    body = cached.select(ask.names)
    if ask.gzip:
        return Exposition((gzip_whole(body + tail),), ctype, True)
    return Exposition((body, tail), ctype, False)
