"""What a collector module declares: its name, what it covers, its families, how it emits."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import Metric

from numa_exporter.collectors.spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

Emit = Callable[[Snapshot], Iterable[Metric]]


@dataclass(frozen=True, slots=True)
class CollectorDef:
    """One collector.

    ``name`` is the ``--[no-]collector.NAME`` flag and the name ``Config.enabled`` takes;
    ``help`` is one line for the flag's help and the README; ``specs`` are every family
    ``emit`` may yield (and nothing else); ``switchable`` is False for collectors that are
    always on and have no flag; ``default_on`` is False for the one collector its flag
    must turn on (``damon``: it writes to DAMON's sysfs).
    """

    name: str
    help: str
    specs: tuple[MetricSpec, ...]
    emit: Emit
    switchable: bool = True
    default_on: bool = True
