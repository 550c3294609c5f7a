"""The detail level does not flap (issue 37 #7): a process whose placed bytes swing across
``--process.detail-above`` keeps the level it reached until it has been clearly below the
floor for a while, so its breakdown series are not ended and re-created every few scans.

A copy of the ``two_node`` root whose process 300 maps one anonymous region, rewritten
before every scan; its level is read from the exposition, as a scraper sees it (its per
policy bytes, ``numa_process_policy_memory_bytes``, are served at full detail only).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.model.detail_level import HOLD_SCANS
from numa_exporter.scan.scanner import Scanner

MiB = 1 << 20
GiB = 1 << 30
PID = 300
FULL_ONLY = "numa_process_policy_memory_bytes{"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Return a copy of two_node (process 300 is rewritten by :func:`_place`)."""
    out = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", out, symlinks=True)
    return out


def _place(root: Path, mib: int, scan: int) -> None:
    """Give process 300 ``mib`` MiB of anonymous memory, half on each node, and a CPU
    clock that moved (it ran since the last scan: nothing may keep its last read)."""
    pages = mib * MiB // 4096
    proc = root / "proc" / str(PID)
    (proc / "numa_maps").write_text(
        f"7f5000000000 default anon={pages} dirty={pages} N0={pages // 2} "
        f"N1={pages - pages // 2} kernelpagesize_kB=4\n")
    fields = (proc / "stat").read_text().split(" ")
    fields[13] = str(800 + 10 * scan)  # utime
    fields[23] = str(pages + 100)  # rss (pages)
    (proc / "stat").write_text(" ".join(fields))
    status = (proc / "status").read_text()
    status = "\n".join(f"VmRSS:\t{(pages + 100) * 4} kB" if line.startswith("VmRSS:")
                       else line for line in status.splitlines()) + "\n"
    (proc / "status").write_text(status)


def _levels(root: Path, sizes: Iterable[int], detail_above: int = GiB) -> list[bool]:
    """Return, scan after scan with process 300 at each of ``sizes`` MiB, whether a scrape
    shows it at full detail (by size alone: the root's 9 processes would all be among the
    ``--process.detail-top`` largest)."""
    cfg = fixture_config(root, detail_above=detail_above, detail_top=0)
    scanner = Scanner(cfg)
    out = []
    for i, mib in enumerate(sizes):
        _place(root, mib, i)
        snap = scanner.scan()
        (p,) = [p for p in snap.processes if p.pid == PID]
        assert p.locality.local_bytes + p.locality.remote_bytes == mib * MiB  # read again
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SnapshotCollector(lambda s=snap: s, cfg))  # type: ignore[misc]
        text = generate_latest(reg).decode()
        out.append(any(line.startswith(FULL_ONLY) and f'pid="{PID}"' in line
                       for line in text.splitlines()))
    return out


def _changes(levels: list[bool]) -> int:
    return sum(a != b for a, b in pairwise(levels))


@pytest.mark.parametrize("low", [951, 600])
def test_a_process_swinging_across_the_floor_changes_level_at_most_twice(root: Path,
                                                                         low: int) -> None:
    # the probe: 951 <-> 1,101 MiB around a 1 GiB floor, every other scan (19
    # changes in 40 scrapes before); and a deeper swing, below 90 % of the floor each time
    levels = _levels(root, [1101 if i % 2 == 0 else low for i in range(40)])
    assert levels[0], "at 1,101 MiB it has full detail"
    assert _changes(levels) <= 2, levels


def test_a_process_that_stays_small_gives_its_detail_up_after_the_hold(root: Path) -> None:
    sizes = [1101] * 3 + [600] * (HOLD_SCANS + 5)
    levels = _levels(root, sizes)
    assert all(levels[:3 + HOLD_SCANS - 1])  # kept while the hold runs
    assert not any(levels[3 + HOLD_SCANS:])  # then summary
    assert _changes(levels) == 1


def test_a_process_above_the_floor_from_its_first_scan_has_full_detail(root: Path) -> None:
    assert _levels(root, [1101, 1101]) == [True, True]
    assert _levels(root, [951, 951]) == [False, False]
