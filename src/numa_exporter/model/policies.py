"""Memory policies of a process between the full reads that show them.

Only ``numa_maps`` prints memory policies (per mapping, the task's own policy where a
mapping has none), and reading it walks the page tables. A process the cadence samples
(``model/cadence.py``) is therefore read in full for its policies at discovery and again
every policy interval, or once its resident size moved by half, where that read's lock hold
is estimated within the policy hold budget (the planner's ``policy`` reason). Between those
reads, the policies of the last full read stand for the process's current bytes: each
policy's share of the bytes that read placed, applied to the bytes placed now.

Where no full read is known, or the last one is too old (two policy intervals) or was made
at a resident size that has moved by half since, the policies are unknown: no policy bytes
are exported and no verdict that rests on them is given (``model/binding.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from numa_exporter.model.cadence import STALE_FACTOR

#: A policy view stands for this many policy intervals: a read due after one interval that
#: cannot be made (abandoned at a deadline, or its hold now over the budget) leaves the
#: last policies exported for one more interval.
VALID_INTERVALS = 2.0


@dataclass(frozen=True, slots=True)
class PolicyView:
    """Memory policies as one full read saw them.

    ``policy_bytes`` and ``policy_nodes`` as ``NumaMaps`` has them, ``off_policy_bytes``
    the bytes found off their bind policy's nodes, ``placed`` the resident bytes that read
    placed on nodes, ``resident`` VmRSS + HugetlbPages then, ``taken`` monotonic seconds.
    """

    policy_bytes: Mapping[str, int]
    policy_nodes: Mapping[tuple[str, frozenset[int]], int]
    off_policy_bytes: int
    placed: int
    resident: int
    taken: float


@dataclass(frozen=True, slots=True)
class Policies:
    """The policies a sample carries: bytes per policy label, per (label, nodes), and the
    bytes off their bind policy's nodes."""

    policy_bytes: dict[str, int]
    policy_nodes: dict[tuple[str, frozenset[int]], int]
    off_policy_bytes: int


def _stands(resident: int, then: int) -> bool:
    """Return whether a view taken at ``then`` resident bytes stands at ``resident``."""
    if then <= 0:
        return resident <= 0
    return then / STALE_FACTOR <= resident <= then * STALE_FACTOR


def policies_due(view: PolicyView | None, now: float, resident: int,
                 interval: float) -> bool:
    """Return whether a full read for policies is due: none was made, the last is
    ``interval`` seconds old or older, or the resident size has moved by half since (never
    with ``interval`` 0: policy reads off)."""
    if interval <= 0:
        return False
    return (view is None or now - view.taken >= interval
            or not _stands(resident, view.resident))


def current(view: PolicyView | None, now: float, resident: int,
            interval: float) -> PolicyView | None:
    """Return ``view`` where it still stands for a sampled process (made less than
    :data:`VALID_INTERVALS` intervals ago, at a resident size within the stale factor of
    ``resident``), else None: policies unknown. With ``interval`` 0 (policy reads off) a
    view never stands."""
    if view is None or interval <= 0 or now - view.taken >= VALID_INTERVALS * interval:
        return None
    return view if _stands(resident, view.resident) else None


def scaled(view: PolicyView, placed: int) -> Policies:
    """Return the view's policies applied to ``placed`` bytes placed now: each count times
    ``placed`` over the bytes the view's read placed (its shares, which the binding
    verdicts rest on, unchanged)."""
    if view.placed <= 0:
        return Policies({}, {}, 0)
    f = max(placed, 0) / view.placed
    return Policies({k: round(b * f) for k, b in view.policy_bytes.items()},
                    {k: round(b * f) for k, b in view.policy_nodes.items()},
                    round(view.off_policy_bytes * f))
