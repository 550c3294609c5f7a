"""A process that renames itself costs O(1) new series per rename in a real Prometheus
(issue 15 #9): comm is on numa_process_info alone. Before, every per-process family carried
comm, and each rename seen minted ~23 series (tools/rename_churn.py measures both)."""

from __future__ import annotations

import pytest
from tools.rename_churn import measure

from .helpers import exporter_available, missing, require_tool

pytestmark = [pytest.mark.prometheus, pytest.mark.e2e]


def test_a_rename_mints_about_one_series() -> None:
    prometheus = require_tool("prometheus")
    if not exporter_available():
        missing("the numa-exporter command (pip install -e .)")
    r = measure(20.0, prometheus=prometheus)
    assert r.names_after - r.names_before >= 5, r  # renames were seen
    # one numa_process_info series per name, nothing else (the old exporter: ~23)
    assert r.series_per_rename <= 1.5, r
