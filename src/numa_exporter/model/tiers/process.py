"""One process's locality beyond bytes-on-home: by accessor, by tier, spans and faults.

Pure: built by ``scan/process.py`` from what the readers gave (per-node bytes, the process's
home, the node classes and tiers of the host, the threads' hinting-fault blocks). The
definitions (local / remote / far, accessors, spans, the fault share) are in
``model/tiers/places.py``, ``model/tiers/faults.py`` and docs/tiers.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from numa_exporter.model.tiers.faults import (
    ProcessFaults,
    fault_remote_share,
    process_faults,
    thread_fault_remote_share,
)
from numa_exporter.model.tiers.host import HostTiers
from numa_exporter.model.tiers.places import (
    PLACES,
    Place,
    amounts_by_tier,
    cpu_span,
    memory_span,
    split_by_place,
)
from numa_exporter.parsers.pid_sched import SchedFaults

Accessor = Literal["cpu", "accelerator"]


@dataclass(frozen=True, slots=True)
class AccessorLocality:
    """A process's resident bytes by place (local / remote / far) for one accessor."""

    accessor: Accessor
    home: frozenset[int]
    bytes: Mapping[Place, int]

    @property
    def total_bytes(self) -> int:
        """Return local + remote + far bytes (the process's placed bytes)."""
        return sum(self.bytes.values())

    def ratio(self, place: Place) -> float:
        """Return the share (0..1) of the bytes at ``place``; 0 without resident bytes."""
        total = self.total_bytes
        return self.bytes.get(place, 0) / total if total else 0.0


@dataclass(frozen=True, slots=True)
class ProcessTiers:
    """A process's locality by accessor, bytes by tier, spans and hinting faults.

    ``accessors`` holds the ``cpu`` view always and an ``accelerator`` view for a process
    using an accelerator whose memory is a node. ``faults`` is None when the process took
    no hinting fault the kernel shows (absent, not zero); ``fault_remote_share`` is None
    then and when the ``cpu`` accessor has no home.
    """

    accessors: tuple[AccessorLocality, ...]
    bytes_by_tier: Mapping[int, int]
    untiered_bytes: int
    cpu_span: int | None
    memory_span: int | None
    faults: ProcessFaults | None = None
    fault_remote_share: float | None = None
    # the share of faults a thread took off its own node (model.tiers.faults)
    thread_fault_remote_share: float | None = None

    def accessor(self, name: Accessor) -> AccessorLocality | None:
        """Return the view of accessor ``name``, None when the process has none."""
        for a in self.accessors:
            if a.accessor == name:
                return a
        return None


def accelerator_home(used: Iterable[str], memory: Mapping[str, frozenset[int]]
                     ) -> frozenset[int]:
    """Return the memory nodes of the accelerators (PCI addresses) a process uses."""
    out: frozenset[int] = frozenset()
    for addr in used:
        out |= memory.get(addr.lower(), frozenset())
    return out


def process_tiers(node_bytes: Mapping[int, int], cpu_home: frozenset[int], host: HostTiers,
                  accelerators_used: Iterable[str],
                  cpus_allowed: frozenset[int] | None, mems_allowed: frozenset[int] | None,
                  fault_blocks: Iterable[SchedFaults | None],
                  thread_blocks: Iterable[tuple[SchedFaults | None, int | None]] = ()
                  ) -> ProcessTiers:
    """Return the process's :class:`ProcessTiers`.

    ``cpu_home`` is the home of the byte ratio (it holds no CPU-less node); the fault share
    is taken against the same nodes. ``fault_blocks`` are the threads' sched fault blocks
    (None for a thread whose sched was not read); ``thread_blocks`` the same with the node
    each thread runs on, for the per-thread share.
    """
    views = [AccessorLocality("cpu", cpu_home,
                              split_by_place(node_bytes, cpu_home, host.cpu_nodes,
                                             host.tier_of))]
    accel = accelerator_home(accelerators_used, host.accelerator_memory)
    if accel:
        views.append(AccessorLocality("accelerator", accel,
                                      split_by_place(node_bytes, accel, host.cpu_nodes,
                                                     host.tier_of)))
    by_tier, untiered = amounts_by_tier(node_bytes, host.tier_of)
    faults = process_faults(fault_blocks)
    return ProcessTiers(
        accessors=tuple(views),
        bytes_by_tier=by_tier,
        untiered_bytes=untiered,
        cpu_span=cpu_span(cpus_allowed, host.node_cpus),
        memory_span=memory_span(mems_allowed, host.memory_nodes),
        faults=faults,
        fault_remote_share=fault_remote_share(faults, cpu_home),
        thread_fault_remote_share=(thread_fault_remote_share(thread_blocks)
                                   if faults is not None else None),
    )


__all__ = ["PLACES", "AccessorLocality", "ProcessTiers", "accelerator_home", "process_tiers"]
