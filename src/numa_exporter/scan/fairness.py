"""How a scan shares its budget among processes, so that one process cannot starve the rest.

Each read gets its own deadline: the time left in the scan divided among the processes not
read yet (at least ``floor`` seconds, never past the scan's deadline). A process whose read
was given up at its deadline ("stubborn") is read after every other process next scan, and
the one that waited longest among them is read to the end then, without a deadline: progress
is certain for it, and the others were read before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class HasAbandoned(Protocol):
    """What fairness needs to know of a process: how many reads of it were given up."""

    @property
    def abandoned(self) -> int:
        """Return the consecutive reads of the process given up at a deadline."""
        ...


C = TypeVar("C")


def order(cands: Sequence[C], state: Callable[[C], HasAbandoned | None]
          ) -> tuple[list[C], C | None]:
    """Return the candidates in reading order (stubborn ones last, longest waiting first
    among them) and the one to read without a deadline (None when none is stubborn)."""
    normal: list[C] = []
    stubborn: list[tuple[int, int, C]] = []
    for i, c in enumerate(cands):
        st = state(c)
        if st is not None and st.abandoned > 0:
            stubborn.append((-st.abandoned, i, c))
        else:
            normal.append(c)
    stubborn.sort(key=lambda t: (t[0], t[1]))
    last = [c for _, _, c in stubborn]
    return normal + last, (last[0] if last else None)


def read_deadline(now: float, deadline: float, left: int, floor: float) -> float:
    """Return the deadline of one read: its share of the time left among the ``left``
    processes not read yet, at least ``floor`` seconds, never past ``deadline``."""
    share = max((deadline - now) / max(left, 1), floor)
    return min(deadline, now + share)
