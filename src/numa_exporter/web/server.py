"""The HTTP(S) server: one asyncio event loop in one thread.

Why asyncio: an idle connection, a client that never finishes its headers or one that reads
its response slowly costs a socket and a few kilobytes, never a thread. Every phase is
bounded in time (headers, keep-alive idle, whole response write, TLS handshake), concurrent
scrapes are capped (``--web.max-requests``, 503 beyond) and open connections are capped below
the file-descriptor limit, so the sampler can always open /proc files. Rendering, the
uncached renderings and bcrypt run in small fixed pools (2 + 1 + 1 threads), off the loop.
Responses are written in 64 KiB slices of one shared body, waiting for the client to drain
each, so slow readers hold no copy of it. What each request gets is ``handlers.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from prometheus_client.registry import Collector

from .address import bind
from .auth import BasicAuth
from .auth_queue import CheckQueue, check_executor, peer_key
from .config import WebSettings
from .counters import Joined, WebCounters
from .handlers import Handlers, Limit
from .http1 import (
    MAX_HEAD,
    MAX_HEADERS,
    BadRequest,
    Request,
    Response,
    check_host,
    parse_headers,
    parse_request_line,
    response_head,
)
from .render import SnapshotCache
from .scrape_bytes import ScrapeBytes

log = structlog.get_logger("numa_exporter.web")

CHUNK = 64 * 1024
MAX_BODY = 64 * 1024  # request bodies (none expected) are read and dropped up to this
#: How often the renderer looks for a new snapshot on its own. The daemon wakes it when a
#: scan publishes one (``snapshot_published``) and a scrape that finds the cache stale wakes
#: it at once, so this is only the fallback for a server nobody tells. Each look costs the
#: loop a wake-up: at 0.1 s they were most of an idle exporter's CPU time (2.5 ms a second;
#: 0.2 ms at 1 s).
REFRESH_POLL_S = 10.0
_PLAIN_ON_TLS = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")


def raise_fd_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (at most 65536), as Go programs do:
    systemd's default soft limit of 1024 would cap connections low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def max_connections() -> int:
    """Return how many connections may be open at once: well below RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, min(soft - 64, int(soft * 0.8)))


class ClientLog:
    """One structured line per client error, at most ``burst`` per ``window`` seconds."""

    def __init__(self, burst: int = 20, window: float = 60.0) -> None:
        self.burst, self.window = burst, window
        self._start = 0.0
        self._n = 0
        self.suppressed = 0
        self.total = 0

    def __call__(self, event: str, **kw: Any) -> None:
        self.total += 1
        now = time.monotonic()
        if now - self._start > self.window:
            if self.suppressed:
                log.info("http client errors suppressed", count=self.suppressed,
                         window_seconds=self.window)
            self._start, self._n, self.suppressed = now, 0, 0
        self._n += 1
        if self._n > self.burst:
            self.suppressed += 1
            return
        log.info(event, **kw)


