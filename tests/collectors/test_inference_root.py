"""Accelerator homes, binding mismatches, cgroups and config pins on the inference root."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.model.snapshot import ProcessSample, Snapshot
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.scan.scanner import Scanner

BASE = ROOTS / "inference"
EXP: dict[str, Any] = json.loads((BASE / "EXPECTED.json").read_text())


_config = functools.partial(fixture_config, BASE, pins=True)


@pytest.fixture(scope="module")
def snap() -> Snapshot:
    cfg = _config()
    return Scanner(cfg, accelerators=accelerator_source(cfg)).scan()


def _proc(snap: Snapshot, comm: str) -> ProcessSample:
    return next(p for p in snap.processes if p.comm == comm)


def test_bytes_match_the_generator_tables(snap: Snapshot) -> None:
    for pid, e in EXP["processes"].items():
        p = next(p for p in snap.processes if p.pid == int(pid))
        assert {str(n): b for n, b in p.node_bytes().items()} == e["node_bytes"]
        assert p.start_time == pytest.approx(e["start_time_seconds"])


def test_accelerator_in_use_decides_home(snap: Snapshot) -> None:
    vllm = _proc(snap, "vllm")
    assert [(u.device, u.pci_address, u.node) for u in vllm.accelerators] == [
        ("nvidia0", "0000:1b:00.0", 0)]
    assert (vllm.home.source, vllm.home.nodes) == ("accelerator", frozenset({0}))
    node = EXP["processes"]["500"]["node_bytes"]
    assert vllm.locality.remote_bytes == node["1"]
    assert vllm.locality.remote_ratio == pytest.approx(node["1"] / (node["0"] + node["1"]))
    trainer = _proc(snap, "trainer")
    assert (trainer.home.source, trainer.home.nodes) == ("accelerator", frozenset({1}))
    assert trainer.locality.remote_ratio == 0.0


def test_config_pin_beats_threads(snap: Snapshot) -> None:
    p = _proc(snap, "pinned-app")
    assert (p.home.source, p.home.nodes) == ("config", frozenset({1}))
    node = EXP["processes"]["502"]["node_bytes"]
    assert p.locality.remote_bytes == node["0"]


def test_mismatches(snap: Snapshot) -> None:
    on = {p.comm: {r for r, v in p.mismatches.items() if v} for p in snap.processes}
    assert on["vllm"] == {"memory_not_on_thread_nodes", "accelerator_node_not_allowed",
                          "balancing_with_strict_binding"}
    assert on["trainer"] == set()
    assert on["pinned-app"] == set()
    # CPUs bound, memory free: balancing moves that memory to the threads (it helps), so
    # balancing_with_strict_binding (memory held where balancing cannot move it) is off
    assert on["tbound"] == {"threads_bound_memory_free"}
    vllm = _proc(snap, "vllm")
    assert vllm.memory_bound is True and vllm.cpus_bound is True
    assert _proc(snap, "trainer").memory_bound is False


def test_cgroup_numa_stat(snap: Snapshot) -> None:
    (cg,) = [c for c in snap.cgroups if c.path == "/system.slice/vllm.service"]
    e = EXP["cgroups"]["/system.slice/vllm.service"]
    assert cg.unit == e["unit"]
    for node, kinds in e["memory"].items():
        for kind, b in kinds.items():
            assert cg.memory.get((int(node), kind), 0) == b
    assert cg.counters == e["counters"]
    assert _proc(snap, "vllm").cgroup == "/system.slice/vllm.service"


def test_accelerators_listed_with_unknown_node_kept(snap: Snapshot) -> None:
    nodes = {a.pci_address: a.node for a in snap.accelerators}
    assert nodes["0000:1b:00.0"] == 0
    assert nodes["0000:bb:00.0"] == 1
    assert nodes["0000:03:00.0"] == -1  # firmware says nothing: -1, never a guessed 0


def test_drift_counts_net_movement_and_baseline_after_warmup() -> None:
    """Pages that move between scans show up as departed/arrived bytes; baseline once warm."""
    cfg = _config(warmup_age=0.0, warmup_scans=2, warmup_rss_tolerance=0.05)
    scanner = Scanner(cfg, accelerators=accelerator_source(cfg))
    scanner.scan()
    second = scanner.scan()
    # the baseline is the median of at least three scans: one bad scan cannot set it
    assert _proc(second, "vllm").drift.baseline_remote_ratio is None  # type: ignore[union-attr]
    second = scanner.scan()
    vllm = _proc(second, "vllm")
    assert vllm.drift is not None
    assert vllm.drift.baseline_remote_ratio == pytest.approx(vllm.locality.remote_ratio)
    assert vllm.drift.arrived_bytes == {} and vllm.drift.departed_bytes == {}


def test_a_denied_read_of_open_files_is_counted_even_with_a_pin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the fd folder of every process is denied (no CAP_SYS_PTRACE): each denied read is
    # counted, the pinned process's too (its pin still gives it the accelerator), where the
    # pin once made the failure vanish uncounted
    from dataclasses import replace

    from numa_exporter.config import AcceleratorPin
    from numa_exporter.patterns import compile_pattern
    from numa_exporter.sources.errors import Denied
    from numa_exporter.sources.procfs import ProcessFiles

    def denied(self: ProcessFiles, **_kw: object) -> object:
        raise Denied("fd", f"{self.path}/fd", OSError(13, "Permission denied"))

    monkeypatch.setattr(ProcessFiles, "fds", denied)
    cfg = replace(_config(), accelerator_pins=(
        AcceleratorPin(compile_pattern("^pinned"), ("0000:1b:00.0",)),))
    snap = Scanner(cfg, accelerators=accelerator_source(cfg)).scan()
    pinned = _proc(snap, "pinned-app")
    assert [u.pci_address for u in pinned.accelerators] == ["0000:1b:00.0"]
    assert snap.stats.read_errors[("fd", "denied")] == len(EXP["processes"])
