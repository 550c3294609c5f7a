"""The soak's hostile clients: what a client on the network can do to the daemon's web server.

Idle connections, an HTTP/0.9 request, garbage (random bytes, a TLS hello, 70 kB paths and
headers), a slow reader, clients that disconnect mid-response, a flood of distinct Accept
headers, and a flood of wrong passwords against a second daemon that has basic auth on. Each
check returns a :class:`HostileCheck`; :meth:`HostileClients._hostile` runs one in rounds
until the soak's deadline. :class:`HostileClients` is a part of :class:`tools.soak.Soak`,
which holds the daemons, the stop event and the report these checks use.
"""

from __future__ import annotations

import random
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import bcrypt
import psutil
from tools.soak_floods import ATTACKERS, Flood, basic, cpu_seconds, scans_in, status_of

if TYPE_CHECKING:
    from tools.soak import Report

HOST = "127.0.0.1"
SCRAPE_TIMEOUT = 10.0
HOSTILE_ROUND_S = 25.0  # the longest hostile check (slow reader: 20 s, plus its scrape)
FLOOD_CLIENTS = 40  # threads of a flood round (from 8 loopback addresses)
FLOOD_S = 8.0  # how long a flood round floods
AUTH_USER, AUTH_PASSWORD = "prometheus", "soak-scraper"  # the auth daemon's cached scraper
BCRYPT_COST = 10  # as the deployment guide's htpasswd -nBC 10
# what Prometheus 3 sends by default (scrape_protocols)
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                     "application/openmetrics-text;version=0.0.1;q=0.4,"
                     "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
                     "text/plain;version=0.0.4;q=0.2,*/*;q=0.1")


def _server_side_state(server_port: int, client_port: int) -> str | None:
    """Return the TCP state of the server's end of a loopback connection (None: not found).

    Every TCP socket on the host is looked at (psutil), also one the server has closed and
    no longer holds an fd for (FIN_WAIT...), which still holds kernel memory.
    """
    try:
        conns = psutil.net_connections("tcp")
    except psutil.Error:
        return None
    for c in conns:
        if c.laddr and c.raddr and c.laddr.port == server_port and c.raddr.port == client_port:
            return str(c.status)
    return None


@dataclass
class HostileCheck:
    """One hostile-client check: what it did, whether the server coped, and how."""

    name: str
    passed: bool
    detail: str


