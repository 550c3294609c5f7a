"""Failures stay isolated and counted: each process ends in exactly one state, one failing
collector costs its own families only, and a file absent from a live process is an error,
not an exit. Each test failed before its fix (found while re-grouping the scan path, issue 13):

1. ``numa_exporter_processes{state="kept"}`` was named in HELP and counted, never emitted,
   and a budget-deferred process with old values counted as both kept and skipped.
2. One failing collector failed the whole rendering (a scrape error, or every collector's
   previous bytes served silently).
3. A live process whose numa_maps is absent was counted as gone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry
from structlog.testing import capture_logs
from tests.conftest import ROOTS, FakeClock, fixture_config
from tests.e2e.exposition import values

import numa_exporter.collectors.snapshot as snapshot_collector
from numa_exporter.collectors import registry
from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config import Config
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.errors import Absent, Gone
from numa_exporter.sources.procfs import ProcFS

PROCESSES = "numa_exporter_processes"


_config = functools.partial(fixture_config, detail_above=0)


def _exposition(snap: Snapshot, config: Config) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, config))
    return generate_latest(reg).decode()


def _considered(root: Path) -> int:
    """Return the fixture's user processes (every listed pid but kernel threads), from its
    independently written EXPECTED.json."""
    exp = json.loads((root / "EXPECTED.json").read_text())
    return sum(e["outcome"] != "kernel_thread" for e in exp["processes"].values())


def _help_states(text: str) -> set[str]:
    """Return the state names the HELP line of numa_exporter_processes describes."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"# HELP {PROCESSES} ")]
    return set(re.findall(r"\b([a-z]+) \(", line.partition(":")[2]))


# --- 1. kept is emitted and the states are a partition -------------------------------------

def test_every_state_the_help_names_is_emitted_and_states_partition_the_processes() -> None:
    root = ROOTS / "two_node"
    considered = _considered(root)
    assert considered == 10  # 8 read, 1 gone, 1 that tests inject as denied
    scanner = Scanner(_config(root, scan_budget=100.0), clock=FakeClock(0.1))
    first = scanner.scan()  # everything fits: every process read once
    scanner.config = _config(root, scan_budget=1.0)
    second = scanner.scan()  # the budget runs out: some are deferred with their old values
    assert second.stats.budget_skipped_total > 0 and second.stats.states["kept"] > 0
    for snap in (first, second):
        assert sum(snap.stats.states.values()) == considered, snap.stats.states
        text = _exposition(snap, _config(root))
        named = _help_states(text)
        assert {"scanned", "kept", "skipped", "denied", "gone"} <= named
        exposed = {lab["state"]: v for lab, v in values(text, PROCESSES)}
        assert named <= set(exposed), named - set(exposed)
        assert sum(exposed.values()) == considered
    assert _exposition(second, _config(root)).count(f'{PROCESSES}{{state="kept"}}') == 1


# --- 2. collector isolation ---------------------------------------------------------------

def _broken(name: str) -> tuple[registry.CollectorDef, ...]:
    """Return the registry with collector ``name``'s emit raising part-way."""

    def emit(snap: Snapshot) -> Iterator[Metric]:
        yield from list(registry.get(name).emit(snap))[:1]
        raise ZeroDivisionError("collector bug")

    return tuple(dataclasses.replace(c, emit=emit) if c.name == name else c
                 for c in registry.ALL)


def test_a_failing_collector_costs_only_its_own_families(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(ROOTS / "two_node")
    snap = Scanner(cfg).scan()
    whole = _exposition(snap, cfg)
    node_families = {m.name for m in registry.get("node").emit(snap)}
    assert node_families
    monkeypatch.setattr(snapshot_collector, "ALL", _broken("node"))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    with capture_logs() as logs:
        text = generate_latest(reg).decode()  # raised before: the scrape failed as a whole
        again = generate_latest(reg).decode()  # the next scrape tries the collector again
    assert values(again, "numa_exporter_collector_success", collector="node")[0][1] == 0
    ok = {lab["collector"]: v for lab, v in values(text, "numa_exporter_collector_success")}
    assert ok["node"] == 0
    assert ok["process"] == ok["exporter"] == ok["vmstat"] == 1
    took = {lab["collector"] for lab, _ in values(text, "numa_exporter_collector_duration_seconds")}
    assert took == set(ok)
    # the others' families are all there, with the values of the whole rendering
    for name in ("numa_process_resident_bytes", "numa_exporter_scans_total"):
        assert values(text, name) == values(whole, name)
    for fam in node_families:
        assert not values(text, fam), fam  # none of the failing collector's, not even half
    failed = [e for e in logs if e.get("collector") == "node"]
    assert len(failed) == 1 and failed[0]["log_level"] == "error"  # said once


# --- 3. numa_maps absent while the process lives -------------------------------------------

def test_numa_maps_absent_from_a_live_process_is_an_error_said_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    for pid in (300, 301):  # a kernel without NUMA, a masked path: the process is there
        (root / "proc" / str(pid) / "numa_maps").unlink()
    scanner = Scanner(_config(root))
    with capture_logs() as logs:
        first = scanner.scan()
        second = scanner.scan()
    for snap in (first, second):
        assert {300, 301}.isdisjoint(p.pid for p in snap.processes)
        assert snap.stats.states["gone"] == 0  # 302 (no status file) is an error: skipped
        assert snap.stats.states["skipped"] == 3
    assert second.stats.read_errors[("numa_maps", "error")] == 4
    assert ("numa_maps", "gone") not in second.stats.read_errors
    said = [e for e in logs if e.get("source") == "numa_maps" and e["log_level"] == "error"]
    assert len(said) == 1, said


def test_psutil_rule_file_absent_versus_process_gone(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    proc = ProcFS(tmp_path)
    with pytest.raises(Absent):  # the pid's directory is there: not an exit
        next(proc.process(7).numa_maps())
    with pytest.raises(Gone) as gone:  # the pid's directory is gone: the process is
        next(proc.process(8).numa_maps())
    assert not isinstance(gone.value, Absent)
