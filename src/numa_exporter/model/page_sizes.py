"""How much of a process's largest mappings huge pages back, and what that makes the
longest mmap-lock hold of a full ``numa_maps`` read.

``numa_maps`` walks a mapping's page table under one hold of the mmap lock. For 4 KiB
pages that is one step per page (``gather_pte_stats``: ~8 ms per GiB). A transparent huge
page mapped by a PMD is one step for 2 MiB (the ``pmd_trans_huge`` path of
``gather_pte_stats``), a hugetlb page one step per huge page (``gather_hugetlb_stats``): a
fully THP-backed 4 GiB mapping is walked in 2,048 steps instead of 1,048,576.

A probe (``readers/page_sizes.py``) looks at a few dozen pages of the largest mappings
(pagemap for the frame, kpageflags for its flags) and records, per mapping, how many of
them were huge. :func:`walk_hold` turns that into the estimated hold: the share not seen
huge, made slightly pessimistic (one more probe counted as small, so that all-huge probes
of a mapping still leave ``1 / (probes + 1)`` of it at the 4 KiB rate), walked at the 4 KiB
rate, and the rest at :data:`HUGE_ENTRY_SECONDS` a 2 MiB step. A probe that could not see
page frames (no CAP_SYS_ADMIN) counts its pages as small: the estimate is then what it was
without a probe.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes one step of the walk covers for a huge page (a PMD-mapped THP on x86_64 and
#: arm64 with 4 KiB pages; a hugetlb page is at least this big, so fewer steps).
HUGE_ENTRY_BYTES = 2 << 20
#: CPU seconds of one huge-page step of a numa_maps walk: measured 0.09 us warm and
#: 0.4 us on the first read of a 4 GiB THP mapping (2,048 steps in 0.19-0.82 ms of thread
#: CPU, kernel 6.18, x86_64); 0.25 us keeps a cold walk within 2x.
HUGE_ENTRY_SECONDS = 0.25e-6
#: A probe stands while the resident size stays within this factor of the size it was
#: taken at, and for at most :data:`PROBE_MAX_AGE` seconds (khugepaged collapses pages
#: over time; a split turns huge pages into small ones).
PROBE_STALE_FACTOR = 1.5
PROBE_MAX_AGE = 300.0


@dataclass(frozen=True, slots=True)
class MappingPages:
    """What a probe saw of one mapping: its virtual size, the pages probed and how many of
    them were huge (THP or hugetlb)."""

    size: int
    probes: int
    huge: int

    def small_share(self) -> float:
        """Return the pessimistic share of the mapping taken as 4 KiB pages (0..1)."""
        huge = min(max(self.huge, 0), max(self.probes, 0))
        return (max(self.probes, 0) - huge + 1) / (max(self.probes, 0) + 1)


@dataclass(frozen=True, slots=True)
class PageShape:
    """A probe of one process: its largest mappings as probed, the size of the largest
    mapping it did not probe (0: none), the resident bytes and monotonic time it was taken
    at, and the errors met (pages whose flags could not be read count as small)."""

    mappings: tuple[MappingPages, ...] = ()
    rest: int = 0
    resident: int = 0
    taken: float = 0.0
    errors: int = 0

    def fresh(self, resident: int, now: float) -> bool:
        """Return whether the probe still stands at ``resident`` bytes and time ``now``."""
        if now - self.taken > PROBE_MAX_AGE or now < self.taken:
            return False
        if self.resident <= 0:
            return resident <= 0
        return (self.resident / PROBE_STALE_FACTOR <= resident
                <= self.resident * PROBE_STALE_FACTOR)


def mapping_hold(m: MappingPages, resident: int, seconds_per_byte: float) -> float:
    """Return the estimated walk time (seconds) of one probed mapping: its small share at
    ``seconds_per_byte`` (at most ``resident`` bytes of it), its huge share at
    :data:`HUGE_ENTRY_SECONDS` per :data:`HUGE_ENTRY_BYTES`."""
    size = max(m.size, 0)
    small = m.small_share()
    huge_bytes = min(size * (1.0 - small), float(max(resident, 0)))
    small_bytes = min(size * small, float(max(resident, 0)))
    return small_bytes * seconds_per_byte + huge_bytes / HUGE_ENTRY_BYTES * HUGE_ENTRY_SECONDS


def walk_hold(shape: PageShape, resident: int, seconds_per_byte: float) -> float:
    """Return the estimated longest hold (seconds) of a full read from a probe: the largest
    of the probed mappings' walks and of the largest unprobed mapping walked at the 4 KiB
    rate (each at most ``resident`` bytes)."""
    resident = max(resident, 0)
    rest = min(max(shape.rest, 0), resident) * seconds_per_byte
    return max([rest, *(mapping_hold(m, resident, seconds_per_byte) for m in shape.mappings)])
