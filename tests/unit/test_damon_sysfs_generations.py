"""DAMON's sysfs interface on Debian's 6.12 and 7.3 (tests/fixtures/damon_sysfs): nothing the
exporter's driver (sources/damon.py) writes or reads changed shape by 7.3 (issue 35).

The paths below are the driver's, written out by hand from its writes and reads; the trees
are the kernels' own listings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TREES = Path(__file__).resolve().parents[1] / "fixtures" / "damon_sysfs"
K = "./kdamonds/"
CTX = K + "0/contexts/0/"
#: every file the driver writes or reads under admin/ for slot 0 (vaddr and paddr)
DRIVER_PATHS = (
    K + "nr_kdamonds", K + "0/state", K + "0/pid", K + "0/contexts/nr_contexts",
    CTX + "operations", CTX + "avail_operations",
    CTX + "monitoring_attrs/intervals/sample_us", CTX + "monitoring_attrs/intervals/aggr_us",
    CTX + "monitoring_attrs/intervals/update_us", CTX + "monitoring_attrs/nr_regions/min",
    CTX + "monitoring_attrs/nr_regions/max", CTX + "targets/nr_targets",
    CTX + "targets/0/pid_target", CTX + "targets/0/regions/nr_regions",
    CTX + "targets/0/regions/0/start", CTX + "targets/0/regions/0/end",
    CTX + "schemes/nr_schemes", CTX + "schemes/0/action",
    *(CTX + f"schemes/0/access_pattern/{a}/{m}" for a in ("sz", "nr_accesses", "age")
      for m in ("min", "max")),
    CTX + "schemes/0/tried_regions", CTX + "schemes/0/tried_regions/total_bytes",
)


def _tree(generation: str) -> set[str]:
    return set((TREES / f"{generation}.txt").read_text().split())


@pytest.mark.parametrize("generation", ["6.12", "7.3"])
def test_every_path_the_driver_uses_is_there(generation: str) -> None:
    missing = [p for p in DRIVER_PATHS if p not in _tree(generation)]
    assert not missing, (generation, missing)


#: what the driver's cgroup schemes (--collector.damon.cgroups) write and read besides: the
#: per-filter bytes it detects them by, and one memcg filter in ops_filters (a region's
#: sz_filter_passed is read from tried regions, which neither capture holds)
CGROUP_PATHS = (
    CTX + "schemes/0/stats/sz_ops_filter_passed", CTX + "schemes/0/ops_filters/nr_filters",
    *(CTX + f"schemes/0/ops_filters/0/{f}" for f in ("type", "memcg_path", "matching",
                                                      "allow")),
)


def test_73_only_adds_to_612() -> None:
    """7.3 removes nothing of 6.12's tree; of what it adds (intervals goals, core and ops
    filters, per-scheme sz_ops_filter_passed, ...) the driver needs only its cgroup schemes'
    files, and 6.12 lacks the file they are detected by."""
    old, new = _tree("6.12"), _tree("7.3")
    assert old <= new, sorted(old - new)
    assert CTX + "schemes/0/stats/sz_ops_filter_passed" in new - old
    assert [p for p in CGROUP_PATHS if p not in new] == []
    assert CGROUP_PATHS[0] not in old  # 6.12: cgroups unsupported, said and counted
