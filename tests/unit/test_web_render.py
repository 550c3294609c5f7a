"""Negotiation, gzip splicing, name[] filtering and the once-per-snapshot render cache."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from numa_exporter.web.negotiate import Body
from numa_exporter.web.render import Ask, Deflated, Exposition, SnapshotCache, gzip_join
from numa_exporter.web.render import expose as _expose

OM = "application/openmetrics-text; version=1.0.0"


def expose(cache: SnapshotCache, live: Collector | None, accept: str, encoding: str,
           names: frozenset[str] | None, wait: bool = True) -> Exposition:
    """``render.expose`` from header values; asserts that it answered."""
    e = _expose(cache, live, Ask.of(accept, encoding, names), wait)
    assert e is not None
    return e


def peek(cache: SnapshotCache, accept: str, encoding: str,
         names: frozenset[str] | None) -> Exposition | None:
    """What a scrape that must not wait gets (None: nothing rendered to give it)."""
    return _expose(cache, None, Ask.of(accept, encoding, names), wait=False)


@pytest.mark.parametrize("head_text", [b"", b"a" * 10, bytes(range(256)) * 1000])
def test_spliced_gzip_is_one_valid_member(head_text: bytes) -> None:
    tail = b"tail\n" * 77
    data = b"".join(gzip_join(Deflated.of(head_text), tail))
    assert gzip.decompress(data) == head_text + tail
    d = zlib.decompressobj(31)  # a single-member decoder, as Go's and curl's are by default
    assert d.decompress(data) + d.flush() == head_text + tail
    assert d.eof and d.unused_data == b""


class Counting(Collector):
    """Yields one gauge per call whose value says how often collect ran."""

    def __init__(self, block: threading.Event | None = None) -> None:
        self.calls = 0
        self.block = block

    def collect(self) -> Iterator[Metric]:
        self.calls += 1
        if self.block is not None:
            self.block.wait(10)
        g = GaugeMetricFamily("snap_value", "from the snapshot", labels=["k"])
        g.add_metric(["a"], self.calls)
        yield g
        h = GaugeMetricFamily("snap_other", "another family")
        h.add_metric([], 7)
        yield h


def _live() -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("live_events", "live counter", registry=r).inc(3)
    Gauge("live_gauge", "live gauge", registry=r).set(5)
    return r


def test_rendered_once_per_snapshot_object() -> None:
    col = Counting()
    snap: list[object] = [object()]
    cache = SnapshotCache(col, lambda: snap[0])
    live = _live()
    bodies = {expose(cache, live, "", "", None).body for _ in range(5)}
    assert col.calls == 1 and len(bodies) == 1
    assert b'snap_value{k="a"} 1.0' in bodies.pop()
    expose(cache, live, "", "gzip", None)
    assert col.calls == 1, "gzip of the same snapshot reuses the rendering"
    snap[0] = object()
    assert b'snap_value{k="a"} 2.0' in expose(cache, live, "", "", None).body
    assert col.calls == 2


def test_new_snapshot_prerendered_in_the_formats_asked_for() -> None:
    col = Counting()
    snap: list[object] = [object()]
    cache = SnapshotCache(col, lambda: snap[0])
    expose(cache, None, OM, "gzip", None)
    assert not cache.stale() and cache.ready(Body.OPENMETRICS, True) and col.calls == 1
    snap[0] = object()
    assert cache.stale() and not cache.ready(Body.OPENMETRICS, True)
    cache.refresh()
    assert cache.ready(Body.OPENMETRICS, True)
    assert col.calls == 2 and not cache.stale()
    expose(cache, None, OM, "gzip", None)
    assert col.calls == 2, "the scrape after the scan found the rendering ready"


def test_scrapes_that_must_not_wait_get_the_previous_scan_until_the_new_one_is_rendered(
        ) -> None:
    col = Counting()
    snap: list[object] = [object()]
    cache = SnapshotCache(col, lambda: snap[0])
    assert peek(cache, "", "", None) is None, "nothing rendered yet"
    first = expose(cache, None, "", "", None)
    assert b'snap_value{k="a"} 1.0' in first.body
    snap[0] = object()
    stale = peek(cache, "", "", None)
    assert stale is not None and stale.body == first.body and col.calls == 1
    cache.refresh()
    fresh = peek(cache, "", "", None)
    assert fresh is not None and b'snap_value{k="a"} 2.0' in fresh.body and col.calls == 2
    assert peek(cache, "", "gzip", frozenset({"snap_value"})) is None


def test_snapshots_nobody_scrapes_are_not_rendered_ahead() -> None:
    """Scans at 1 s scraped every 15 s: rendering every snapshot ahead cost the idle daemon
    more CPU than its scans. Only the snapshot after a scraped one is rendered ahead; the
    next scrape renders the current one and gets it (never an older one)."""
    col = Counting()
    snap: list[object] = [object()]
    cache = SnapshotCache(col, lambda: snap[0])
    expose(cache, None, "", "", None)  # a scrape of snapshot 1
    renders = []
    for _scan in range(2, 8):  # six scans, no scrape: the server asks stale() on each publish
        snap[0] = object()
        if cache.stale():
            cache.refresh()
        renders.append(col.calls)
    assert renders == [2, 2, 2, 2, 2, 2], "only snapshot 2 (after a scraped one) rendered"
    got = expose(cache, None, "", "", None)  # the scrape renders snapshot 7 and waits for it
    assert b'snap_value{k="a"} 3.0' in got.body and col.calls == 3
    snap[0] = object()  # scrapes keep pace again: the next snapshot is rendered ahead
    assert cache.stale()
    cache.refresh()
    assert col.calls == 4 and cache.ready(Body.TEXT, False)


def test_a_rendering_two_scans_old_is_never_served() -> None:
    col = Counting()
    snap: list[object] = [object()]
    cache = SnapshotCache(col, lambda: snap[0])
    expose(cache, None, "", "", None)
    snap[0] = object()
    assert peek(cache, "", "", None) is not None, "one scan old, while the new one renders"
    snap[0] = object()
    assert peek(cache, "", "", None) is None, "two scans old: the scrape must render"


def test_each_format_rendered_once() -> None:
    col = Counting()
    key = object()
    cache = SnapshotCache(col, lambda: key)
    for _ in range(3):
        expose(cache, None, "", "", None)
        expose(cache, None, OM, "", None)
    assert col.calls == 2


def test_many_accept_headers_cost_one_rendering_per_body_format() -> None:
    """A client cannot make the server render more than it renders for Prometheus: 60
    distinct Accept headers (OpenMetrics 1.x versions, escapings, text versions, garbage)
    render the snapshot's families twice per snapshot -- text and OpenMetrics -- however
    they are mixed with gzip and name[] selections."""
    col = Counting()
    snap: list[object] = [object()]
    cache = SnapshotCache(col, lambda: snap[0])
    headers = [f"application/openmetrics-text; version=1.{i}.{i * 7}" for i in range(30)]
    headers += [f"application/openmetrics-text; version=1.0.0; escaping={e}"
                for e in ("underscores", "allow-utf-8", "dots", "values", "x")]
    headers += [f"text/plain; version={v}" for v in ("0.0.4", "1.0.0", "1.2.3", "0.0.1", "9")]
    headers += [f"application/openmetrics-text; version={v}; q=0.{i + 1}, text/plain"
                for i, v in enumerate(("2.0.0", "0.0.1", "1.0", "a.b", "1.0.0.0"))]
    headers += [f"x/y{i}, application/openmetrics-text;version=1.0.{i}" for i in range(15)]
    assert len(set(headers)) == 60
    for scan in (1, 2):
        for i, accept in enumerate(headers):
            names = frozenset({"snap_value"}) if i % 3 == 0 else None
            e = expose(cache, None, accept, "gzip" if i % 2 else "", names)
            assert e.body if not e.gzipped else gzip.decompress(e.body)
        assert col.calls == 2 * scan, "text and OpenMetrics, once each per snapshot"
        snap[0] = object()


def test_concurrent_scrapes_share_one_rendering() -> None:
    gate = threading.Event()
    col = Counting(block=gate)
    key = object()
    cache = SnapshotCache(col, lambda: key)
    out: list[bytes] = []
    threads = [threading.Thread(target=lambda: out.append(expose(cache, None, "", "", None).body))
               for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert len(out) == 8 and len(set(out)) == 1
    assert col.calls == 1


def test_live_families_are_fresh_each_scrape() -> None:
    key = object()
    cache = SnapshotCache(Counting(), lambda: key)
    live = CollectorRegistry()
    c = Counter("live_events", "live counter", registry=live)
    assert b"live_events_total 0.0" in expose(cache, live, "", "", None).body
    c.inc()
    assert b"live_events_total 1.0" in expose(cache, live, "", "", None).body
    gz = expose(cache, live, "", "gzip", None)
    assert gz.gzipped and b"live_events_total 1.0" in gzip.decompress(gz.body)


def test_openmetrics_has_one_eof_at_the_end() -> None:
    key = object()
    cache = SnapshotCache(Counting(), lambda: key)
    e = expose(cache, _live(), OM, "gzip", None)
    text = gzip.decompress(e.body).decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names == {"snap_value", "snap_other", "live_events", "live_gauge"}


def test_name_filter_selects_families_by_family_or_sample_name() -> None:
    key = object()
    cache = SnapshotCache(Counting(), lambda: key)
    body = expose(cache, _live(), "", "", frozenset({"snap_other", "live_events_total"})).body
    assert b"snap_other 7.0" in body and b"live_events_total 3.0" in body
    assert b"snap_value" not in body and b"live_gauge" not in body
    assert expose(cache, _live(), "", "", frozenset({"nothing"})).body == b""
    gz = expose(cache, _live(), "", "gzip", frozenset({"snap_value"}))
    assert gzip.decompress(gz.body).startswith(b"# HELP snap_value ")
