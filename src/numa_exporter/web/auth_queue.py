"""Bounded, fair scheduling of the bcrypt checks that unauthenticated clients cause.

A credential not seen before costs one bcrypt check (tens of milliseconds of CPU at cost
10). Unbounded, a flood of wrong passwords queues checks without limit and a right password
that is not cached yet (after a restart or a password change) waits behind all of them.
Here the checks that wait are bounded three ways, each failing fast instead of queueing:

* per connection: one (a connection's requests are answered one after the other);
* per client address (IPv4 address, IPv6 /64): ``per_peer`` checks waiting or running,
  beyond that ``429 Too Many Requests``;
* in all: ``max_waiting`` checks waiting for the ``workers`` threads, beyond that
  ``503 Service Unavailable`` -- unless the newcomer's address has fewer checks waiting than
  the address with the most, whose newest waiting check is then answered 503 instead.

Waiting checks are started address by address, the address whose last check started
longest ago first (one never served before goes first), so a scraper at its own address
waits for at most one check per other address, however many requests those send. Right and
wrong outcomes are both cached by ``BasicAuth``, so repeats skip the queue entirely.

Everything here runs on the event loop's thread; only the checks run on the worker threads
(bcrypt releases the GIL, and the threads run at a somewhat lower scheduling priority than
the rest of the daemon, so scans and the event loop go first when CPUs are short).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

WORKERS = 1
PER_PEER = 2
MAX_WAITING = 16
NICE_INCREMENT = 5  # see _lower_priority


class Verdict(enum.Enum):
    """The outcome of asking for a check, with the HTTP status it is answered with."""

    ALLOWED = 200
    DENIED = 401
    PEER_BUSY = 429  # this client address has too many checks outstanding
    BUSY = 503  # too many checks waiting in all


@dataclass
class QueueStats:
    """Counts of what the queue did (for logs, tests and the soak)."""

    started: int = 0
    peer_refused: int = 0  # 429: the address's limit
    refused: int = 0  # 503: the global limit
    dropped: int = 0  # 503: a waiting check given up for a newcomer from another address


@dataclass(eq=False)
class _Wait:
    peer: str
    user: str
    password: bytes
    future: asyncio.Future[Verdict] = field(repr=False)


def peer_key(host: str) -> str:
    """Return the client address that limits are kept by: the IPv4 address (IPv4-mapped
    IPv6 included), the /64 prefix of an IPv6 address, else ``host`` itself."""
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _lower_priority() -> None:
    """Make the calling thread yield the CPU to the daemon's other threads (Linux: a
    thread's nice value is its own).

    Only a little (+5, about a quarter of the CPU share): the host's other processes run
    at the daemon's priority too, and on a busy host a right password checked at +19 would
    take seconds."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + NICE_INCREMENT))


def check_executor(workers: int = WORKERS) -> ThreadPoolExecutor:
    """Return the thread pool the checks run on, its threads at a lower priority."""
    return ThreadPoolExecutor(workers, thread_name_prefix="numa-web-auth",
                              initializer=_lower_priority)


class CheckQueue:
    """Runs credential checks on ``workers`` threads of ``executor``, bounded and fair.

    ``check(user, password)`` returns whether the credentials are right. Every method is
    called on the event loop's thread.
    """

    def __init__(self, check: Callable[[str, bytes], bool], executor: Executor,
                 workers: int = WORKERS, per_peer: int = PER_PEER,
                 max_waiting: int = MAX_WAITING) -> None:
        self.check = check
        self.executor = executor
        self.workers, self.per_peer, self.max_waiting = workers, per_peer, max_waiting
        self.stats = QueueStats()
        self._waiting: dict[str, deque[_Wait]] = {}  # by address, in order of arrival
        self._outstanding: dict[str, int] = {}  # waiting + running, by address
        self._last_start: dict[str, int] = {}  # while outstanding: when its last check began
        self._n_waiting = 0
        self._running = 0

    @property
    def waiting(self) -> int:
        """Return how many checks wait for a thread."""
        return self._n_waiting

    @property
    def running(self) -> int:
        """Return how many checks run now."""
        return self._running

    async def verify(self, peer: str, user: str, password: bytes) -> Verdict:
        """Return the verdict on the credentials: ALLOWED or DENIED once checked, PEER_BUSY
        or BUSY (at once, or when given up for a newcomer) when the limits are reached."""
        if self._outstanding.get(peer, 0) >= self.per_peer:
            self.stats.peer_refused += 1
            return Verdict.PEER_BUSY
        if (self._running >= self.workers and self._n_waiting >= self.max_waiting
                and not self._make_room(peer)):
            self.stats.refused += 1
            return Verdict.BUSY
        w = _Wait(peer, user, password, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(peer, deque()).append(w)
        self._n_waiting += 1
        self._outstanding[peer] = self._outstanding.get(peer, 0) + 1
        self._dispatch()
        try:
            return await w.future
        except asyncio.CancelledError:
            self._forget(w)
            raise

    def _make_room(self, peer: str) -> bool:
        """Give up the newest waiting check of the address with the most waiting checks,
        when it has more than ``peer`` would have; return whether one was given up."""
        mine = len(self._waiting.get(peer, ())) + 1
        victim = max(self._waiting, key=lambda p: len(self._waiting[p]), default=None)
        if victim is None or victim == peer or len(self._waiting[victim]) <= mine:
            return False
        w = self._waiting[victim].pop()
        self._unwait(w)
        self.stats.dropped += 1
        w.future.set_result(Verdict.BUSY)
        return True

    def _unwait(self, w: _Wait) -> None:
        """Account for a waiting check that leaves without running."""
        if not self._waiting.get(w.peer):
            self._waiting.pop(w.peer, None)
        self._n_waiting -= 1
        self._release(w.peer)

    def _release(self, peer: str) -> None:
        n = self._outstanding.get(peer, 0) - 1
        if n > 0:
            self._outstanding[peer] = n
        else:
            self._outstanding.pop(peer, None)
            self._last_start.pop(peer, None)

    def _forget(self, w: _Wait) -> None:
        """Drop a check whose client went away, when it has not started yet."""
        q = self._waiting.get(w.peer)
        if q is not None and w in q:
            q.remove(w)
            self._unwait(w)

    def _dispatch(self) -> None:
        """Start waiting checks while threads are free: the address whose last check
        started longest ago first (never: first of all), then by arrival."""
        loop = asyncio.get_running_loop()
        while self._running < self.workers and self._waiting:
            peer = min(self._waiting, key=lambda p: self._last_start.get(p, -1))
            q = self._waiting[peer]
            w = q.popleft()
            if not q:
                del self._waiting[peer]
            self._n_waiting -= 1
            self._running += 1
            self.stats.started += 1
            self._last_start[peer] = self.stats.started
            fut = loop.run_in_executor(self.executor, self.check, w.user, w.password)
            fut.add_done_callback(partial(self._done, w))

    def _done(self, w: _Wait, fut: asyncio.Future[bool]) -> None:
        self._running -= 1
        self._release(w.peer)
        if not w.future.done():
            if fut.cancelled():  # the pool was shut down
                w.future.set_result(Verdict.BUSY)
            elif (exc := fut.exception()) is not None:  # a bug: the request fails with 500
                w.future.set_exception(exc)
            else:
                w.future.set_result(Verdict.ALLOWED if fut.result() else Verdict.DENIED)
        self._dispatch()
