"""An exec that lays the new program out where the old one was is an exec (issue 37 #8).

Without address-space randomisation (``setarch -R``, ``kernel.randomize_va_space=0``) a
program that re-executes its own binary with the same arguments gets the same start code,
end code and start stack in ``stat``: the marker the exporter used alone told no exec, and
the new program was served with the old one's drift, policies and read costs. The address
space generation (``sources/exec_probe.py``) tells it: every exec replaces the mm.

On a fixture root (its ``environ`` acting as the kernel's: the held descriptor reads
nothing after the exec), then for real: a Python program under ``setarch -R`` that
re-executes itself with the same argv and environment.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.config import Config
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

MiB = 1 << 20
PID = 300


def _sample(scanner: Scanner, pid: int) -> ProcessSample:
    """Return the process's sample from a new scan."""
    (p,) = [p for p in scanner.scan().processes if p.pid == pid]
    return p


def _ran(proc: Path, scan: int) -> None:
    """Move the process's CPU clock (it ran: nothing may keep its last read)."""
    fields = (proc / "stat").read_text().split(" ")
    fields[13] = str(800 + 10 * scan)
    (proc / "stat").write_text(" ".join(fields))


def _exec_in_place(proc: Path) -> None:
    """What an exec of the same layout shows: stat's image the same, and the environ
    descriptor held on the old address space reading nothing, the path the new one's."""
    aside = proc / "environ.old"
    (proc / "environ").rename(aside)
    os.truncate(aside, 0)
    (proc / "environ").write_bytes(b"PATH=/usr/bin\0UPGRADED=1\0")


def _fixture_image(proc: Path) -> tuple[int, ...] | None:
    st = parse_pid_stat((proc / "stat").read_bytes())
    assert st is not None
    return st.image


def test_fixture_exec_with_the_same_image_starts_a_new_program(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    proc = root / "proc" / str(PID)
    (proc / "environ").write_bytes(b"PATH=/usr/bin\0")
    scanner = Scanner(fixture_config(root, warmup_age=0.0, warmup_scans=3))
    for i in range(4):
        _ran(proc, i)
        before = _sample(scanner, PID)
    assert before.drift is not None and before.drift.baseline_remote_ratio is not None
    image = _fixture_image(proc)
    _exec_in_place(proc)
    _ran(proc, 4)
    after = _sample(scanner, PID)
    assert _fixture_image(proc) == image is not None  # stat says nothing
    assert after.drift is not None and after.drift.baseline_remote_ratio is None
    later = before
    for i in range(5, 9):
        _ran(proc, i)
        later = _sample(scanner, PID)
    assert later.drift is not None and later.drift.baseline_remote_ratio is not None


PROGRAM = """
import os, sys, time
from pathlib import Path
ready, go, token = sys.argv[1:4]
if not Path(ready).exists():
    buf = b"\\x01" * (48 << 20)
    Path(ready).write_text("first")
    while not Path(go).exists():
        time.sleep(0.01)
    os.execv(sys.executable, [sys.executable, *sys.argv])  # the same argv, the same env
blocks = [b"\\x02" * (8 << 20) for _ in range(12)]
Path(ready + ".2").write_text("second")
time.sleep(600)
"""


def _wait_for(path: Path, child: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert child.poll() is None, f"the program exited {child.returncode}"
        assert time.monotonic() < deadline, f"no {path.name} in 60 s"
        time.sleep(0.02)


def _image(pid: int) -> tuple[int, ...] | None:
    st = parse_pid_stat(Path(f"/proc/{pid}/stat").read_bytes())
    assert st is not None
    return st.image


def test_a_real_self_re_exec_without_randomisation_starts_a_new_program(tmp_path: Path
                                                                        ) -> None:
    setarch = shutil.which("setarch")
    if setarch is None or subprocess.run([setarch, "-R", "true"]).returncode != 0:
        pytest.skip("setarch -R (util-linux) is not available here")
    prog = tmp_path / "upgrade.py"
    prog.write_text(PROGRAM)
    token = f"reexec-{uuid.uuid4().hex}"
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = subprocess.Popen([setarch, "-R", sys.executable, str(prog), str(ready), str(go),
                              token])
    try:
        _wait_for(ready, child)
        cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=16 * MiB,
                     include=re.compile(re.escape(token)), warmup_age=0.0, warmup_scans=3)
        scanner = Scanner(cfg)
        before = [_sample(scanner, child.pid) for _ in range(4)]
        assert before[-1].drift is not None
        assert before[-1].drift.baseline_remote_ratio is not None
        image = _image(child.pid)
        go.write_text("go")
        _wait_for(Path(f"{ready}.2"), child)
        after = _sample(scanner, child.pid)
        assert after.start_time == before[-1].start_time
        assert _image(child.pid) == image  # the layout is the old program's: stat tells nothing
        assert after.rss_bytes >= 90 * MiB
        assert after.drift is not None
        assert after.drift.baseline_remote_ratio is None  # its own warm-up first
        assert after.drift.arrived_bytes == {} and after.drift.departed_bytes == {}
    finally:
        child.kill()
        child.wait()
