"""Memory tiers and access locality, one feature (docs/tiers.md): ``places`` (node classes,
memory tiers, the local / remote / far split of per-node amounts, spans), ``faults``
(access-weighted locality from NUMA hinting faults), ``process`` (one process's view: locality
per accessor, bytes by tier, spans, faults) and ``host`` (the host's classes, tiers, HMAT
and release as one value, and what a process's view needs of it). Pure values and arithmetic.
"""