class WebServer:
    """Serves the landing page, health endpoints and the exposition."""

    def __init__(self, settings: WebSettings, cache: SnapshotCache,
                 live: Collector | None,
                 health: Callable[[], str | None] | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.auth = BasicAuth(settings.config.users)
        self.tls: ssl.SSLContext | None = settings.config.tls
        self.client_log = ClientLog()
        self.max_connections = max_connections()
        self.connections = 0
        self.refused = 0  # connections closed at once: too many open
        self.bad_requests = 0  # requests answered 4xx by the parser, then closed
        self.scrapes = Limit(settings.max_requests)  # --web.max-requests
        self._sock: socket.socket | None = None
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._render = ThreadPoolExecutor(2, thread_name_prefix="numa-web-render")
        self._uncached = ThreadPoolExecutor(1, thread_name_prefix="numa-web-uncached")
        self._bcrypt = check_executor()
        self.checks = CheckQueue(self.auth.verify, self._bcrypt)
        if not settings.disable_exporter_metrics:  # as node_exporter's promhttp_* metrics
            live = Joined(live, WebCounters(self.refusals, lambda: self.handlers.auth_results))
        live = Joined(live, ScrapeBytes(cache.sizes))  # the budget: always served
        self.live = live
        self.handlers = Handlers(settings, cache, live, auth=self.auth, checks=self.checks,
                                 scrapes=self.scrapes, render=self._render,
                                 uncached=self._uncached, on_stale=self._stale,
                                 health=health, note=self.client_log)
        self._thread = threading.Thread(target=self._run, name="numa-web", daemon=True)
        self._stopped: asyncio.Event | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._kick: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        """Return how many scrapes are being answered now (what --web.max-requests caps)."""
        return self.scrapes.held

    @property
    def rejected(self) -> int:
        """Return how many connections and scrapes were refused for the limits."""
        return self.refused + self.scrapes.rejected

    def refusals(self) -> dict[str, int]:
        """Return how many requests were refused, by reason (as counters.REFUSALS)."""
        q = self.checks.stats
        return {"auth_client_limit": q.peer_refused, "auth_global_limit": q.refused + q.dropped,
                "max_requests": self.scrapes.rejected,
                "uncached_render_limit": self.handlers.uncached.rejected,
                "bad_request": self.bad_requests, "connection_limit": self.refused}

    @property
    def address(self) -> tuple[str, int]:
        """Return the bound (host, port)."""
        assert self._sock is not None
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Bind the socket (raises OSError) and serve in a daemon thread."""
        raise_fd_limit()
        self.max_connections = max_connections()
        self._sock = bind(self.settings.host, self.settings.port)
        self._thread.start()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, close the loop and wait for the thread."""
        if self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout)
        for pool in (self._render, self._uncached, self._bcrypt):
            pool.shutdown(wait=False, cancel_futures=True)

    # --- loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        assert self._sock is not None
        self._stopped = asyncio.Event()
        accept = asyncio.ensure_future(self._accept(self._sock))
        refresh = asyncio.ensure_future(self._refresh())
        await self._stopped.wait()
        refresh.cancel()
        accept.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await accept
        self._sock.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _refresh(self) -> None:
        """Render each new snapshot soon after its scan completes, in the formats asked for
        before, off the loop, while scrapes keep pace with scans (``SnapshotCache.stale``);
        a scrape then rarely waits for a rendering."""
        loop = asyncio.get_running_loop()
        self._kick = asyncio.Event()
        failed: object = None  # the snapshot whose rendering failed: not retried, logged once
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REFRESH_POLL_S):
                    await self._kick.wait()
            self._kick.clear()
            key = self.cache.key()
            if self.cache.stale() and key is not failed:
                try:
                    await loop.run_in_executor(self._render, self.cache.refresh)
                except Exception as exc:  # a collector bug: scrapes get 500 and say so too
                    failed = key
                    log.error("rendering failed", error=repr(exc))

    def _stale(self) -> None:
        """Wake the refresh task: a newer snapshot exists than the one rendered."""
        if self._kick is not None:
            self._kick.set()

    def snapshot_published(self) -> None:
        """Wake the refresh task from another thread: a scan published a new snapshot.
        Never raises (the scan loop calls it)."""
        if not self.cache.stale():
            return  # no scrape has asked for a format yet: nothing to render, no wake-up
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to render for
            self._loop.call_soon_threadsafe(self._stale)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        self.client_log("http connection error", message=str(context.get("message")),
                        error=repr(exc) if exc else None)

    async def _accept(self, lsock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(lsock)
            except OSError as exc:  # EMFILE and friends: back off, keep serving
                self.client_log("http accept failed", error=exc.strerror or str(exc))
                await asyncio.sleep(0.1)
                continue
            if self.connections >= self.max_connections:
                self.refused += 1
                self.client_log("http connection refused", peer=_peer(peer),
                                reason="too many open connections",
                                limit=self.max_connections)
                sock.close()
                continue
            self.connections += 1
            task = asyncio.ensure_future(self._connection(sock, _peer(peer), _key(peer)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connection(self, sock: socket.socket, peer: str, key: str) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            sock.setblocking(False)
            # responses go out in several writes: without this, Nagle's algorithm holds the
            # last small one until the client's delayed ACK (40 ms on Linux)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None and not await self._looks_like_tls(sock, peer):
                return
            reader, writer = await self._streams(sock, peer)
            if writer is None:
                return
            await self._requests(reader, writer, peer, key)
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            self.client_log("http client error", peer=peer, error=_err(exc))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug: one line, the server goes on
            log.error("http connection failed", peer=peer, error=repr(exc))
        finally:
            self.connections -= 1
            if writer is not None:
                writer.close()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1):
                        await writer.wait_closed()
            else:
                sock.close()

    async def _looks_like_tls(self, sock: socket.socket, peer: str) -> bool:
        """Wait for the first byte; answer plain HTTP with 400. Return True for TLS."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def _readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(sock.fileno(), _readable)
        try:
            async with asyncio.timeout(self.settings.read_header_timeout):
                await ready
        except TimeoutError:
            self.client_log("http client error", peer=peer, error="no TLS handshake in time")
            return False
        finally:
            loop.remove_reader(sock.fileno())
        first = sock.recv(1, socket.MSG_PEEK)
        if first == b"\x16":  # a TLS handshake record
            return True
        if first:
            self.bad_requests += 1
            self.client_log("http client error", peer=peer,
                            error="plain HTTP request on the TLS port")
            await self._refuse_plain(sock)
        return False

    async def _refuse_plain(self, sock: socket.socket) -> None:
        """Answer 400 and close gracefully: read what the client sent (a close with unread
        data would reset the connection and lose the answer), send, half-close, drain."""
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError, TimeoutError):
            sock.recv(MAX_HEAD)
            sock.send(_PLAIN_ON_TLS)
            sock.shutdown(socket.SHUT_WR)
            async with asyncio.timeout(1.0):
                drained = 0
                while drained < MAX_HEAD and (chunk := await loop.sock_recv(sock, 4096)):
                    drained += len(chunk)

    async def _streams(self, sock: socket.socket, peer: str
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter | None]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_HEAD, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=self.tls,
                ssl_handshake_timeout=self.settings.read_header_timeout if self.tls else None)
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as exc:
            self.client_log("http client error", peer=peer, error="TLS handshake failed: "
                            + _err(exc))
            sock.close()
            return reader, None
        transport.set_write_buffer_limits(high=CHUNK)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        if self.tls is not None and self.settings.config.client_allowed_sans:
            cert = writer.get_extra_info("peercert") or {}
            sans = {v for _, v in cert.get("subjectAltName", ())}
            if not sans & self.settings.config.client_allowed_sans:
                self.client_log("http client error", peer=peer,
                                error="client certificate SAN not allowed")
                transport.abort()
                return reader, None
        return reader, writer

    # --- requests -----------------------------------------------------------------------
    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        peer: str, key: str) -> None:
        """Answer the connection's requests one after the other (so one client connection
        never has two requests, or two credential checks, outstanding)."""
        loop = asyncio.get_running_loop()
        first = True
        while True:
            line_deadline = loop.time() + (self.settings.read_header_timeout if first
                                           else self.settings.idle_timeout)
            try:
                req = await self._read_head(reader, line_deadline)
            except BadRequest as exc:
                self.bad_requests += 1
                self.client_log("http bad request", peer=peer, status=exc.status,
                                error=exc.reason)
                if await self._write(writer, Response.text(exc.status, exc.reason), False,
                                     False):
                    await self._linger(reader, writer)
                return
            if req is None:
                return
            first = False
            keep = req.keep_alive
            try:
                resp = await self.handlers.respond(req, key)
            except BadRequest as exc:
                self.bad_requests += 1
                self.client_log("http bad request", peer=peer, status=exc.status,
                                error=exc.reason)
                resp, keep = Response.text(exc.status, exc.reason), False
            except Exception as exc:  # a bug (in a collector, say): answer 500, say so once
                log.error("http request failed", peer=peer, path=req.target[:200],
                          error=repr(exc))
                resp, keep = Response.text(500, "internal server error"), False
            if not await self._write(writer, resp, req.method == "HEAD", keep, peer):
                return
            if not keep:
                return

    async def _linger(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        """Half-close and read what the client still sends (at most 1 MiB, 1 s): closing
        with unread input would reset the connection and lose the error response."""
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(1.0):
                n = 0
                while n < 1 << 20 and (chunk := await reader.read(65536)):
                    n += len(chunk)

    async def _read_head(self, reader: asyncio.StreamReader,
                         line_deadline: float) -> Request | None:
        """Return the next request head; None when the client closed or went idle."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(line_deadline):
                line = await reader.readuntil(b"\n")
                if line in (b"\r\n", b"\n"):
                    line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise BadRequest(400, "incomplete request line") from None
            return None
        except asyncio.LimitOverrunError:
            raise BadRequest(414, "request line too long") from None
        except TimeoutError:
            if reader._buffer:  # type: ignore[attr-defined]  # a partial line arrived
                raise BadRequest(408, "request line not received in time") from None
            return None  # idle keep-alive connection (or one that never spoke): close
        method, target, version = parse_request_line(line)
        lines: list[bytes] = []
        size = len(line)
        head_deadline = min(line_deadline, loop.time() + self.settings.read_header_timeout)
        try:
            async with asyncio.timeout_at(head_deadline):
                while True:
                    h = await reader.readuntil(b"\n")
                    size += len(h)
                    if size > MAX_HEAD or len(lines) > MAX_HEADERS:
                        raise BadRequest(431, "request headers too large")
                    if h in (b"\r\n", b"\n"):
                        break
                    lines.append(h)
        except asyncio.IncompleteReadError:
            raise BadRequest(400, "incomplete request headers") from None
        except asyncio.LimitOverrunError:
            raise BadRequest(431, "request header line too long") from None
        except TimeoutError:
            raise BadRequest(408, "request headers not received in time") from None
        headers = parse_headers(lines)
        check_host(version, headers)
        req = Request(method, target, version, headers)
        await self._drop_body(req, reader, head_deadline)
        return req

    async def _drop_body(self, req: Request, reader: asyncio.StreamReader,
                         deadline: float) -> None:
        if "transfer-encoding" in req.headers:
            raise BadRequest(501, "request bodies with Transfer-Encoding are not supported")
        cl = req.headers.get("content-length", "0").strip()
        if not cl.isascii() or not cl.isdigit():
            raise BadRequest(400, "bad Content-Length")
        n = int(cl)
        if n > MAX_BODY:
            raise BadRequest(413, "request body too large")
        if n:
            try:
                async with asyncio.timeout_at(deadline):
                    await reader.readexactly(n)
            except (asyncio.IncompleteReadError, TimeoutError):
                raise BadRequest(400, "incomplete request body") from None

    async def _write(self, writer: asyncio.StreamWriter, resp: Response, head_only: bool,
                     keep_alive: bool, peer: str = "") -> bool:
        """Write a response within the write timeout; return False when the client failed."""
        headers = [("Content-Type", resp.ctype), *resp.headers,
                   *self.settings.config.headers]
        length = len(resp)
        head = response_head(resp.status, headers, length, keep_alive)
        try:
            async with asyncio.timeout(self.settings.write_timeout):
                pending = head  # small pieces are joined, large ones sent as 64 KiB slices
                for part in () if head_only else resp.parts:
                    if len(pending) + len(part) <= CHUNK:
                        pending += part
                        continue
                    writer.write(pending)
                    pending = b""
                    view = memoryview(part)
                    for i in range(0, len(view), CHUNK):
                        writer.write(view[i:i + CHUNK])
                        await writer.drain()
                writer.write(pending)
                await writer.drain()
        except TimeoutError:
            self.client_log("http client error", peer=peer, error="response not read in time",
                            bytes=length)
            writer.transport.abort()
            return False
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            self.client_log("http client error", peer=peer, error=_err(exc))
            writer.transport.abort()
            return False
        return True


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr)


def _key(addr: Any) -> str:
    """Return the client address the per-client limits are kept by."""
    if isinstance(addr, tuple) and addr:
        return peer_key(str(addr[0]))
    return str(addr)


def _err(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def serve(settings: WebSettings, cached: Collector, key: Callable[[], object],
          live: Collector | None, health: Callable[[], str | None] | None = None
          ) -> WebServer:
    """Return a started server: ``cached`` rendered once per ``key()`` object, ``live`` per
    scrape (None: no live families); ``/-/healthy`` answers 503 with the reason ``health()``
    returns when it returns one (None: always 200). Raises OSError when the address cannot
    be bound."""
    server = WebServer(settings, SnapshotCache(cached, key), live, health)
    server.start()
    return server
