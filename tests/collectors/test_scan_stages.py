"""The fixed cost of a scan: its stages are timed, and screening parses little (issue 14)."""

from __future__ import annotations

import functools
import re

import pytest
from tests.conftest import fixture_config

from numa_exporter.parsers import pid_status
from numa_exporter.readers import process_files
from numa_exporter.scan.scanner import Scanner

_config = functools.partial(fixture_config, "two_node")


def test_each_stage_of_a_scan_has_its_cpu_time() -> None:
    ticks = iter(float(i) for i in range(1000))
    scanner = Scanner(_config(), cpu=lambda: next(ticks))
    stats = scanner.scan().stats
    names = [name for name, _ in stats.stage_seconds]
    assert names == ["system", "select", "processes", "cgroups"]
    assert all(sec >= 1.0 for _, sec in stats.stage_seconds)  # one tick at least each


def test_patterns_are_matched_before_the_full_status_parse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[bytes] = []
    real = pid_status.parse_pid_status

    def counting(data: bytes) -> pid_status.PidStatus:
        parsed.append(data)
        return real(data)

    monkeypatch.setattr(process_files, "parse_pid_status", counting)
    snap = Scanner(_config(include=re.compile("^splitter$"))).scan()
    assert [p.pid for p in snap.processes] == [300]
    # only the process that passes is parsed in full (main parsed every process's status)
    assert len(parsed) == 1
