"""The process's CPU binding as intended, and the threads that escaped it.

Pure: built from what the readers gave (each thread's allowed CPUs and last CPU, the
config pin, the kubelet's assignment, the cgroup's effective CPUs) and the topology.

**The binding** is the narrowest intent known, tried in :data:`ORDER`: the config file's
home pin (the CPUs of its nodes), the kubelet's assignment (its exclusive CPUs, else the
CPUs of its Memory Manager nodes), the cgroup's ``cpuset.cpus.effective`` and the main
thread's mask. A candidate counts only when it restricts (names fewer CPUs than the online
ones); of those the one with the fewest CPUs wins, ties going to the earlier source.

The main thread's mask is taken as intent with the threads that pinned themselves: a thread
whose mask does not hold the main thread's whole mask was placed on its own (one thread per
node, one per core) and its CPUs belong to the binding; a thread whose mask is *wider* than
the main thread's (holds all of it and more) kept the mask it had before the process bound
itself (a late bind: ``sched_setaffinity`` on the main thread after the threads were
created changes no other thread) and is not part of it.

**A thread outside the binding** is one whose allowed CPUs are not all in the binding's.
Only counts are exported; ``inspect`` lists the thread ids and masks.

**A thread's node** is the node of the CPU it last ran on while that CPU is still in its
mask; a sleeping thread whose mask was changed (``taskset -a -p``) keeps showing its old
CPU until it runs, so it is then placed on its mask's node when the mask names one node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ORDER = ("config", "kubelet", "cpuset", "main_thread")


@dataclass(frozen=True, slots=True)
class ThreadCpus:
    """One thread's allowed CPUs (None: unknown) and the CPU it last ran on."""

    tid: int
    allowed: frozenset[int] | None
    last_cpu: int | None


@dataclass(frozen=True, slots=True)
class Intent:
    """The CPUs a process is meant to run on and the source that says so."""

    cpus: frozenset[int]
    source: str


@dataclass(frozen=True, slots=True)
class ThreadAudit:
    """The binding (None: nothing restricts the process), its nodes, and the threads whose
    mask reaches outside it as (tid, allowed CPUs), by tid."""

    binding: Intent | None
    nodes: frozenset[int]
    escaped: tuple[tuple[int, frozenset[int]], ...]

    @property
    def outside(self) -> int:
        """Return the number of threads outside the binding."""
        return len(self.escaped)


NO_AUDIT = ThreadAudit(None, frozenset(), ())


def main_thread_intent(main: frozenset[int] | None,
                       masks: Mapping[int, frozenset[int] | None]) -> frozenset[int] | None:
    """Return the CPUs the main thread's mask means for the process: its own plus those
    of every thread pinned on its own (a mask that does not hold all of the main
    thread's); threads with a wider mask are left out. None when the main mask is unknown
    or empty."""
    if not main:
        return None
    cpus = set(main)
    for mask in masks.values():
        if mask and not mask >= main:
            cpus |= mask
    return frozenset(cpus)


def narrowest(candidates: Mapping[str, frozenset[int] | None],
              online: frozenset[int]) -> Intent | None:
    """Return the candidate with the fewest CPUs among those that restrict (a non-empty
    set of fewer CPUs than ``online``, where ``online`` is known), ties to the earlier
    source in :data:`ORDER`; None when none restricts."""
    best: Intent | None = None
    for source in ORDER:
        cpus = candidates.get(source)
        if not cpus:
            continue
        if online:
            cpus = cpus & online
            if not cpus or cpus >= online:
                continue
        if best is None or len(cpus) < len(best.cpus):
            best = Intent(frozenset(cpus), source)
    return best


def node_cpus(nodes: frozenset[int] | None, node_of_cpu: Mapping[int, int]
              ) -> frozenset[int] | None:
    """Return the CPUs of ``nodes`` (None when ``nodes`` is None or has no CPU)."""
    if not nodes:
        return None
    cpus = frozenset(c for c, n in node_of_cpu.items() if n in nodes)
    return cpus or None


def audit(threads: Mapping[int, ThreadCpus], main_tid: int,
          node_of_cpu: Mapping[int, int], *,
          config_nodes: frozenset[int] | None = None,
          kubelet_cpus: frozenset[int] | None = None,
          cpuset_cpus: frozenset[int] | None = None) -> ThreadAudit:
    """Return the process's binding and the threads outside it.

    ``threads`` by tid; ``main_tid`` is the process's id (its main thread; when it has
    exited, the lowest tid read stands in). ``node_of_cpu`` is the topology's map, whose
    keys are the online CPUs.
    """
    if not threads:
        return NO_AUDIT
    main = threads.get(main_tid) or threads[min(threads)]
    masks = {tid: t.allowed for tid, t in threads.items()}
    online = frozenset(node_of_cpu)
    binding = narrowest({
        "config": node_cpus(config_nodes, node_of_cpu),
        "kubelet": kubelet_cpus,
        "cpuset": cpuset_cpus,
        "main_thread": main_thread_intent(main.allowed, masks),
    }, online)
    if binding is None:
        return NO_AUDIT
    nodes = frozenset(node_of_cpu[c] for c in binding.cpus if c in node_of_cpu)
    escaped = tuple((tid, mask) for tid, mask in sorted(masks.items())
                    if mask and not mask <= binding.cpus)
    return ThreadAudit(binding, nodes, escaped)


def thread_node(t: ThreadCpus, node_of_cpu: Mapping[int, int]) -> int | None:
    """Return the node thread ``t`` runs on: its last CPU's while that CPU is in its mask,
    else the one node its mask names, else its last CPU's node (None: unknown)."""
    last = node_of_cpu.get(t.last_cpu) if t.last_cpu is not None else None
    if t.allowed is None or (t.last_cpu is not None and t.last_cpu in t.allowed):
        return last
    nodes = {node_of_cpu[c] for c in t.allowed if c in node_of_cpu}
    if len(nodes) == 1:
        return nodes.pop()
    return last
