"""A snapshot's families are taken from the last rendering where nothing the encoders write
of them changed (issue 14: rendering cost per scan); the body is what a fresh rendering
gives, byte for byte."""

from __future__ import annotations

import math

import pytest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from numa_exporter.web import render
from numa_exporter.web.negotiate import Body
from numa_exporter.web.render import Memo, Rendered, family_key


def _gauge(name: str, rows: list[tuple[dict[str, str], float]], doc: str = "d") -> Metric:
    g = GaugeMetricFamily(name, doc)
    g.samples.extend(Sample(name, labels, v, None, None, None) for labels, v in rows)
    return g


def _sets() -> list[list[Metric]]:
    c = CounterMetricFamily("numa_x", "counts", labels=["node"])
    c.add_metric(["0"], 3)
    i = InfoMetricFamily("numa_build", "build", value={"version": "1"})
    return [
        [_gauge("numa_a", [({"n": "0"}, 1.0)]), c, i],
        [_gauge("numa_a", [({"n": "0"}, 1.0)]), c, i],  # the same again
        [_gauge("numa_a", [({"n": "0"}, 2.0)]), c, i],  # a value moved
        [_gauge("numa_a", [({"n": "0"}, -0.0)]), c, i],  # -0.0 is written as such
        [_gauge("numa_a", [({"n": "0"}, 0.0)]), c, i],
        [_gauge("numa_a", [({"n": "0"}, math.nan)]), c, i],
        [_gauge("numa_a", [({"n": "0"}, math.nan)]), c, i],
        [_gauge("numa_a", [({"n": "0"}, 1)]), c, i],  # an int is written as an int
        [_gauge("numa_a", [({"n": "0"}, 1.0)]), c, i],
        [_gauge("numa_a", [({"n": "0", "m": "1"}, 1.0)]), c, i],
        [_gauge("numa_a", [({"m": "1", "n": "0"}, 1.0)]), c, i],  # label order is written
        [_gauge("numa_a", [({"n": "0"}, 1.0)], doc="other help"), c, i],
        [c, i],
    ]


@pytest.mark.parametrize("body", list(Body))
def test_remembered_rendering_is_the_fresh_rendering(body: Body) -> None:
    memo: Memo | None = None
    for fams in _sets():
        remember: Memo = {}
        got = Rendered.of(body, fams, memo, remember)
        fresh = Rendered.of(body, fams)
        assert got == fresh, fams
        memo = remember


def test_unchanged_families_are_not_rendered_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = render._render

    def counting(body: Body, families: list[Metric]) -> bytes:
        calls.extend(f.name for f in families)
        return real(body, families)

    monkeypatch.setattr(render, "_render", counting)
    sets = _sets()
    first: Memo = {}
    Rendered.of(Body.TEXT, sets[0], None, first)
    calls.clear()
    second: Memo = {}
    Rendered.of(Body.TEXT, sets[2], first, second)
    assert calls == ["numa_a"]  # only the family whose value moved
    assert len(second) == 3  # and the memo holds this rendering's families only


def test_key_tells_negative_zero_and_int_apart() -> None:
    keys = {family_key(_gauge("numa_a", [({}, v)])) for v in (0.0, -0.0, 0)}
    assert len(keys) == 3 and None not in keys
