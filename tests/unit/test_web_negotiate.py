"""Content negotiation: Accept and Accept-Encoding reduced to the three answers the server has."""

from __future__ import annotations

import pytest

from numa_exporter.web.negotiate import (
    FORMATS,
    OPENMETRICS_1_0_0,
    TEXT_0_0_4,
    TEXT_1_0_0,
    Body,
    Format,
    negotiate_format,
    wants_gzip,
)

# What Prometheus 2.x and 3.x send by default (scrape_protocols), as written in their code.
PROMETHEUS_2 = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_3 = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                "application/openmetrics-text;version=0.0.1;q=0.4,"
                "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
                "text/plain;version=0.0.4;q=0.2,*/*;q=0.1")


@pytest.mark.parametrize(("header", "want"), [
    ("gzip", True), ("GZIP", True), ("gzip;q=0", False), ("gzip; q=0.0", False),
    ("gzip;q=0.5", True), ("deflate, gzip;q=1.0, *;q=0.5", True), ("*", True), ("*;q=0", False),
    ("identity", False), ("", False), ("br", False), ("gzip;q=0, *", False),
    ("x-gzip", True), ("gzip;q=abc", False), ("gzip;q=2", False), ("gzipx", False),
])
def test_accept_encoding_q_values(header: str, want: bool) -> None:
    assert wants_gzip(header) is want


@pytest.mark.parametrize(("accept", "want"), [
    ("", TEXT_0_0_4),
    ("text/plain", TEXT_0_0_4),
    ("text/plain; version=0.0.4", TEXT_0_0_4),
    ("*/*", TEXT_0_0_4),
    ("text/plain;version=1.0.0;escaping=allow-utf-8", TEXT_1_0_0),
    ("application/openmetrics-text", OPENMETRICS_1_0_0),
    ("application/openmetrics-text; version=1.0.0", OPENMETRICS_1_0_0),
    ("application/openmetrics-text; version=1.0.0,text/plain;q=0.5", OPENMETRICS_1_0_0),
    (PROMETHEUS_2, OPENMETRICS_1_0_0),
    (PROMETHEUS_3, OPENMETRICS_1_0_0),
    # every 1.x is answered with the 1.0.0 that prometheus-client encodes
    ("application/openmetrics-text; version=1.0.1", OPENMETRICS_1_0_0),
    ("application/openmetrics-text; version=1.99.12345", OPENMETRICS_1_0_0),
    ('application/openmetrics-text; version="1.2"', OPENMETRICS_1_0_0),
    # versions it does not speak fall through to the next acceptable range, else text
    ("application/openmetrics-text; version=0.0.1", TEXT_0_0_4),
    ("application/openmetrics-text; version=2.0.0, text/plain;q=0.1", TEXT_0_0_4),
    ("application/openmetrics-text; version=1.0.0.0", TEXT_0_0_4),
    ("application/openmetrics-text; version=x.y\x01", TEXT_0_0_4),
    ("application/openmetrics-text; version=1" + "0" * 50, TEXT_0_0_4),
    # q values: the highest wins, q=0 refuses, equal ones go by order
    ("text/plain;q=0.9, application/openmetrics-text;q=0.8", TEXT_0_0_4),
    ("text/plain;q=0.8, application/openmetrics-text;q=0.9", OPENMETRICS_1_0_0),
    ("application/openmetrics-text;q=0, text/plain;q=0.1", TEXT_0_0_4),
    ("application/openmetrics-text;q=0", TEXT_0_0_4),
    ("application/openmetrics-text;q=2", TEXT_0_0_4),
    ("APPLICATION/OpenMetrics-Text;Version=1.0.0", OPENMETRICS_1_0_0),
    ("application/openmetrics-text;version=1.0.0;escaping=dots", OPENMETRICS_1_0_0),
    ("text/plain;version=1.0.0;escaping=values", TEXT_1_0_0),
    ("application/json, image/*", TEXT_0_0_4),
    (",,,;;;==", TEXT_0_0_4),
])
def test_accept_is_reduced_to_three_answers(accept: str, want: Format) -> None:
    assert negotiate_format(accept) == want


def test_content_types_are_the_ones_prometheus_client_writes() -> None:
    assert TEXT_0_0_4.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert OPENMETRICS_1_0_0.content_type == (
        "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores")
    assert TEXT_1_0_0.content_type == (
        "text/plain; version=1.0.0; charset=utf-8; escaping=underscores")
    assert {f.body for f in FORMATS} == {Body.TEXT, Body.OPENMETRICS}


def test_long_hostile_headers_are_cut() -> None:
    many = ",".join(f"application/openmetrics-text;version=1.0.{i}" for i in range(5000))
    assert negotiate_format(many) == OPENMETRICS_1_0_0
    # the acceptable range sits past what is read: not seen
    assert negotiate_format("x/y," * 2000 + "application/openmetrics-text") == TEXT_0_0_4


def test_one_body_answers_each_group_of_content_types() -> None:
    """What prometheus-client itself writes for each Accept header is byte for byte the body
    served for it, so answering many headers with one rendering loses nothing. (Escapings
    that rename legacy names, ``dots`` and ``values``, are answered with underscores, which
    the content type says.)"""
    from prometheus_client import CollectorRegistry, Counter, Gauge
    from prometheus_client.exposition import choose_encoder

    r = CollectorRegistry()
    Gauge("numa_process_memory_bytes", "bytes", ["pid", "node"], registry=r).labels(
        "1", "0").set(4096)
    Counter("numa_exporter_scans", "scans", registry=r).inc(3)
    for accept in ("", "text/plain;version=1.0.0;escaping=underscores",
                   "text/plain;version=1.0.0;escaping=allow-utf-8",
                   "application/openmetrics-text", "application/openmetrics-text;version=1.0.0",
                   "application/openmetrics-text;version=1.7.2;escaping=allow-utf-8"):
        theirs, _ = choose_encoder(accept)
        assert negotiate_format(accept).body.encode(r) == theirs(r), accept
