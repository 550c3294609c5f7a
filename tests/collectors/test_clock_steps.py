"""The wall clock steps (NTP, a restored VM): schedules and ages must not follow it
(issue 15 #5). The scanner gets a monotonic clock that moves 15 s per scan and a wall clock
that steps back an hour, or forward a day."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOTS, fixture_config

from numa_exporter.model.cadence import estimate_full_seconds
from numa_exporter.model.snapshot import ProcessSample, Snapshot
from numa_exporter.scan.scanner import Scanner

INTERVAL = 15.0
ROOT = ROOTS / "two_node"
BTIME = 1764670500  # tests/fixtures/roots/two_node/proc/stat
START = BTIME + 8000 / 100  # process 300's start time: stat field 22 is 8000 ticks
RESIDENT = 35104 * 4096  # its VmRSS
HOUR, DAY = 3600.0, 86400.0


class Clocks:
    """A monotonic clock and a wall clock, moved together by ``tick`` and the wall alone by
    ``step``."""

    def __init__(self, wall: float) -> None:
        self.mono = 5000.0
        self.wall = wall

    def tick(self, seconds: float = INTERVAL) -> None:
        self.mono += seconds
        self.wall += seconds

    def step(self, seconds: float) -> None:
        self.wall += seconds


def _scanner(clocks: Clocks, root: Path = ROOT, **kw: object) -> Scanner:
    cfg = fixture_config(root, scan_interval=INTERVAL, scan_budget=100.0,
                         include=re.compile("^split"), sampling=False, **kw)
    return Scanner(cfg, clock=lambda: clocks.mono, wall=lambda: clocks.wall)


def _proc(snap: Snapshot) -> ProcessSample:
    (p,) = [p for p in snap.processes if p.pid == 300]
    return p


def test_cadence_survives_the_wall_clock_stepping_back() -> None:
    # a full read costing 3.5 budgets: read every 4th scan (skip 3)
    budget = estimate_full_seconds(RESIDENT, None) / 3.5
    clocks = Clocks(wall=START + DAY)
    scanner = _scanner(clocks, process_budget=budget)
    first = _proc(scanner.scan())
    assert first.last_scan_timestamp == clocks.wall
    assert first.next_scan_timestamp == clocks.wall + 3 * INTERVAL
    clocks.tick()
    clocks.step(-HOUR)  # NTP steps the clock back an hour
    kept = _proc(scanner.scan())
    assert kept.last_scan_timestamp == first.last_scan_timestamp  # not read: kept
    # the next read is 2 intervals away whatever the wall clock did (it was 1 h + 30 s)
    assert kept.next_scan_timestamp == clocks.wall + 2 * INTERVAL
    clocks.tick()
    scanner.scan()
    clocks.tick()
    read = _proc(scanner.scan())  # the 4th scan reads it, as planned
    assert read.last_scan_timestamp == clocks.wall
    # after a read the cadence follows that read's measured CPU (issue 14), so the next read
    # is at most 3 intervals away, never in the past, and never the hour the clock stepped
    assert clocks.wall <= read.next_scan_timestamp <= clocks.wall + 3 * INTERVAL


def test_cadence_does_not_read_early_when_the_wall_clock_steps_forward() -> None:
    budget = estimate_full_seconds(RESIDENT, None) / 3.5
    clocks = Clocks(wall=START + DAY)
    scanner = _scanner(clocks, process_budget=budget)
    first = _proc(scanner.scan())
    clocks.tick()
    clocks.step(DAY)
    second = _proc(scanner.scan())
    assert second.last_scan_timestamp == first.last_scan_timestamp  # still kept
    assert scanner.scan().stats.states["kept"] == 1


def _baseline_after(clocks: Clocks, step_at: int, step: float, scans: int) -> list[bool]:
    """Return, per scan, whether process 300 has a drift baseline."""
    scanner = _scanner(clocks, warmup_age=300.0, warmup_scans=3)
    out = []
    for i in range(scans):
        if i == step_at:
            clocks.step(step)
        drift = _proc(scanner.scan()).drift
        assert drift is not None
        out.append(drift.baseline_remote_ratio is not None)
        clocks.tick()
    return out


def test_warmup_age_ignores_a_forward_step() -> None:
    # a 10-second-old process; the clock jumps a day ahead: it is still 10 s + scans old
    clocks = Clocks(wall=START + 10)
    got = _baseline_after(clocks, step_at=1, step=DAY, scans=6)
    assert got == [False] * 6  # 10 + 5 x 15 = 85 s < 300 s


def test_warmup_age_ignores_a_backward_step() -> None:
    # a 250-second-old process, stable: warm at 300 s, i.e. from the 5th scan (250 + 60)
    clocks = Clocks(wall=START + 250)
    got = _baseline_after(clocks, step_at=1, step=-HOUR, scans=6)
    assert got == [False, False, False, False, True, True]
