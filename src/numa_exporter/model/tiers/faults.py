"""Access-weighted locality from NUMA hinting faults (the ``numa_faults`` lines of ``sched``).

Under NUMA balancing the kernel unmaps ranges of a task's memory now and then and counts the
faults that follow by the node the page lives on, decayed by half every scan sequence
(parsers/pid_sched.py). Those counts sample where a process *accesses* memory, not just
where it sits: a fault-weighted remote share next to the byte ratio tells "placed right,
accessed wrong" apart. It is an estimate: only pages the scanner unmapped are sampled, and
pages under a strict binding or of a task that balancing does not scan are never counted.
A fault that migrates its page is counted on the page's new node (``do_numa_page()``), so
faults read local while balancing moves memory to the process: the share reports accesses
to pages that stay where they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from numa_exporter.parsers.osrelease import KernelRelease
from numa_exporter.parsers.pid_sched import NumaFaultsLine, SchedFaults

SPLIT_FIXED_IN = (4, 19)  # 67d9f6c256cd: task_private/task_shared printed the right way round


@dataclass(frozen=True, slots=True)
class ProcessFaults:
    """A process's decayed task faults per node, summed over the threads read."""

    by_node: Mapping[int, int]
    threads: int

    @property
    def total(self) -> int:
        """Return the faults on every node."""
        return sum(self.by_node.values())


def process_faults(blocks: Iterable[SchedFaults | None]) -> ProcessFaults | None:
    """Return the per-node task faults of a process from its threads' sched blocks.

    ``None`` entries are threads whose sched could not be read (gone, denied): skipped.
    Returns None (absent, not zero) when no thread printed the fault lines (balancing
    compiled out, CONFIG_SCHED_DEBUG off), when any thread shows the refused legacy form, or
    when the threads have taken no fault at all. Group counts are not summed: they are the
    NUMA group's, the same in every thread of it.
    """
    by_node: dict[int, int] = {}
    threads = 0
    for block in blocks:
        if block is None or block.numa_format == "absent":
            continue
        if block.numa_format == "legacy":
            return None
        threads += 1
        for line in block.lines:
            by_node[line.node] = by_node.get(line.node, 0) + line.task_total
    if not threads or not any(by_node.values()):
        return None
    return ProcessFaults(by_node, threads)


def fault_remote_share(faults: ProcessFaults | None, home: frozenset[int]) -> float | None:
    """Return the share (0..1) of a process's faults on pages outside its home nodes.

    None when there are no faults or no home node (nothing is known to be remote).
    """
    if faults is None or not home:
        return None
    total = faults.total
    if total <= 0:
        return None
    outside = sum(n for node, n in faults.by_node.items() if node not in home)
    return outside / total


def task_fault_split(line: NumaFaultsLine, release: KernelRelease | None
                     ) -> tuple[int, int] | None:
    """Return (private, shared) task faults of one line, or None where they may be swapped.

    Kernels before 4.19 printed the two values under each other's labels and the text does
    not show which kind of kernel printed it, so the split is only given for a known release
    of 4.19 or later. Distribution kernels that backported the fix below 4.19 are refused
    too: a missing split is better than a wrong one. The total is right on every kernel.
    """
    if release is None or not release.at_least(*SPLIT_FIXED_IN):
        return None
    return line.task_private, line.task_shared



def thread_fault_remote_share(blocks: Iterable[tuple[SchedFaults | None, int | None]]
                              ) -> float | None:
    """Return the share (0..1) of a process's hinting faults taken by a thread on a node
    other than its own, from (sched fault block, node of its last CPU) per thread.

    A thread's node is the ``current_node`` its block prints, else the node of the CPU it
    last ran on; a thread with neither, or without a block, is skipped. Unlike
    :func:`fault_remote_share` this does not compare summed faults with the union of the
    threads' nodes, which calls every fault local when threads on node 0 touch node 1 and
    the reverse. Returns None under the same conditions as :func:`process_faults` (no
    thread printed the lines, the legacy form, no fault at all).
    """
    remote = total = 0
    for block, cpu_node in blocks:
        if block is None or block.numa_format == "absent":
            continue
        if block.numa_format == "legacy":
            return None
        node = block.current_node if block.current_node is not None else cpu_node
        if node is None:
            continue
        for line in block.lines:
            total += line.task_total
            if line.node != node:
                remote += line.task_total
    if total <= 0:
        return None
    return remote / total
