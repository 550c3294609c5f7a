"""What the running kernel offers the exporter, detected once at start from the roots (and,
on a live procfs, by asking the kernel without side effects); never inferred from a version
number, since distributions backport and configure features apart from their version.

Each feature is True (offered), False (detected absent: the families and paths that need it
are left out, said once at start) or None (cannot tell, e.g. the ioctls and mbind on a
fixture root: not reported).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.files import read_optional
from numa_exporter.sources.kernel_probe import ioctl_known, mbind_mode_known
from numa_exporter.sources.pagemap_scan import PAGEMAP_SCAN
from numa_exporter.sources.procfs import ProcFS

MPOL_PREFERRED_MANY = 5
#: _IOWR('f', 17, struct procmap_query): 104-byte argument (include/uapi/linux/fs.h)
PROCMAP_QUERY = (3 << 30) | (104 << 16) | (ord("f") << 8) | 17


@dataclass(frozen=True, slots=True)
class Feature:
    """A kernel feature: its name, the kernel that brought it upstream (for the log only;
    never used to decide), and what the exporter does without it."""

    name: str
    upstream: str
    without: str


FEATURES: tuple[Feature, ...] = (
    Feature("memory_tiers", "6.1", "no numa_node_memory_tier, numa_process_tier_memory_bytes"),
    Feature("balancing_tiering", "5.18",
            "no numa_balancing mode 2 (memory tiering); no pgpromote_* counters"),
    Feature("damon_sysfs", "5.18", "--collector.damon says absent (numa_exporter_damon_up 0)"),
    Feature("preferred_many", "5.15", "no MPOL_PREFERRED_MANY policies to meet in numa_maps"),
    Feature("pagemap_scan", "6.7",
            "the sampled reader reads sparse mappings and page sizes from pagemap"),
    Feature("procmap_query", "6.11", "the sampled reader reads the maps text"),
    Feature("weighted_interleave", "6.9", "no numa_node_weighted_interleave_weight"),
    Feature("node_reclaim", "7.1",
            "no numa_node_reclaim_scanned_pages_total, numa_node_reclaimed_pages_total, "
            "numa_node_reclaim_refill_pages_total"),
)
BY_NAME = {f.name: f for f in FEATURES}


def _vmstat_has(data: bytes | None, key: str) -> bool | None:
    return None if data is None else key in parse_vmstat(data).values


def _optional(read: Callable[[], bytes | None]) -> bytes | None:
    try:
        return read()
    except SourceError:
        return None


def detect(proc: ProcFS, sysfs: Path, live: bool | None = None) -> dict[str, bool | None]:
    """Return feature name -> True/False/None (FEATURES order) for the kernel behind the
    roots. ``live`` (default: whether ``proc`` is a live procfs) allows the probes that ask
    the running kernel itself (ioctls on /proc/self files, mbind on a page of our own)."""
    live = proc.is_live() if live is None else live
    vmstat = _optional(lambda: read_optional(proc.root / "vmstat", "vmstat"))
    nodes = sysfs / "devices" / "system" / "node"
    first = sorted(nodes.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))[:1]
    node_vmstat = _optional(lambda: read_optional(first[0] / "vmstat", "node_vmstat")) \
        if first else None
    self_dir = proc.root / "self"
    return {
        "memory_tiers": (sysfs / "devices" / "virtual" / "memory_tiering").is_dir(),
        "balancing_tiering": _vmstat_has(vmstat, "pgpromote_success"),
        "damon_sysfs": (sysfs / "kernel" / "mm" / "damon" / "admin").is_dir(),
        "preferred_many": mbind_mode_known(MPOL_PREFERRED_MANY) if live else None,
        "pagemap_scan": ioctl_known(self_dir / "pagemap", PAGEMAP_SCAN) if live else None,
        "procmap_query": (ioctl_known(self_dir / "maps", PROCMAP_QUERY)
                          if live else None),
        "weighted_interleave": (sysfs / "kernel" / "mm" / "mempolicy"
                                / "weighted_interleave").is_dir(),
        "node_reclaim": _vmstat_has(node_vmstat, "pgscan_kswapd"),
    }


def describe(found: dict[str, bool | None]) -> dict[str, str]:
    """Return the start-up log fields: ``present`` and ``unknown`` (names, comma separated)
    and ``absent`` (each absent feature, the upstream kernel that brought it and what the
    exporter does without it)."""
    absent = [f"{n} ({BY_NAME[n].upstream}+: {BY_NAME[n].without})"
              for n, v in found.items() if v is False]
    return {"present": ",".join(n for n, v in found.items() if v) or "none",
            "absent": "; ".join(absent) or "none",
            "unknown": ",".join(n for n, v in found.items() if v is None) or "none"}


def damon_stat_running(sysfs: Path) -> bool:
    """Return True when the kernel's DAMON_STAT module runs its own kdamond
    (``module/damon_stat/parameters/enabled`` reads Y; Debian's 7.3 turns it on at boot).
    While it runs, no kdamond of the sysfs interface can start: writing ``on`` to a
    kdamond's ``state`` fails (the exporter's write: EBUSY; a shell's echo: EIO; measured on
    Debian's 7.3.4)."""
    try:
        data = read_optional(sysfs / "module" / "damon_stat" / "parameters" / "enabled",
                             "damon_stat")
    except SourceError:
        return False
    return data is not None and data.strip() == b"Y"

