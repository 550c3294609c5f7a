"""What the server answers to a request: basic auth, routing, the landing page, the health
endpoints and the exposition.

Connections, time-outs and writing are ``server.py``'s; a handler gets a parsed request and
returns a ``Response``. Work a client can cause is bounded here, failing fast beyond each
bound: uncached credential checks (``auth_queue``), scrapes being rendered at once
(``--web.max-requests``) and, within those, answers that cannot come from the render cache
(a ``name[]`` selection to compress), which get their own small limit and thread so they
never hold up scrapes that the cache answers.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from concurrent.futures import Executor

from prometheus_client.registry import Collector

from numa_exporter import __version__

from .auth import BasicAuth, parse_basic
from .auth_queue import CheckQueue, Verdict
from .config import WebSettings
from .counters import AuthResult, auth_counts
from .http1 import Request, Response
from .render import Ask, Exposition, SnapshotCache, expose

_HTML = "text/html; charset=utf-8"
UNCACHED_RENDERS = 2  # answers compressed for one scrape alone, at once; 503 beyond
_RETRY = ("Retry-After", "1")
_UNAUTHORIZED = Response.text(401, "Unauthorized",
                              ("WWW-Authenticate", 'Basic realm="numa-exporter"'))
_REFUSED = {
    Verdict.DENIED: _UNAUTHORIZED,
    Verdict.PEER_BUSY: Response.text(
        429, "too many credential checks from this address; retry later", _RETRY),
    Verdict.BUSY: Response.text(503, "too many credential checks; retry later", _RETRY),
}


def landing_page(path: str) -> bytes:
    """Return the HTML of the landing page, linking to the telemetry path."""
    p = html.escape(path)
    return (
        "<!doctype html><html><head><title>numa-exporter</title></head><body>"
        f"<h1>numa-exporter {html.escape(__version__)}</h1>"
        "<p>Per-process NUMA memory placement for Prometheus.</p>"
        f'<p><a href="{p}">{p}</a></p></body></html>\n'
    ).encode()


class Limit:
    """At most ``limit`` holders at once (0: no limit); a caller beyond it is refused at
    once, never queued. Used on the event loop's thread only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.rejected = 0

    def acquire(self) -> bool:
        """Return True and hold a place when one is free; else count a rejection."""
        if self.limit and self.held >= self.limit:
            self.rejected += 1
            return False
        self.held += 1
        return True

    def release(self) -> None:
        """Give a place back."""
        self.held -= 1


class Handlers:
    """Answers requests: ``respond`` is called on the event loop's thread."""

    def __init__(self, settings: WebSettings, cache: SnapshotCache, live: Collector | None,
                 *, auth: BasicAuth, checks: CheckQueue, scrapes: Limit, render: Executor,
                 uncached: Executor, on_stale: Callable[[], None],
                 health: Callable[[], str | None] | None = None,
                 note: Callable[..., None] | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.live = live
        self.auth = auth
        self.checks = checks
        self.scrapes = scrapes
        self.uncached = Limit(UNCACHED_RENDERS)
        self.auth_results = auth_counts()  # numa_exporter_web_auth_checks_total
        self._render = render
        self._uncached_pool = uncached
        self._on_stale = on_stale
        self._health = health
        self._note = note or (lambda event, **kw: None)

    async def respond(self, req: Request, peer: str) -> Response:
        """Return the response to ``req`` from the client address ``peer`` (its limits'
        key). Raises BadRequest for a bad target or query."""
        if req.method not in ("GET", "HEAD"):
            return Response.text(405, "method not allowed", ("Allow", "GET, HEAD"))
        path, _ = req.path_and_query()
        if self.auth.enabled:
            verdict = await self.authorize(req, peer)
            if verdict is not Verdict.ALLOWED:
                if verdict is not Verdict.DENIED:
                    self._note("http credential check refused", peer=peer,
                               status=verdict.value)
                return _REFUSED[verdict]
        if path == self.settings.telemetry_path:
            return await self.metrics(req)
        if path == "/":
            return Response(200, _HTML, (landing_page(self.settings.telemetry_path),))
        if path == "/-/healthy":
            return self.healthy()
        if path == "/-/ready":
            return Response.text(200, "OK")
        return Response.text(404, "not found")

    async def authorize(self, req: Request, peer: str) -> Verdict:
        """Return the verdict on the request's credentials: remembered ones at once, others
        through the bounded check queue."""
        creds = parse_basic(req.headers.get("authorization"))
        if creds is None:
            self._count("missing")
            return Verdict.DENIED
        known = self.auth.known(*creds)
        if known is not None:
            self._count("cached_ok" if known else "cached_wrong")
            return Verdict.ALLOWED if known else Verdict.DENIED
        verdict = await self.checks.verify(peer, *creds)
        if verdict is Verdict.ALLOWED or verdict is Verdict.DENIED:  # else refused: counted
            self._count("ok" if verdict is Verdict.ALLOWED else "wrong")  # by the queue
        return verdict

    def _count(self, result: AuthResult) -> None:
        self.auth_results[result] += 1

    def healthy(self) -> Response:
        """Return 200 OK, or 503 with the reason the health check gives."""
        reason = self._health() if self._health is not None else None
        if reason is None:
            return Response.text(200, "OK")
        return Response.text(503, reason)

    async def metrics(self, req: Request) -> Response:
        """Return the exposition: from the render cache right here when it holds the answer,
        else rendered on a worker thread, within the limits."""
        ask = Ask.of(req.headers.get("accept", ""), req.headers.get("accept-encoding", ""),
                     req.names())
        if not ask.cached and not self.uncached.acquire():
            return Response.text(503, "too many filtered compressed scrapes; retry later",
                                 _RETRY)
        try:
            if not self.scrapes.acquire():
                return Response.text(503, "too many concurrent scrapes; retry later", _RETRY)
            try:
                expo = await self._exposition(ask)
            finally:
                self.scrapes.release()
        finally:
            if not ask.cached:
                self.uncached.release()
        headers: tuple[tuple[str, str], ...] = (("Vary", "Accept-Encoding"),)
        if expo.gzipped:
            headers += (("Content-Encoding", "gzip"),)
        return Response(200, expo.content_type, expo.parts, headers)

    async def _exposition(self, ask: Ask) -> Exposition:
        # already rendered (this scan's or, while it renders, the previous scan's):
        # joining it with the live families takes ~0.2 ms, done right here
        expo = expose(self.cache, self.live, ask, wait=False)
        if self.cache.stale():
            self._on_stale()
        if expo is None:
            pool = self._render if ask.cached else self._uncached_pool
            loop = asyncio.get_running_loop()
            expo = await loop.run_in_executor(pool, expose, self.cache, self.live, ask)
        assert expo is not None
        return expo
