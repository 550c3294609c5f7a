"""Reads ``/sys/kernel/mm/mempolicy/weighted_interleave/`` into the node weights (each scan:
an administrator may change them at any time)."""

from __future__ import annotations

from functools import partial

from numa_exporter.model.weighted_interleave import InterleaveWeights
from numa_exporter.parsers.cpulist import MAX_NODE_ID
from numa_exporter.parsers.weighted_interleave import (
    parse_weighted_interleave_auto,
    parse_weighted_interleave_node,
    weighted_interleave_node_id,
)
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.errors import SourceError
from numa_exporter.sources.sysfs import WeightedInterleaveSysFS


def read_weighted_interleave(src: WeightedInterleaveSysFS, errors: ErrorReporter
                             ) -> InterleaveWeights | None:
    """Return the node weights and the ``auto`` switch; None where the kernel has no weighted
    interleave (before 6.9) or the folder is unreadable (reported). A malformed weight file
    is reported and its node left out."""
    try:
        names = src.names()
    except SourceError as err:
        errors.read(err)
        return None
    if names is None:
        return None
    weights: dict[int, int] = {}
    for name in names:
        node = weighted_interleave_node_id(name)
        if node is None or node > MAX_NODE_ID:
            continue
        w = errors.read_parsed("weighted_interleave", f"{src.root}/{name}",
                               partial(src.read, name), parse_weighted_interleave_node)
        if w is not None:
            weights[node] = w
    auto = (errors.read_parsed("weighted_interleave", f"{src.root}/auto",
                               partial(src.read, "auto"), parse_weighted_interleave_auto)
            if "auto" in names else None)
    return InterleaveWeights(weights, auto)
