"""HTTP/1.x request heads: parsed from bytes, bounded, never trusting the client."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

MAX_HEAD = 16 * 1024  # request line and headers together
MAX_HEADERS = 100
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
# RFC 9110 field-value: visible ASCII, SP, HTAB and obs-text; NUL, CR, LF and the other
# controls (and DEL) are refused, not passed on
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# RFC 9110 Host: uri-host [ ":" port ] -- reg-name, IPv4 or an IP literal in brackets
_HOST = re.compile(rb"(?:\[[0-9A-Za-z:.]{1,62}\]|[-0-9A-Za-z._~!$&'()*+,;=%]{0,255})"
                   rb"(?::[0-9]{0,5})?")


class BadRequest(Exception):
    """A request this server answers with ``status`` and then closes the connection."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request head."""

    method: str
    target: str
    version: tuple[int, int]
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names, values joined

    @property
    def keep_alive(self) -> bool:
        """Return whether the client wants the connection kept open after the response."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version >= (1, 1):
            return "close" not in tokens
        return "keep-alive" in tokens

    def path_and_query(self) -> tuple[str, str]:
        """Return the path and query of the target (origin or absolute form)."""
        t = self.target
        if not t.startswith("/"):
            parts = urlsplit(t)
            if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
                raise BadRequest(400, "bad request target")
            return parts.path or "/", parts.query
        path, _, query = t.partition("?")
        return path, query.partition("#")[0]

    def names(self) -> frozenset[str] | None:
        """Return the ``name[]`` query values (None when there are none)."""
        _, query = self.path_and_query()
        if "name" not in query:
            return None
        try:
            got = parse_qs(query, max_num_fields=200).get("name[]")
        except ValueError:
            raise BadRequest(400, "too many query parameters") from None
        return frozenset(got) if got else None


def parse_request_line(line: bytes) -> tuple[str, str, tuple[int, int]]:
    """Return (method, target, version) of a request line; raise BadRequest otherwise."""
    parts = line.rstrip(b"\r\n").split(b" ")
    if len(parts) != 3:
        # "GET /metrics" alone is HTTP/0.9, which has no headers: not served.
        raise BadRequest(400, "malformed request line (HTTP/0.9 is not supported)")
    method, target, version = parts
    m = _VERSION.fullmatch(version)
    if not _TOKEN.fullmatch(method) or not m or not target:
        raise BadRequest(400, "malformed request line")
    ver = (int(m.group(1)), int(m.group(2)))
    if ver[0] != 1:
        raise BadRequest(505, "HTTP version not supported")
    if any(c <= 0x20 or c >= 0x7f for c in target):
        raise BadRequest(400, "bad request target")
    return method.decode("ascii"), target.decode("ascii"), ver


def parse_headers(lines: list[bytes]) -> dict[str, str]:
    """Return header lines as {lower-case name: value}; repeated names are joined by ','.

    Raises BadRequest (400) for a folded or malformed line, a control character other than
    HTAB in a value (NUL included), and a second or malformed ``Host``.
    """
    out: dict[str, str] = {}
    for raw in lines:
        line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1] if raw.endswith(b"\n") else raw
        if line[:1] in (b" ", b"\t"):
            raise BadRequest(400, "folded header line")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header line")
        if _BAD_VALUE.search(value):
            raise BadRequest(400, "control character in a header value")
        key = name.decode("ascii").lower()
        v = value.strip(b" \t")
        if key == "host" and (key in out or not _HOST.fullmatch(v)):
            raise BadRequest(400, "more than one Host header" if key in out else "bad Host header")
        text = v.decode("latin-1")
        out[key] = f"{out[key]},{text}" if key in out else text
    return out


def check_host(version: tuple[int, int], headers: dict[str, str]) -> None:
    """Raise BadRequest (400) for an HTTP/1.1 request without ``Host`` (RFC 9112 3.2)."""
    if version >= (1, 1) and "host" not in headers:
        raise BadRequest(400, "HTTP/1.1 request without a Host header")


def response_head(status: int, headers: list[tuple[str, str]], length: int,
                  keep_alive: bool) -> bytes:
    """Return the status line and headers of a response."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    lines = [f"HTTP/1.1 {status} {phrase}", f"Date: {formatdate(usegmt=True)}",
             *(f"{k}: {v}" for k, v in headers), f"Content-Length: {length}"]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Response:
    """A response to write: status, content type, the body in pieces (written one after the
    other, never joined) and extra headers."""

    status: int
    ctype: str
    parts: tuple[bytes, ...]
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(cls, status: int, message: str, *headers: tuple[str, str]) -> Response:
        """Return a plain-text response of one line."""
        return cls(status, TEXT, (f"{message}\n".encode(),), headers)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)
