"""Weighted interleave (MPOL_WEIGHTED_INTERLEAVE, 6.9+): the node weights and how far a
process's observed split of its weighted-interleave pages is from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class InterleaveWeights:
    """The kernel's node weights (node -> 1-255) and its ``auto`` switch (None: absent)."""

    weights: dict[int, int] = field(default_factory=dict)
    auto: bool | None = None


def expected_split(by_mask_node: Mapping[tuple[frozenset[int], int], int],
                   weights: Mapping[int, int]) -> dict[int, float] | None:
    """Return node -> the bytes the weights would put there, or None when a node of some
    policy has no known weight (an unreadable or absent weight file).

    Each policy's bytes are split over the nodes it names in proportion to their weights
    (the kernel hands a weighted-interleave policy's pages out round-robin, ``weight``
    pages to a node at a time).
    """
    per_mask: dict[frozenset[int], int] = {}
    for (mask, _), b in by_mask_node.items():
        per_mask[mask] = per_mask.get(mask, 0) + b
    out: dict[int, float] = {}
    for mask, total in per_mask.items():
        if not mask or any(n not in weights for n in mask):
            return None
        wsum = sum(weights[n] for n in mask)
        for n in mask:
            out[n] = out.get(n, 0.0) + total * weights[n] / wsum
    return out


def weighted_deviation_ratio(by_mask_node: Mapping[tuple[frozenset[int], int], int],
                             weights: Mapping[int, int]) -> float | None:
    """Return the fraction of a process's weighted-interleave bytes that would have to move
    for their split to match the weights: half the L1 distance between the observed and the
    weighted node shares (0: conforms, 1: all elsewhere). None without such bytes or when a
    weight is unknown."""
    total = sum(by_mask_node.values())
    if total <= 0:
        return None
    expected = expected_split(by_mask_node, weights)
    if expected is None:
        return None
    observed: dict[int, int] = {}
    for (_, node), b in by_mask_node.items():
        observed[node] = observed.get(node, 0) + b
    nodes = set(observed) | set(expected)
    l1 = sum(abs(observed.get(n, 0) - expected.get(n, 0.0)) for n in nodes)
    return min(1.0, max(0.0, l1 / (2 * total)))
