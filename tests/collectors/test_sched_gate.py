"""sched is not read on kernels whose sched resets counters when read (3.13-4.1)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.model.tiers.host import SystemTiers
from numa_exporter.parsers.osrelease import KernelRelease, parse_osrelease
from numa_exporter.scan import scanner as scanner_mod
from numa_exporter.scan.scanner import Scanner


def _migrated(release: str | None, monkeypatch: pytest.MonkeyPatch) -> dict[int, int | None]:
    """Scan the two_node root as if the kernel's osrelease said ``release``."""
    real = scanner_mod.read_system_tiers

    def with_release(*args: Any) -> SystemTiers:
        got = real(*args)
        return replace(got, release=parse_osrelease(release.encode()) if release else None)

    monkeypatch.setattr(scanner_mod, "read_system_tiers", with_release)
    root = ROOTS / "two_node"
    s = Scanner(fixture_config(root))
    return {p.pid: p.pages_migrated for p in s.scan().processes}


def test_a_release_before_4_2_stops_sched_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    read = _migrated("6.1.0-50-amd64", monkeypatch)
    assert any(v is not None for v in read.values()), read  # the root's sched has them
    assert _migrated(None, monkeypatch) == read  # unknown release: read (the text decides)
    refused = _migrated("4.1.12-124.el7uek", monkeypatch)
    assert set(refused) == set(read) and all(v is None for v in refused.values()), refused


def test_sched_resets_by_release() -> None:
    def rel(major: int, minor: int) -> SystemTiers:
        return SystemTiers(release=KernelRelease(major, minor, 0, f"{major}.{minor}.0"))

    assert rel(3, 13).sched_resets() and rel(4, 1).sched_resets()
    assert not rel(4, 2).sched_resets() and not rel(6, 1).sched_resets()
    assert not SystemTiers().sched_resets()  # unknown release: the text decides
