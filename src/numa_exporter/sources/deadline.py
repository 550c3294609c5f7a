"""When a read is given up: the one deadline every long read of a scan is handed.

A :class:`Deadline` is a point on a monotonic clock and, optionally, the exporter's stop
event; ``expired()`` says whether either has passed, ``check()`` raises :class:`Expired`
when it has. Every read that can run long (numa_maps, the threads of a process, its open
files, the sampled reader's page queries, the page-size probe) takes one under the name
``deadline`` and checks it between its chunks; whatever it had read by then travels in the
exception's ``partial`` (the threads pass resumes from it), so there is one way to stop and
one way to say what was done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass


class Expired(Exception):
    """A read given up at its deadline (or because the exporter is stopping).

    ``partial`` is what the read had by then, for the caller to keep (None: nothing to keep).
    """

    def __init__(self, where: str = "", partial: object = None) -> None:
        super().__init__(f"{where}: given up at the deadline" if where else
                         "given up at the deadline")
        self.partial = partial


@dataclass(frozen=True, slots=True)
class Deadline:
    """A monotonic time past which reads give up (None: none), and an event that ends them
    at once (the exporter stopping)."""

    at: float | None = None
    stop: threading.Event | None = None
    clock: Callable[[], float] = time.monotonic

    def expired(self) -> bool:
        """Return whether the deadline has passed or the stop event is set."""
        if self.stop is not None and self.stop.is_set():
            return True
        return self.at is not None and self.clock() >= self.at

    def check(self, where: str = "", partial: object = None) -> None:
        """Return nothing while time is left; raise :class:`Expired` (carrying ``partial``)
        once it is not."""
        if self.expired():
            raise Expired(where, partial)

    def each(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Return ``chunks`` checked before each one: a long read stops at the chunk where
        the deadline passed (raises :class:`Expired`)."""
        if self.at is None and self.stop is None:
            yield from chunks
            return
        it = iter(chunks)
        while True:
            self.check()
            chunk = next(it, None)
            if chunk is None:
                return
            yield chunk


#: No deadline: the read runs to its end.
NEVER = Deadline()
