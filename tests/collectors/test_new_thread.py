"""A thread that started since the last scan weighs in the home choice by its CPU time."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.conftest import ROOTS, fixture_config

from numa_exporter.scan.scanner import Scanner

PID = 139  # two_node: numatouch, one thread on CPU 0 (node 0)


def _add_thread(task: Path, tid: int, cpu: int, utime: int) -> None:
    shutil.copytree(task / str(PID), task / str(tid))
    stat = task / str(tid) / "stat"
    text = stat.read_text()
    _head, _, rest = text.partition(") ")
    fields = rest.split()
    fields[14 - 3] = str(utime)  # rest[0] is field 3
    fields[15 - 3] = "0"
    fields[39 - 3] = str(cpu)
    stat.unlink()
    stat.write_text(f"{tid} (numatouch) " + " ".join(fields) + "\n")
    # the worker pinned itself to that CPU (so the process is bound nowhere as a whole)
    status = task / str(tid) / "status"
    text = re.sub(r"\nCpus_allowed_list:\t[^\n]*", f"\nCpus_allowed_list:\t{cpu}",
                  status.read_text())
    status.unlink()
    status.write_text(text)


def test_new_thread_counts_from_its_first_scan(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    scanner = Scanner(fixture_config(root))
    (first,) = [p for p in scanner.scan().processes if p.pid == PID]
    assert first.home.nodes == {0}
    # a worker thread starts on node 1 and burns 500 ticks; the old thread stays idle
    _add_thread(root / "proc" / str(PID) / "task", PID + 10, cpu=1, utime=500)
    (second,) = [p for p in scanner.scan().processes if p.pid == PID]
    assert second.threads_by_node == {0: 1, 1: 1}
    assert (second.home.source, second.home.nodes) == ("threads", frozenset({1}))
