"""Issue 24's per-thread cases on roots built from a real 2-node capture
(tests/fixtures/build_thread_roots.py): a late bind and cross access must not read 0 %."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import fixture_config
from tests.e2e.exposition import values
from tests.fixtures.build_thread_roots import build

from numa_exporter.cli import main as cli_main
from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.scan.scanner import Scanner

PID = "150"


def _root(name: str, tmp: Path) -> tuple[Path, dict[str, Any]]:
    root = build(name, tmp)
    return root, dict(json.loads((root / "EXPECTED.json").read_text()))


def _exposition(root: Path) -> str:
    # every family for every process (the fixture process is below --process.detail-above)
    config = fixture_config(root, detail_above=0)
    snap = Scanner(config).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, config))
    return generate_latest(reg).decode()


def _one(text: str, name: str, **labels: str) -> float:
    (got,) = values(text, name, pid=PID, **labels)
    return got[1]


def test_late_bind_counts_the_escaped_thread_and_judges_memory_by_the_binding(
        tmp_path: Path) -> None:
    root, exp = _root("late_bind", tmp_path)
    text = _exposition(root)
    assert _one(text, "numa_process_remote_memory_ratio") == pytest.approx(
        exp["remote_ratio"], abs=1e-9)
    assert _one(text, "numa_process_remote_memory_bytes") == exp["remote_bytes"]
    (home,) = values(text, "numa_process_home_nodes_info", pid=PID)
    assert (home[0]["nodes"], home[0]["source"]) == ("0", "binding")
    assert _one(text, "numa_process_threads_outside_binding") == len(exp["threads_outside"])
    assert _one(text, "numa_process_binding_mismatch", reason="threads_outside_binding") == 1


def test_late_bind_inspect_lists_the_thread_its_mask_and_the_remedy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, exp = _root("late_bind", tmp_path)
    args = [PID, f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}"]
    assert cli_main(["inspect", *args, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["binding"]["source"] == exp["binding_source"]
    assert rep["binding"]["outside"] == [{"tid": 152, "cpus_allowed": "0-1"}]
    assert any(r.startswith("taskset -a -p 0 150") for r in rep["remedies"])
    assert cli_main(["inspect", *args]) == 0
    text = capsys.readouterr().out
    assert "thread 152" in text and "allowed on CPUs 0-1" in text


def test_cross_access_reads_remote_per_thread(tmp_path: Path) -> None:
    root, exp = _root("cross_access", tmp_path)
    text = _exposition(root)
    faults = {s[0]["node"]: s[1] for s in values(text, "numa_process_hint_faults", pid=PID)}
    assert faults == {str(n): v for n, v in exp["hint_faults"].items()}
    # the union rule: both nodes are home, every fault local
    assert _one(text, "numa_process_fault_remote_ratio") == exp["fault_remote_ratio"]
    assert _one(text, "numa_process_thread_fault_remote_ratio") == pytest.approx(
        exp["thread_fault_remote_ratio"], abs=1e-9)
    # threads pinned one per node on their own: no binding to escape, nothing counted
    assert values(text, "numa_process_threads_outside_binding", pid=PID) == []
    assert _one(text, "numa_process_binding_mismatch", reason="threads_outside_binding") == 0
