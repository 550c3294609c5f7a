"""numa_process_pages_migrated_total stays monotonic when one of the threads exits."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.conftest import ROOTS, fixture_config

from numa_exporter.scan.scanner import Scanner

PID = 400  # four_node: threads 400 and 407


def _set_migrated(sched: Path, value: int) -> None:
    text = sched.read_text()
    new, n = re.subn(r"^(numa_pages_migrated\s+:\s+)\d+$", rf"\g<1>{value}", text, flags=re.M)
    assert n == 1, sched
    sched.write_text(new)


def _migrated(scanner: Scanner) -> int | None:
    snap = scanner.scan()
    (proc,) = [p for p in snap.processes if p.pid == PID]
    return proc.pages_migrated


def test_counter_survives_thread_exit(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "four_node", root, symlinks=True)
    task = root / "proc" / str(PID) / "task"
    assert sorted(p.name for p in task.iterdir()) == ["400", "407"]
    _set_migrated(task / "400" / "sched", 100)
    _set_migrated(task / "407" / "sched", 2500)
    scanner = Scanner(fixture_config(root))
    assert _migrated(scanner) == 2600
    shutil.rmtree(task / "407")  # the worker thread exits; the kernel forgets its 2500
    _set_migrated(task / "400" / "sched", 130)
    assert _migrated(scanner) == 2630
    assert _migrated(scanner) == 2630
