"""What a collector module declares: its name, what it covers, its families, how it emits."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from numa_exporter.metrics_spec import MetricSpec
from numa_exporter.model.snapshot import Snapshot

if TYPE_CHECKING:  # config imports the registry for its collector names
    from numa_exporter.config import Config

Emit = Callable[[Snapshot, "Config"], Iterable[Metric]]


@dataclass(frozen=True, slots=True)
class CollectorDef:
    """One collector.

    ``name`` is the ``--[no-]collector.NAME`` flag and the name ``Config.enabled`` takes;
    ``help`` is one line for the flag's help and the README; ``specs`` are every family
    ``emit`` may yield (and nothing else); ``switchable`` is False for collectors that are
    always on and have no flag.
    """

    name: str
    help: str
    specs: tuple[MetricSpec, ...]
    emit: Emit
    switchable: bool = True
