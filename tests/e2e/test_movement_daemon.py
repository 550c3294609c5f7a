"""The real daemon on this machine's /proc, every process forced onto the sampled reader (a
hold budget of 1 µs): a process whose pages never change node shows no movement, even while
it frees and re-allocates part of its memory between scans (allocation and freeing are not
movement; before issue 28 they were counted as arrived and departed bytes), and the per-node
standard error of its estimate is exported."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon
from tests.e2e.exposition import values

from numa_exporter.readers.sampled.reader import sampling_available

pytestmark = pytest.mark.e2e
MiB = 1 << 20
SIZE_MIB = 96
SCANS = 15

# frees an eighth of its memory (MADV_DONTNEED) and touches it again, over and over: its
# resident size swings by 12 MiB between scans; no page ever changes node
_CHILD = (
    "import mmap, sys, time\n"
    "size = {size} << 20\n"
    "m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "for i in range(0, size, 4096): m[i] = 1\n"
    "print('ready', flush=True)\n"
    "step, i = size // 8, 0\n"
    "while True:\n"
    "    off = (i % 8) * step\n"
    "    m.madvise(mmap.MADV_DONTNEED, off, step)\n"
    "    time.sleep(0.3)\n"
    "    for j in range(off, off + step, 4096): m[j] = 1\n"
    "    i += 1\n"
    "    time.sleep(0.2)\n"
)


@pytest.fixture
def churning_child() -> Iterator[subprocess.Popen[bytes]]:
    ok, reason = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"move_pages unusable here: {reason}")
    p = subprocess.Popen([sys.executable, "-c", _CHILD.format(size=SIZE_MIB), "movement-churn"],
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        yield p
    finally:
        p.kill()
        p.wait()


def _scans(text: str) -> int:
    (got,) = values(text, "numa_exporter_scans_total")
    return int(got[1])


def _moved(text: str, pid: int) -> float:
    return sum(v for name in ("numa_process_node_arrived_bytes_total",
                              "numa_process_node_departed_bytes_total")
               for _, v in values(text, name, pid=str(pid)))


def _sampled_scrape(d: Daemon, pid: int) -> str:
    for n in range(1, 60):
        text = d.wait_scans(n)
        if values(text, "numa_process_placement_info", pid=str(pid), method="sampled"):
            return text
    raise AssertionError(f"{pid} never sampled:\n{d.log_path.read_text()[-2000:]}")


def test_unmoved_process_shows_no_movement_while_it_churns(start_daemon, churning_child) -> None:  # type: ignore[no-untyped-def]
    pid = churning_child.pid
    d = start_daemon("--process.min-resident=32MiB", "--scan.interval=1s",
                     "--process.detail-above=0",
                     "--process.include=movement-churn", "--placement.hold-budget=0.000001",
                     "--collector.drift")
    first = _sampled_scrape(d, pid)
    last = d.wait_scans(_scans(first) + SCANS, timeout=120.0)
    assert values(last, "numa_process_placement_info", pid=str(pid), method="sampled")
    grown = _moved(last, pid) - _moved(first, pid)
    assert grown <= 0.02 * SIZE_MIB * MiB, (
        f"{grown / MiB:.1f} MiB of movement counted over {SCANS} scans for a process whose "
        f"pages never changed node")
    (err,) = values(last, "numa_process_memory_bytes_stderr", pid=str(pid))
    assert 0 <= err[1] <= 0.02 * SIZE_MIB * MiB  # one node here: every sample on it
    paths = {lbl["path"] for lbl, _ in values(last, "numa_process_placement_info",
                                              pid=str(pid))}
    assert paths <= {"move_pages", "pagemap_scan"}, paths
