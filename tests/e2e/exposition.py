"""Helpers to read and normalise an exposition for golden comparison."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

# Values that depend on timing, not on the input root.
VOLATILE = (
    "numa_exporter_scan_duration_seconds",
    "numa_exporter_last_scan_timestamp_seconds",
    "numa_exporter_scans_total",
    "numa_exporter_process_read_duration_seconds",
    "numa_exporter_collector_duration_seconds",
    "numa_process_read_duration_seconds",
    "numa_process_last_scan_timestamp_seconds",
    "numa_process_next_scan_timestamp_seconds",
    "numa_process_read_cpu_seconds",
    "numa_process_placement_hold_seconds",
    "numa_exporter_scan_stage_seconds",
    "numa_exporter_scrape_bytes",  # the rendered size: the volatile values' digits count
)
_PY = re.compile(r'python_version="[^"]*"')
_VERSION = re.compile(r'(numa_exporter_build_info\{.*)version="[^"]*"')


def normalise(text: str) -> str:
    """Return the numa_* part of an exposition with timing-dependent values masked."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[2].startswith("numa_"):
                out.append(line)
            continue
        if not line.startswith("numa_"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.startswith(VOLATILE):
            line = line.rsplit(" ", 1)[0] + " <volatile>"
        line = _PY.sub('python_version="<any>"', line)
        line = _VERSION.sub(r'\1version="<any>"', line)
        out.append(line)
    return "\n".join(out) + "\n"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Return every sample of an exposition keyed by (name, sorted labels)."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def values(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Return (labels, value) of every sample of ``name`` whose labels include ``labels``."""
    found: list[tuple[dict[str, str], float]] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                found.append((dict(s.labels), s.value))
    return found
