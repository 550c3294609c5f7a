"""A program that replaces itself with exec() (issue 23 #2) is a new program to the exporter:
no drift baseline, arrived/departed bytes or measured read costs of the program it replaced.

Real processes on the real /proc: a Python program allocates 48 MiB, is read until its
drift baseline is set, then execs (same pid, same start time) a program that allocates
96 MiB in another layout."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

from numa_exporter.config import Config
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

MiB = 1 << 20

SECOND = """
import sys, time
from pathlib import Path
blocks = [b"\\x02" * (8 << 20) for _ in range(12)]
Path(sys.argv[1]).write_text("second")
time.sleep(600)
"""

FIRST = """
import os, sys, time
from pathlib import Path
buf = b"\\x01" * (48 << 20)
ready, go, token = sys.argv[1:4]
Path(ready).write_text("first")
while not Path(go).exists():
    time.sleep(0.01)
os.execv(sys.executable, [sys.executable, "-c", {second!r}, ready + ".2", token])
"""


def _wait_for(path: Path) -> None:
    """Wait until ``path`` exists (the child says it is ready)."""
    while not path.exists():
        time.sleep(0.02)


def _read(scanner: Scanner, pid: int) -> ProcessSample:
    """Return the process's sample from a new scan."""
    (p,) = [p for p in scanner.scan().processes if p.pid == pid]
    return p


def test_exec_in_place_starts_a_new_program(tmp_path: Path) -> None:
    token = f"execprobe-{uuid.uuid4().hex}"
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = subprocess.Popen([sys.executable, "-c", FIRST.format(second=SECOND),
                              str(ready), str(go), token])
    try:
        _wait_for(ready)
        cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=16 * MiB,
                     include=re.compile(re.escape(token)), warmup_age=0.0, warmup_scans=3)
        scanner = Scanner(cfg)
        before = [_read(scanner, child.pid) for _ in range(4)]
        assert before[-1].drift is not None and before[-1].drift.baseline_remote_ratio is not None
        start = before[-1].start_time
        go.write_text("go")
        _wait_for(Path(f"{ready}.2"))
        after = _read(scanner, child.pid)
        assert after.start_time == start  # same pid, same start: only exec tells them apart
        assert after.rss_bytes >= 90 * MiB
        assert after.drift is not None
        assert after.drift.baseline_remote_ratio is None  # its own warm-up first
        assert after.drift.arrived_bytes == {} and after.drift.departed_bytes == {}
        later = [_read(scanner, child.pid) for _ in range(3)]
        assert later[-1].drift is not None and later[-1].drift.baseline_remote_ratio is not None
    finally:
        child.kill()
        child.wait()
