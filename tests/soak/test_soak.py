"""A bounded soak of the real daemon on this machine's /proc (``python -m tools.soak``).

Process and thread churn, concurrent scrapes and hostile clients for ~30 s: no scrape may
fail, no live worker may be missing from a scrape, no counter may fall. Longer on demand:
``python -m tools.soak --duration 600``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import exporter_command
from tools.soak import Report, Soak

pytestmark = pytest.mark.e2e
DURATION = 30.0

CHECKS = ("accept_header_flood", "auth_flood", "disconnect_mid_response", "garbage_requests",
          "http09_request", "idle_connections", "slow_reader")
# hostile local rounds (tools/soak_rounds.py)
LOCAL_ROUNDS = ("log_write_failure", "signal_storm", "colliding_cgroups", "zombie_leader",
                "renaming_process", "exec_in_place", "damon_foreign_run_dir",
                "damon_restarting_target")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    log = tmp_path_factory.mktemp("soak") / "daemon.log"
    soak = Soak(DURATION, exporter_command())
    r = soak.run(log)
    print("\n" + r.table() + f"\ndaemon log: {log}")
    yield r


def test_no_failed_scrape_stale_series_or_falling_counter(report: Report) -> None:
    assert report.daemon_alive
    assert report.scans >= DURATION / 2 and report.scrapes >= 100, report.table()
    assert report.workers_killed >= 5, report.table()  # churn happened
    assert report.failed_scrapes == 0, report.table()
    assert report.stale_series == 0, report.table()
    assert report.counters_backwards == 0, report.table()
    assert report.counter_series > 10, report.table()  # the counters were followed
    assert report.ok


@pytest.mark.parametrize("name", CHECKS)
def test_hostile_client_check(report: Report, name: str) -> None:
    got = {h.name: h for h in report.hostile}
    assert name in got, sorted(got)
    assert got[name].passed, got[name].detail


@pytest.mark.parametrize("name", LOCAL_ROUNDS)
def test_hostile_local_round(report: Report, name: str) -> None:
    got = {h.name: h for h in report.hostile}
    assert name in got, sorted(got)
    if "not run:" in got[name].detail:
        pytest.skip(got[name].detail)
    assert got[name].passed, got[name].detail


def test_stale_series_are_detected(tmp_path: Path) -> None:
    """The detector can fail: a daemon that exports one process leaves live workers out."""
    soak = Soak(6.0, [*exporter_command(), "--process.top=1"], long_workers=3,
                short_workers=0, scrapers=1)
    soak.hostile_checks = ()
    soak.local_rounds = ()
    r = soak.run(tmp_path / "daemon.log")
    assert r.stale_series > 0, r.table()


def _body(scans: int, pid: str, start: float, value: float) -> str:
    return (
        "# TYPE numa_exporter_scans_total counter\n"
        f"numa_exporter_scans_total {scans}\n"
        "# TYPE numa_process_start_time_seconds gauge\n"
        f'numa_process_start_time_seconds{{pid="{pid}",comm="w"}} {start}\n'
        "# TYPE numa_process_pages_migrated_total counter\n"
        f'numa_process_pages_migrated_total{{pid="{pid}",comm="w"}} {value}\n'
    )


def test_falling_counters_are_detected_and_pid_reuse_is_not_one() -> None:
    soak = Soak(1.0, ["true"])
    soak._check(_body(1, "10", 100.0, 5), 0.0)
    soak._check(_body(2, "10", 100.0, 7), 0.0)
    assert soak.report.counters_backwards == 0
    soak._check(_body(1, "10", 100.0, 2), 0.0)  # an older snapshot served late: not a fall
    assert soak.report.counters_backwards == 0
    soak._check(_body(3, "10", 200.0, 1), 0.0)  # pid 10 reused by a new process
    assert soak.report.counters_backwards == 0
    soak._check(_body(4, "10", 200.0, 0), 0.0)
    assert soak.report.counters_backwards == 1
