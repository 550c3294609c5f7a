"""The exporter's own detection of kernel features against the harness's, on every kernel
generation (issue 35): what the exporter says once at start and exports as
``numa_exporter_kernel_feature_available`` equals what a separate probe found in a guest of
the same kernel image (guest.kernel_features: sysfs folders, a write of numa_balancing=2,
set_mempolicy(MPOL_PREFERRED_MANY), the ioctls; none of it the exporter's code).
"""

from __future__ import annotations

import json

import pytest

from . import guest as harness
from .results import Exposition, ScenarioRun

pytestmark = pytest.mark.realkernel

#: exporter feature -> the harness's name for it
HARNESS_NAME = {"memory_tiers": "memory_tiers", "balancing_tiering": "balancing_mode_2",
                "damon_sysfs": "damon_sysfs", "preferred_many": "mpol_preferred_many",
                "pagemap_scan": "pagemap_scan", "procmap_query": "procmap_query",
                "weighted_interleave": "weighted_interleave",
                "node_reclaim": "node_reclaim_counters"}


@pytest.mark.parametrize("scenario", ["membind_remote"])
def test_features_said_once_and_exported_as_the_guest_has_them(run: ScenarioRun,
                                                               scenario: str,
                                                               kernel: str) -> None:
    want = harness.kernel_features(harness.ensure_assets(kernel))
    e: Exposition = run.scrape(0)
    got = {lab["feature"]: v for lab, v in e.select("numa_exporter_kernel_feature_available")}
    assert got == {f: float(bool(want[h])) for f, h in HARNESS_NAME.items()}, (kernel, got)
    log = (run.path / "exporter.log").read_text(errors="replace")
    lines = [json.loads(line) for line in log.splitlines() if '"kernel features"' in line]
    assert len(lines) == 1, lines  # said once, at start
    absent = lines[0]["absent"]
    for f, h in HARNESS_NAME.items():
        assert (f"{f} (" in absent) == (not want[h]), (f, absent)
