"""The real daemon does not flap a process's detail level (issue 37 #7): process 300 of a
``two_node`` copy swings between 951 and 1,101 MiB of placed bytes around the 1 GiB
``--process.detail-above`` every other scan (the issue's probe: 19 level changes in 40
scrapes before); 40 scrapes, each after the daemon has read the size it shows, see at most
two changes."""

from __future__ import annotations

import os
import re
import shutil
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.conftest import ROOTS, Daemon

from .web_support import root_args

MiB = 1 << 20
PID = 300
PLACED = re.compile(r'^numa_process_(?:local|remote)_memory_bytes\{pid="300"\} (\S+)$', re.M)


def _place(proc: Path, mib: int, step: int) -> None:
    """Give process 300 ``mib`` MiB half on each node and a CPU clock that moved, each
    file replaced whole (the daemon never reads half a file)."""
    pages = mib * MiB // 4096
    new = {"numa_maps": f"7f5000000000 default anon={pages} dirty={pages} N0={pages // 2} "
                        f"N1={pages - pages // 2} kernelpagesize_kB=4\n"}
    fields = (proc / "stat").read_text().split(" ")
    fields[13], fields[23] = str(800 + 10 * step), str(pages + 100)
    new["stat"] = " ".join(fields)
    new["status"] = "\n".join(
        f"VmRSS:\t{(pages + 100) * 4} kB" if line.startswith("VmRSS:") else line
        for line in (proc / "status").read_text().splitlines()) + "\n"
    for name, text in new.items():
        tmp = proc / f".{name}.new"
        tmp.write_text(text)
        os.replace(tmp, proc / name)


def _scans(text: str) -> float:
    m = re.search(r"^numa_exporter_scans_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_process_swinging_across_the_floor_keeps_its_level(start_daemon: Any,
                                                             tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    proc = root / "proc" / str(PID)
    _place(proc, 1101, 0)
    d: Daemon = start_daemon(*root_args(root), "--scan.interval=100ms",
                             "--process.detail-top=0")
    d.wait_scans(1)
    levels = []
    for i in range(40):
        mib = 1101 if (i // 2) % 2 == 0 else 951
        _place(proc, mib, i + 1)
        deadline = time.monotonic() + 30
        while True:  # a scan begun after the write has been published
            text = d.metrics()
            placed = sum(float(v) for v in PLACED.findall(text))
            if placed == mib * MiB:
                break
            assert time.monotonic() < deadline, f"{mib} MiB never served"
            time.sleep(0.05)
        levels.append(any(line.startswith("numa_process_policy_memory_bytes{")
                          and f'pid="{PID}"' in line for line in text.splitlines()))
    assert levels[0]
    assert sum(a != b for a, b in pairwise(levels)) <= 2, levels
