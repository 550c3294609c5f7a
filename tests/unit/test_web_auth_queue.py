"""The credential-check queue: per-address and global bounds, fast refusals, fair order.

The checks run on a hand-cranked executor, so which check starts when is decided by the
queue alone and observed exactly, with no clock involved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from numa_exporter.web.auth_queue import CheckQueue, Verdict, peer_key


class Manual(Executor):
    """Holds every submitted call until ``finish`` runs the oldest one."""

    def __init__(self) -> None:
        self.pending: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self.started: list[tuple[Any, ...]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        self.pending.append((f, fn, args))
        self.started.append(args)
        return f

    def finish(self) -> None:
        f, fn, args = self.pending.pop(0)
        try:
            f.set_result(fn(*args))
        except Exception as exc:
            f.set_exception(exc)


def _right(user: str, password: bytes) -> bool:
    return password == b"right"


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _run(body: Callable[[], Any]) -> Any:
    return asyncio.run(body())


def test_one_address_gets_per_peer_checks_and_fast_refusals_beyond() -> None:
    async def body() -> None:
        ex = Manual()
        q = CheckQueue(_right, ex, workers=1, per_peer=2, max_waiting=16)
        flood = [asyncio.ensure_future(q.verify("a", "u", b"wrong%d" % i)) for i in range(40)]
        await _settle()
        refused = [t for t in flood if t.done()]
        assert len(refused) == 38, "answered before any check finished"
        assert {t.result() for t in refused} == {Verdict.PEER_BUSY}
        assert q.stats.peer_refused == 38 and q.running == 1 and q.waiting == 1
        while ex.pending:
            ex.finish()
            await _settle()
        assert [t.result() for t in flood if t not in refused] == [Verdict.DENIED] * 2
        assert q.running == q.waiting == 0
    _run(body)


def test_a_new_address_goes_before_the_flooding_one() -> None:
    async def body() -> None:
        ex = Manual()
        q = CheckQueue(_right, ex, workers=1, per_peer=2, max_waiting=16)
        flood = [asyncio.ensure_future(q.verify("attacker", "u", b"w%d" % i))
                 for i in range(10)]
        await _settle()
        right = asyncio.ensure_future(q.verify("prometheus", "u", b"right"))
        await _settle()
        assert q.waiting == 2
        ex.finish()  # the attacker's running check
        await _settle()
        assert ex.started[1] == ("u", b"right"), ex.started
        ex.finish()
        await _settle()
        assert right.result() is Verdict.ALLOWED
        assert not flood[1].done(), "the attacker's second check still waits"
        ex.finish()
        await _settle()
        assert flood[1].result() is Verdict.DENIED
    _run(body)


def test_global_bound_and_room_made_for_a_new_address() -> None:
    async def body() -> None:
        ex = Manual()
        q = CheckQueue(_right, ex, workers=1, per_peer=2, max_waiting=4)
        a = [asyncio.ensure_future(q.verify("a", "u", b"a%d" % i)) for i in range(2)]
        b = [asyncio.ensure_future(q.verify("b", "u", b"b%d" % i)) for i in range(2)]
        c = [asyncio.ensure_future(q.verify("c", "u", b"c%d" % i)) for i in range(2)]
        await _settle()
        # a0 runs; a1, b0, b1, c0 wait (4); c1 comes when the queue is full and c has
        # fewer waiting (1 + itself = 2) than no one: refused at once
        assert q.running == 1 and q.waiting == 4
        assert c[1].done() and c[1].result() is Verdict.BUSY and q.stats.refused == 1
        # a newcomer with nothing waiting takes the place of b's newest waiting check
        d = asyncio.ensure_future(q.verify("d", "u", b"right"))
        await _settle()
        assert b[1].done() and b[1].result() is Verdict.BUSY and q.stats.dropped == 1
        assert q.waiting == 4
        # order: a0 (running), then addresses never served, by arrival: b0, c0, d; then a1
        for _ in range(5):
            ex.finish()
            await _settle()
        assert [s[1] for s in ex.started] == [b"a0", b"b0", b"c0", b"right", b"a1"]
        assert d.result() is Verdict.ALLOWED
        assert [t.result() for t in (*a, b[0], c[0])] == [Verdict.DENIED] * 4
        assert q.running == q.waiting == 0
    _run(body)


def test_a_cancelled_waiting_check_never_runs() -> None:
    async def body() -> None:
        ex = Manual()
        q = CheckQueue(_right, ex, workers=1, per_peer=2, max_waiting=16)
        first = asyncio.ensure_future(q.verify("a", "u", b"x"))
        second = asyncio.ensure_future(q.verify("a", "u", b"y"))
        await _settle()
        second.cancel()
        await _settle()
        assert q.waiting == 0
        ex.finish()
        await _settle()
        assert first.result() is Verdict.DENIED and not ex.pending and len(ex.started) == 1
        # the address's count went back to zero: two more are accepted
        more = [asyncio.ensure_future(q.verify("a", "u", b"z")) for _ in range(2)]
        await _settle()
        assert not any(t.done() for t in more)
        while ex.pending:
            ex.finish()
            await _settle()
    _run(body)


def test_a_failing_check_raises_and_frees_its_place() -> None:
    def broken(user: str, password: bytes) -> bool:
        raise RuntimeError("a bug")

    async def body() -> None:
        ex = Manual()
        q = CheckQueue(broken, ex, workers=1, per_peer=1, max_waiting=1)
        t = asyncio.ensure_future(q.verify("a", "u", b"x"))
        await _settle()
        ex.finish()
        await _settle()
        with pytest.raises(RuntimeError):
            t.result()
        assert q.running == q.waiting == 0
        again = asyncio.ensure_future(q.verify("a", "u", b"x"))
        await _settle()
        assert q.running == 1, "per_peer=1: the failed check gave its place back"
        ex.finish()
        await _settle()
        with pytest.raises(RuntimeError):
            again.result()
    _run(body)


@pytest.mark.parametrize(("host", "key"), [
    ("192.0.2.7", "192.0.2.7"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("not an address", "not an address"),
])
def test_peer_key(host: str, key: str) -> None:
    assert peer_key(host) == key
