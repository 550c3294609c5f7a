"""The per-node reclaim counters of ``node<N>/vmstat`` (Linux 7.1+: ``pgscan_*``,
``pgsteal_*`` and ``pgrefill`` became node statistics; before, only ``/proc/vmstat`` had them).

One read of each node's vmstat serves both this and the tiers collector's promotion and
demotion counters (readers/tiers.py, ``NODE_VMSTAT_PREFIXES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from numa_exporter.model.topology import Topology
from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.sysfs import NodeSysFS

#: who reclaimed: the suffix of pgscan_<reclaimer> / pgsteal_<reclaimer>
RECLAIMERS = ("kswapd", "direct", "khugepaged", "proactive")
SCANNED = {f"pgscan_{r}": r for r in RECLAIMERS}
RECLAIMED = {f"pgsteal_{r}": r for r in RECLAIMERS}
REFILL = "pgrefill"
FIELDS = frozenset(SCANNED) | frozenset(RECLAIMED) | {REFILL}


def read_node_vmstat_values(nodes: NodeSysFS, topology: Topology, errors: ErrorReporter
                            ) -> dict[int, dict[str, int]]:
    """Return node -> every counter of its ``node<N>/vmstat`` (nodes unreadable left out,
    their error counted)."""
    out: dict[int, dict[str, int]] = {}
    if not topology.numa:
        return out
    for node in topology.nodes:
        got = errors.read_parsed("node_vmstat", f"{nodes.root}/node{node}/vmstat",
                                 partial(nodes.vmstat, node), parse_vmstat)
        if got is not None:
            out[node] = dict(got.values)
    return out


def reclaim_counters(values: Mapping[int, Mapping[str, int]]) -> dict[int, dict[str, int]]:
    """Return node -> its reclaim counters (FIELDS) of the node vmstat ``values``; nodes
    without any left out."""
    out = {node: {k: v for k, v in fields.items() if k in FIELDS}
           for node, fields in values.items()}
    return {node: fields for node, fields in out.items() if fields}
