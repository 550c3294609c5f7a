"""Per-cgroup samples: one unreadable file costs only what it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from numa_exporter.parsers.proc_cgroup import ProcCgroup
from numa_exporter.readers.cgroups import read_cgroups
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.cgroupfs import CgroupFS
from numa_exporter.sources.errors import Denied


def _tree(tmp_path: Path) -> Path:
    cg = tmp_path / "fs" / "cgroup"
    (cg / "app.slice" / "svc.service").mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpuset memory\n")
    d = cg / "app.slice" / "svc.service"
    (d / "memory.numa_stat").write_text("anon N0=4096 N1=8192\nfile N0=0 N1=4096\n")
    (d / "memory.stat").write_text("anon 12288\nnuma_pages_migrated 7\n")
    return tmp_path


def test_failed_memory_stat_keeps_the_numa_stat(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fs = CgroupFS(_tree(tmp_path))
    group = ProcCgroup(v2_path="/app.slice/svc.service")

    def denied(self: CgroupFS, *a: object) -> bytes:
        raise Denied("memory_stat", "memory.stat")

    monkeypatch.setattr(CgroupFS, "memory_stat", denied)
    errors = ErrorReporter()
    (sample,) = read_cgroups(fs, [group], errors)
    assert sample.memory[(0, "anon")] == 4096 and sample.memory[(1, "file")] == 4096
    assert sample.counters == {}
    assert errors.read_errors == {("memory_stat", "denied"): 1}
