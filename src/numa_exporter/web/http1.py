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
    """Return header lines as {lower-case name: value}; repeated names are joined by ','."""
    out: dict[str, str] = {}
    for raw in lines:
        line = raw.rstrip(b"\r\n")
        if line[:1] in (b" ", b"\t"):
            raise BadRequest(400, "folded header line")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header line")
        key = name.decode("ascii").lower()
        v = value.strip(b" \t").decode("latin-1")
        out[key] = f"{out[key]},{v}" if key in out else v
    return out


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
