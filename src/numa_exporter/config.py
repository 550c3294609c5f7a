"""Run-time configuration: one frozen value built from flags (and the optional config file)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

from numa_exporter.collectors.registry import COLLECTORS as COLLECTORS
from numa_exporter.patterns import Pattern
from numa_exporter.roots import Roots

DEFAULT_PORT = 10061
MAX_SIZE = 1 << 60  # bytes; far above any machine's memory
MAX_DURATION = 366 * 86400.0  # seconds; longer waits overflow the OS timers
_MAX_TEXT = 64  # characters of a size or duration flag value

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)B?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


def parse_size(text: str) -> int:
    """Return bytes for ``64MiB``, ``1G``, ``512k``, ``4096`` (binary multiples).

    Raises ValueError for anything else.
    """
    m = _SIZE.match(text) if len(text) <= _MAX_TEXT else None
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 0, 4096, 64MiB, 1GiB)")
    num, unit, _ = m.groups()
    power = " KMGTP".index(unit.upper()) if unit else 0
    value = int(Decimal(num) * (1024**power))
    if value > MAX_SIZE:
        raise ValueError(f"size too large: {text!r} (at most {MAX_SIZE >> 50}PiB)")
    return value


def parse_duration(text: str) -> float:
    """Return seconds for ``15s``, ``500ms``, ``1m30s``, ``2h`` or a bare number of seconds.

    The result is finite and at most MAX_DURATION; raises ValueError for anything else
    (``inf``, ``nan``, ``1e309``, negative values).
    """
    t = text.strip()
    if len(t) > _MAX_TEXT:
        raise ValueError(f"not a duration: {text[:_MAX_TEXT]!r}... (examples: 15s, 500ms, 1m)")
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        return _bounded(v, text)
    pos = 0
    total = Decimal(0)
    for m in _DURATION.finditer(t):
        if m.start() != pos:
            break
        pos = m.end()
        try:
            total += Decimal(m.group(1)) * _UNITS[m.group(2)]
        except InvalidOperation:
            break
    if pos != len(t) or not t:
        raise ValueError(f"not a duration: {text!r} (examples: 15s, 500ms, 1m)")
    return _bounded(float(total), text)


def _bounded(v: float, text: str) -> float:
    if not math.isfinite(v):
        raise ValueError(f"not a finite duration: {text!r} (examples: 15s, 500ms, 1m)")
    if v < 0:
        raise ValueError(f"negative duration: {text!r}")
    if v > MAX_DURATION:
        raise ValueError(f"duration too long: {text!r} (at most 366 days)")
    return v


@dataclass(frozen=True, slots=True)
class HomePin:
    """Config-file rule: processes whose comm or cmdline matches get these home nodes."""

    match: Pattern
    nodes: frozenset[int]


@dataclass(frozen=True, slots=True)
class AcceleratorPin:
    """Config-file rule: processes matching use these accelerator PCI addresses."""

    match: Pattern
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
    include: Pattern | None = None
    exclude: Pattern | None = None
    collectors: frozenset[str] = frozenset(COLLECTORS)
    log_level: str = "info"
    log_format: str = "logfmt"
    home_pins: tuple[HomePin, ...] = ()
    accelerator_pins: tuple[AcceleratorPin, ...] = ()
    accelerator_rdma: bool = False
    accelerator_records: Path | None = None
    config_file: Path | None = None
    warmup_age: float = 300.0
    warmup_scans: int = 4
    warmup_rss_tolerance: float = 0.05
    sample_above: float = 0.005  # estimated full-read seconds above which placement is sampled
    full_interval: float = 0.0  # exact full reads of sampled processes this often (0: never)
    process_budget: float = 0.5  # average full-read seconds one process may cost per scan
    web: object = None  # numa_exporter.web.WebSettings (the HTTP layer's flags)

    def enabled(self, collector: str) -> bool:
        """Return whether a collector is on; KeyError for a name no collector has."""
        if collector not in COLLECTORS:
            raise KeyError(f"no collector named {collector!r} (known: {', '.join(COLLECTORS)})")
        return collector in self.collectors
