"""Content negotiation: what a client's ``Accept`` and ``Accept-Encoding`` headers ask for,
reduced to the few answers this server can give.

Whatever a client writes, the answer is one of three content types over two bodies: the
Prometheus text format (``text/plain`` 0.0.4, or 1.0.0 with underscore escaping, whose bytes
are the same for this exporter's names) and OpenMetrics 1.0.0. Every OpenMetrics 1.x version
is answered with 1.0.0, the one prometheus-client encodes, so a client cannot make the
server render anything it would not render for Prometheus itself.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from prometheus_client import exposition
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector

MAX_HEADER = 1024  # characters of Accept / Accept-Encoding looked at
MAX_ITEMS = 32  # media ranges looked at
_NUMBER = re.compile(r"[0-9]{1,6}", re.ASCII)


class Body(enum.Enum):
    """The bodies this server renders: one per exposition format it speaks."""

    TEXT = "text"
    OPENMETRICS = "openmetrics"

    def encode(self, collector: Collector) -> bytes:
        """Return the collector's families in this format (OpenMetrics ends in ``# EOF``)."""
        if self is Body.OPENMETRICS:
            return bytes(openmetrics.generate_latest(  # type: ignore[no-untyped-call]
                collector, version="1.0.0"))
        return bytes(exposition.generate_latest(collector))


@dataclass(frozen=True, slots=True)
class Format:
    """One answer to an ``Accept`` header: the body to send and its Content-Type."""

    body: Body
    content_type: str

    @property
    def openmetrics(self) -> bool:
        """Return whether the body is OpenMetrics (which ends with ``# EOF``)."""
        return self.body is Body.OPENMETRICS


TEXT_0_0_4 = Format(Body.TEXT, exposition.CONTENT_TYPE_PLAIN_0_0_4)
TEXT_1_0_0 = Format(Body.TEXT, exposition.CONTENT_TYPE_PLAIN_1_0_0 + "; escaping=underscores")
OPENMETRICS_1_0_0 = Format(Body.OPENMETRICS,
                           openmetrics.CONTENT_TYPE_LATEST + "; escaping=underscores")
FORMATS = (TEXT_0_0_4, TEXT_1_0_0, OPENMETRICS_1_0_0)


def _major(version: str | None) -> int | None:
    """Return the major number of a ``1``, ``1.2`` or ``1.2.3`` version, else None."""
    if version is None:
        return None
    parts = version.split(".")
    if len(parts) > 3 or not all(_NUMBER.fullmatch(p) for p in parts):
        return None
    return int(parts[0])


def _format_of(media: str, version: str | None) -> Format | None:
    """Return the format answering one media range, None when this server has none."""
    if media == "application/openmetrics-text":
        # no version: 1.0.0, as prometheus-client does; 0.0.1 (pre-1.0) and 2.x: not spoken
        if version is None or _major(version) == 1:
            return OPENMETRICS_1_0_0
        return None
    if media == "text/plain":
        if version is None or version == "0.0.4":
            return TEXT_0_0_4
        return TEXT_1_0_0 if _major(version) == 1 else None
    if media in ("*/*", "text/*"):
        return TEXT_0_0_4
    return None


def _q(value: str) -> float:
    """Return a q value in 0..1; anything unreadable or out of range is 0 (refused)."""
    try:
        q = float(value)
    except ValueError:
        return 0.0
    return q if 0.0 <= q <= 1.0 else 0.0


def negotiate_format(accept: str) -> Format:
    """Return the format for an ``Accept`` header: the acceptable media range with the
    highest q (the first of equals), else the text format 0.0.4."""
    best: Format | None = None
    best_q = 0.0
    for item in accept[:MAX_HEADER].split(",")[:MAX_ITEMS]:
        media, *params = (p.strip() for p in item.split(";"))
        version: str | None = None
        q = 1.0
        for p in params:
            k, _, v = p.partition("=")
            k, v = k.strip().lower(), v.strip().strip('"')
            if k == "version":
                version = v
            elif k == "q":
                q = _q(v)
        fmt = _format_of(media.lower(), version)
        if fmt is not None and q > best_q:
            best, best_q = fmt, q
    return best or TEXT_0_0_4


def wants_gzip(accept_encoding: str) -> bool:
    """Return whether an Accept-Encoding header accepts gzip (``gzip;q=0`` refuses it)."""
    gzip_q: float | None = None
    star_q: float | None = None
    for item in accept_encoding[:MAX_HEADER].split(",")[:MAX_ITEMS]:
        coding, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for p in params:
            k, _, v = p.partition("=")
            if k.strip().lower() == "q":
                q = _q(v.strip())
        c = coding.lower()
        if c in ("gzip", "x-gzip"):
            gzip_q = q if gzip_q is None else max(gzip_q, q)
        elif c == "*":
            star_q = q
    if gzip_q is not None:
        return gzip_q > 0
    return star_q is not None and star_q > 0
