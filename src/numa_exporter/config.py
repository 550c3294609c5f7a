"""Run-time configuration: one frozen value built from flags (and the optional config file)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from numa_exporter.roots import Roots

DEFAULT_PORT = 10061
COLLECTORS = ("process", "vmstat", "node", "balancing", "binding", "drift", "cgroup",
              "accelerator")
DEFAULT_DISABLED: frozenset[str] = frozenset()

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)B?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def parse_size(text: str) -> int:
    """Return bytes for ``64MiB``, ``1G``, ``512k``, ``4096`` (binary multiples).

    Raises ValueError for anything else.
    """
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 0, 4096, 64MiB, 1GiB)")
    num, unit, _ = m.groups()
    power = " KMGTP".index(unit.upper()) if unit else 0
    return int(float(num) * (1024**power))


def parse_duration(text: str) -> float:
    """Return seconds for ``15s``, ``500ms``, ``1m30s``, ``2h`` or a bare number of seconds."""
    t = text.strip()
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if v < 0:
            raise ValueError(f"negative duration: {text!r}")
        return v
    pos = 0
    total = 0.0
    for m in _DURATION.finditer(t):
        if m.start() != pos:
            break
        pos = m.end()
        total += float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if pos != len(t) or not t:
        raise ValueError(f"not a duration: {text!r} (examples: 15s, 500ms, 1m)")
    return total


@dataclass(frozen=True, slots=True)
class HomePin:
    """Config-file rule: processes whose comm or cmdline matches get these home nodes."""

    match: re.Pattern[str]
    nodes: frozenset[int]


@dataclass(frozen=True, slots=True)
class AcceleratorPin:
    """Config-file rule: processes matching use these accelerator PCI addresses."""

    match: re.Pattern[str]
    pci_addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the daemon needs to run."""

    roots: Roots = field(default_factory=Roots)
    listen_address: str = f":{DEFAULT_PORT}"
    telemetry_path: str = "/metrics"
    scan_interval: float = 15.0
    scan_budget: float = 10.0
    min_resident: int = 64 << 20
    top: int = 200
    include: re.Pattern[str] | None = None
    exclude: re.Pattern[str] | None = None
    collectors: frozenset[str] = frozenset(COLLECTORS)
    log_level: str = "info"
    log_format: str = "logfmt"
    home_pins: tuple[HomePin, ...] = ()
    accelerator_pins: tuple[AcceleratorPin, ...] = ()
    accelerator_rdma: bool = False
    accelerator_records: Path | None = None
    warmup_age: float = 300.0
    warmup_scans: int = 4
    warmup_rss_tolerance: float = 0.05
    web: object = None  # numa_exporter.web.WebSettings (the HTTP layer's flags)

    def enabled(self, collector: str) -> bool:
        """Return whether a collector is on."""
        return collector in self.collectors