class HostileClients:
    """The hostile-client checks of a soak (mixed into :class:`tools.soak.Soak`)."""

    port: int
    auth_port: int
    daemon: subprocess.Popen[bytes] | None
    auth_daemon: subprocess.Popen[bytes] | None
    stop: threading.Event
    lock: threading.Lock
    probes: list[str]
    scan_interval: float
    report: Report
    _flooding: threading.Lock

    def _scrape(self) -> tuple[float, str]:
        raise NotImplementedError

    def _start_daemon(self, log_path: Path, port: int | None = None,
                      *extra: str) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    def _wait_first_scan(self, timeout: float = 30.0,
                         daemon: subprocess.Popen[bytes] | None = None,
                         scrape: Callable[[], str] | None = None) -> float:
        raise NotImplementedError

    # --- hostile clients -----------------------------------------------------------------
    def _connect(self, timeout: float = 5.0) -> socket.socket:
        s = socket.create_connection((HOST, self.port), timeout=timeout)
        s.settimeout(timeout)
        return s

    def _scrape_ok(self) -> bool:
        try:
            self._scrape()
        except Exception:
            return False
        return True

    @staticmethod
    def _closed_within(s: socket.socket, seconds: float) -> tuple[bool, int]:
        """Return (the server closed the connection within seconds, bytes received)."""
        end = time.monotonic() + seconds
        got = 0
        while time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                return False, got
            except OSError:
                return True, got  # reset: closed
            if not chunk:
                return True, got
            got += len(chunk)
        return False, got

    def _idle(self, n: int = 20, wait: float = 10.0) -> HostileCheck:
        socks = [self._connect() for _ in range(n)]
        try:
            scrape = self._scrape_ok()
            closed = 0
            end = time.monotonic() + wait
            for s in socks:
                ok, _ = self._closed_within(s, max(0.1, end - time.monotonic()))
                closed += ok
        finally:
            for s in socks:
                s.close()
        return HostileCheck("idle_connections", scrape and closed == n,
                            f"scrape meanwhile {'ok' if scrape else 'failed'}; server closed "
                            f"{closed}/{n} idle connections within {wait:.0f}s")

    def _http09(self, wait: float = 5.0) -> HostileCheck:
        with self._connect() as s:
            s.sendall(b"GET /metrics\r\n")
            closed, got = self._closed_within(s, wait)
        scrape = self._scrape_ok()
        return HostileCheck("http09_request", closed and scrape,
                            f"answered {got} bytes and {'closed' if closed else 'kept open'} "
                            f"within {wait:.0f}s; scrape after {'ok' if scrape else 'failed'}")

    def _garbage(self, wait: float = 5.0) -> HostileCheck:
        rng = random.Random(7)
        payloads = {
            "random bytes": bytes(rng.randrange(256) for _ in range(4096)) + b"\r\n\r\n",
            "TLS hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64,
            "70 kB path": b"GET /" + b"A" * 70000 + b" HTTP/1.1\r\n\r\n",
            "70 kB header": b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 70000 + b"\r\n\r\n",
        }
        open_ones = []
        for what, payload in payloads.items():
            try:
                with self._connect() as s:
                    s.sendall(payload)
                    closed, _ = self._closed_within(s, wait)
            except OSError:
                closed = True  # the server reset the connection: it coped
            if not closed:
                open_ones.append(what)
        scrape = self._scrape_ok()
        return HostileCheck("garbage_requests", not open_ones and scrape,
                            f"answered and closed {len(payloads) - len(open_ones)}/"
                            f"{len(payloads)} within {wait:.0f}s"
                            + (f" (kept open: {', '.join(open_ones)})" if open_ones else "")
                            + f"; scrape after {'ok' if scrape else 'failed'}")

    def _slow_reader(self, limit: float = 20.0) -> HostileCheck:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5.0)
        try:
            s.connect((HOST, self.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            end = time.monotonic() + limit
            got, closed, scrape = 0, False, None
            while time.monotonic() < end:
                try:
                    chunk = s.recv(64)
                except OSError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                got += len(chunk)
                if scrape is None and got > 1024:
                    scrape = self._scrape_ok()
                time.sleep(0.25)
            # a body that fits in the kernel's socket buffers is all handed over at once:
            # then the server has closed its end (FIN sent, the client just has not read up
            # to it), which holds nothing of the daemon's; only ESTABLISHED means kept
            server_state = None if closed else _server_side_state(self.port, s.getsockname()[1])
        finally:
            s.close()
        scrape = bool(scrape) if scrape is not None else self._scrape_ok()
        let_go = closed or (server_state is not None and server_state != "ESTABLISHED")
        how = ("dropped it" if closed else f"closed its end ({server_state})" if let_go
               else f"kept it ({server_state or 'state unknown'})")
        # A hardened server gives up on a client that reads 256 B/s before the time is up.
        return HostileCheck("slow_reader", let_go and scrape,
                            f"read {got} bytes in {limit:.0f}s at 256 B/s; server {how}; "
                            f"scrape meanwhile {'ok' if scrape else 'failed'}")

    def _disconnects(self, n: int = 20) -> HostileCheck:
        for _ in range(n):
            try:
                with self._connect() as s:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    s.recv(100)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            except OSError:
                pass
        scrape = self._scrape_ok()
        alive = self.daemon is not None and self.daemon.poll() is None
        return HostileCheck("disconnect_mid_response", scrape and alive,
                            f"{n} resets mid-response; scrape after "
                            f"{'ok' if scrape else 'failed'}, daemon "
                            f"{'alive' if alive else 'exited'}")

    def _flood_round(self, name: str, pid: int, port: int, heads: Callable[[int, int], str],
                     probe: Callable[[], str], scans: Callable[[], float],
                     flood: Flood) -> HostileCheck:
        """Flood ``port`` with ``heads`` while ``probe`` (a legitimate client, returning what
        it saw, '' when it failed) runs twice a second; report the answers, the scans the
        daemon completed meanwhile and its CPU time. One flood at a time."""
        with self._flooding:
            return self._flood(name, pid, port, heads, probe, scans, flood)

    def _flood(self, name: str, pid: int, port: int, heads: Callable[[int, int], str],
               probe: Callable[[], str], scans: Callable[[], float],
               flood: Flood) -> HostileCheck:
        scans0, cpu0, t0 = scans(), cpu_seconds(pid), time.monotonic()
        t = threading.Thread(target=flood.run,
                             args=(port, heads, FLOOD_CLIENTS, FLOOD_S, self.stop))
        t.start()
        self.stop.wait(1.0)  # the flood under way: every client has sent and waits
        seen: list[str] = []
        while t.is_alive():
            seen.append(probe())
            self.stop.wait(0.5)
        t.join()
        secs = time.monotonic() - t0
        done = scans() - scans0
        cpu = (cpu_seconds(pid) - cpu0) / secs if secs > 0 else 0.0
        fails = [x for x in seen if not x.startswith("ok")]
        return HostileCheck(
            name, bool(seen) and not fails and done > 0,
            f"{FLOOD_CLIENTS} clients from {len(ATTACKERS)} addresses got {flood.summary()} "
            f"in {secs:.1f}s; meanwhile {', '.join(dict.fromkeys(seen))} "
            f"({len(seen) - len(fails)}/{len(seen)} ok); {done:.0f} scans at "
            f"{self.scan_interval:g}s interval; daemon CPU {cpu:.0%} of a core")

    def _accept_flood(self) -> HostileCheck:
        """Distinct OpenMetrics versions (a quarter also name[] with gzip) from 40 clients:
        Prometheus-like scrapes keep getting 200."""
        assert self.daemon is not None

        def heads(c: int, n: int) -> str:
            query = "?name[]=numa_exporter_scans_total" if c % 4 == 0 else ""
            return (f"GET /metrics{query} HTTP/1.1\r\nHost: x\r\n"
                    f"Accept: application/openmetrics-text; version=1.{c}.{n}\r\n"
                    f"Accept-Encoding: {'gzip' if c % 2 == 0 else 'identity'}\r\n")

        def probe() -> str:
            head = (f"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {PROMETHEUS_ACCEPT}\r\n"
                    "Accept-Encoding: gzip\r\n")
            st = status_of(self.port, head, timeout=SCRAPE_TIMEOUT)
            return "ok scrape" if st == 200 else f"scrape {st or 'no answer'}"

        def scans() -> float:
            try:
                return scans_in(self._scrape()[1])
            except Exception:
                return 0.0

        return self._flood_round("accept_header_flood", self.daemon.pid, self.port, heads,
                                 probe, scans, Flood())

    def _auth_flood(self) -> HostileCheck:
        """Distinct wrong passwords from 40 clients at the daemon with basic auth: the
        cached scraper keeps getting 200, and so does a right password never checked before
        (a fresh user each round, sent once, after the flood began), with at most one of the
        flood's checks per flooding address answered while it waits -- counted, not timed:
        the server answering in arrival order makes it wait for all 40."""
        assert self.auth_daemon is not None
        salt = random.getrandbits(32)

        def heads(c: int, n: int) -> str:
            return (f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: "
                    f"{basic(AUTH_USER, f'wrong-{salt}-{c}-{n}')}\r\n")

        with self.lock:
            user = self.probes.pop(0) if self.probes else None
        fresh: list[str] = []
        flood = Flood()

        def probe() -> str:
            if user is not None and not fresh:
                t, checked = time.monotonic(), flood.count(401)
                st = status_of(self.auth_port, f"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                               f"Authorization: {basic(user, user)}\r\n",
                               timeout=SCRAPE_TIMEOUT)
                ahead = flood.count(401) - checked
                fresh.append(f"{st or 'no answer'} after {time.monotonic() - t:.2f}s, "
                             f"{ahead} flood checks answered meanwhile")
                ok = st == 200 and ahead <= len(ATTACKERS)
                return (f"ok uncached right password ({fresh[0]})" if ok
                        else f"uncached right password: {fresh[0]}")
            st = status_of(self.auth_port, f"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                           f"Authorization: {basic(AUTH_USER, AUTH_PASSWORD)}\r\n",
                           timeout=SCRAPE_TIMEOUT)
            return "ok cached scrape" if st == 200 else f"cached scrape {st or 'no answer'}"

        def scans() -> float:
            try:
                return scans_in(self._auth_scrape())
            except Exception:
                return 0.0

        result = self._flood_round("auth_flood", self.auth_daemon.pid, self.auth_port, heads,
                                   probe, scans, flood)
        if user is None:
            result.detail += " (no fresh user left: the right password was not tested)"
        return result

    def _hostile(self, check: Callable[[], HostileCheck], deadline: float) -> None:
        """Run one check in rounds until the deadline (at least once); keep the worst."""
        rounds = failed = 0
        last: HostileCheck | None = None
        while rounds == 0 or time.monotonic() < deadline - HOSTILE_ROUND_S:
            if self.stop.is_set():
                break
            try:
                result = check()
            except Exception as exc:  # a client-side error is the check's failure
                result = HostileCheck(getattr(check, "__name__", "?").strip("_"), False,
                                      f"{type(exc).__name__}: {exc}")
            rounds += 1
            if not result.passed:
                failed += 1
            if last is None or last.passed or not result.passed:
                last = result
            self.stop.wait(0.5)
        assert last is not None
        summary = HostileCheck(last.name, failed == 0,
                               f"{rounds - failed}/{rounds} rounds passed; "
                               f"{'last failure' if failed else 'last'}: {last.detail}")
        with self.lock:
            self.report.hostile.append(summary)

    def _auth_scrape(self) -> str:
        """Return the auth daemon's exposition, scraped with the cached credentials."""
        req = urllib.request.Request(f"http://{HOST}:{self.auth_port}/metrics", headers={
            "Authorization": basic(AUTH_USER, AUTH_PASSWORD)})
        with urllib.request.urlopen(req, timeout=SCRAPE_TIMEOUT) as resp:
            return str(resp.read().decode("utf-8"))

    def _start_auth_daemon(self, log_path: Path) -> None:
        """Start the daemon the auth flood targets: basic auth for the scraper's user and
        one fresh user per round (password = user name), bcrypt cost 10."""
        users = {u: u for u in self.probes} | {AUTH_USER: AUTH_PASSWORD}
        lines = ["basic_auth_users:"] + [
            f"  {u}: '{bcrypt.hashpw(p.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()}'"
            for u, p in users.items()]
        cfg = log_path.with_name(log_path.stem + "-web.yml")
        cfg.write_text("\n".join(lines) + "\n")
        self.auth_daemon = self._start_daemon(log_path.with_name(log_path.stem + "-auth.log"),
                                              self.auth_port, f"--web.config.file={cfg}")
        self._wait_first_scan(daemon=self.auth_daemon, scrape=self._auth_scrape)
