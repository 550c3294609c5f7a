"""Collector ``accelerator``: accelerators and their nodes, and which processes use them."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.parsers.text import label_text

from .base import CollectorDef
from .families import family

DEVICE = MetricSpec(
    "numa_accelerator_info", "info",
    "Always 1; an accelerator PCI device found through udev and its NUMA node (-1: the "
    "firmware does not say).",
    ("device", "pci_address", "vendor", "driver", "node"), bounds=(("device", 8), ("node", 1)))
PROCESS_DEVICE = MetricSpec(
    "numa_process_accelerator_info", "info",
    "Always 1; an accelerator device the process has open and that device's NUMA node "
    "(-1: unknown).",
    ("pid", "device", "node"), bounds=(("device", 8), ("node", 1)))  # a host's GPUs

SPECS = (DEVICE, PROCESS_DEVICE)


def emit(snap: Snapshot) -> Iterator[Metric]:
    """Yield the machine's accelerators and the processes' accelerator uses."""
    f = family(DEVICE)
    for a in snap.accelerators:
        f.add_metric([*map(label_text, (a.device, a.pci_address, a.vendor, a.driver)),
                      str(a.node)], 1)
    pf = family(PROCESS_DEVICE)
    for p in snap.processes:
        for u in p.accelerators:
            pf.add_metric([str(p.pid), label_text(u.device), str(u.node)], 1)
    yield from (f, pf)


COLLECTOR = CollectorDef(
    "accelerator", "accelerators from udev and the processes using them", SPECS, emit)
