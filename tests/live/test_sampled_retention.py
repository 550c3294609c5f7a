"""What the sampled reader keeps of a process goes with the scanner's process table (issue
33): a process that exits, or whose pid is handed out again, or that exec()s, leaves nothing
of its parsed VMA list or its PAGEMAP_SCAN runs behind."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from numa_exporter.config import Config
from numa_exporter.model.process_state import ProcessKey
from numa_exporter.readers.sampled.reader import SampledReader, identity, sampling_available
from numa_exporter.readers.sampled.sparse import RangeScan
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

MiB = 1 << 20
PAGE = 4096
TEXT = (b"7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n"
        b"7f0040000000-7f0040001000 ---p 00000000 00:00 0 \n")

HOLDER = """
import sys, time
buf = b"\\x01" * (128 << 20)
sys.stdout.write("ready\\n")
sys.stdout.flush()
time.sleep(600)
"""


def _keep(reader: SampledReader, key: ProcessKey) -> None:
    """File a frame and a scan under ``key``, as a read of the process would."""
    reader.frames.frame(identity(key), (TEXT,), PAGE, ())
    reader.scans.state(identity(key))[(0, 1 << 30)] = RangeScan(0, 1 << 30, [(0, PAGE)])


def test_retain_keeps_the_processes_listed_and_no_other() -> None:
    reader = SampledReader()
    old, kept = ProcessKey(10, 100, (1, 2)), ProcessKey(11, 100, (1, 2))
    for key in (old, kept):
        _keep(reader, key)
    assert len(reader.frames) == 2 and len(reader.scans) == 2
    reader.retain([kept])
    assert len(reader.frames) == 1 and len(reader.scans) == 1
    # the same pid handed to a new process (another start time): the old state goes
    reader.retain([ProcessKey(11, 200, (1, 2))])
    assert reader.kept() == 0
    # an exec(): same pid and start time, another image; ProcessKey's equality ignores the
    # image, the reader's state does not
    _keep(reader, kept)
    reader.retain([ProcessKey(11, 100, (3, 4))])
    assert reader.kept() == 0
    assert reader.frames.kept_bytes == 0


def test_a_process_the_table_drops_leaves_nothing_behind() -> None:
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampled placement unavailable here: {why}")
    token = f"retainprobe-{uuid.uuid4().hex}"
    child = subprocess.Popen([sys.executable, "-c", HOLDER, token], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        # a hold budget of 1 us: sampled whenever the hold allows nothing else
        cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 * MiB,
                     include=re.compile(re.escape(token)), hold_budget=1e-6,
                     policy_interval=0.0)
        reader = SampledReader()
        scanner = Scanner(cfg, sampled=reader)
        methods = []
        for _ in range(3):
            methods += [p.method for p in scanner.scan().processes if p.pid == child.pid]
        assert "sampled" in methods, methods
        assert len(reader.frames) == 1  # its VMA list is kept while it lives
    finally:
        child.kill()
        child.wait()
    scanner.scan()
    assert reader.kept() == 0 and reader.frames.kept_bytes == 0
