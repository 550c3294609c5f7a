"""The real daemon on this machine's /proc picks the reader per process: sampled above the
cost threshold, full below it, and says which in the exposition."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import Daemon
from tests.e2e.exposition import values

from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.readers.sampled.reader import sampling_available

pytestmark = pytest.mark.e2e
MiB = 1 << 20
SIZE_MIB = 768  # ~6 ms estimated full read at 8 ms/GiB: above the 5 ms default threshold

_CHILD = (
    "import mmap, sys, time\n"
    "m = mmap.mmap(-1, {size} << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "for i in range(0, len(m), 4096): m[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(180)\n"
)


@pytest.fixture
def big_child() -> Iterator[subprocess.Popen[bytes]]:
    ok, reason = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"move_pages unusable here: {reason}")
    p = subprocess.Popen([sys.executable, "-c", _CHILD.format(size=SIZE_MIB), "cadence-big"],
                         stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        yield p
    finally:
        p.kill()
        p.wait()


def _scrape_for(d: Daemon, pid: int, name: str, tries: int = 20) -> str:
    text = ""
    for _ in range(tries):
        text = d.wait_scans(1)
        if values(text, name, pid=str(pid)):
            return text
        time.sleep(0.5)
    raise AssertionError(f"{name} for {pid} never appeared:\n{d.log_path.read_text()[-2000:]}")


def test_big_process_is_sampled_and_says_so(start_daemon, big_child) -> None:  # type: ignore[no-untyped-def]
    pid = big_child.pid
    # no full read for memory policies at discovery: this test is about the sampled read
    d = start_daemon("--process.min-resident=512MiB", "--process.detail-above=0",
                     "--scan.interval=1s", "--placement.policy-interval=0",
                     "--process.include=cadence-big")
    text = _scrape_for(d, pid, "numa_process_placement_info")
    assert values(text, "numa_process_placement_info", pid=str(pid), method="sampled")
    (samples,) = values(text, "numa_process_placement_sampled_pages", pid=str(pid))
    assert samples[1] >= 1000
    (err,) = values(text, "numa_process_remote_memory_ratio_stderr", pid=str(pid))
    assert 0 <= err[1] <= 0.0051  # one host node: nothing is remote, the bound still holds
    got = sum(v for _, v in values(text, "numa_process_memory_bytes", pid=str(pid)))
    with open(f"/proc/{pid}/numa_maps", "rb") as fh:
        full = parse_numa_maps(fh)
    exact = sum(full.bytes.values())
    assert abs(got - exact) <= 0.02 * exact, (got, exact)


def test_threshold_zero_reads_everything_in_full(start_daemon, big_child) -> None:  # type: ignore[no-untyped-def]
    pid = big_child.pid
    d = start_daemon("--process.min-resident=512MiB", "--process.detail-above=0",
                     "--scan.interval=1s",
                     "--process.include=cadence-big", "--placement.sample-above=0")
    text = _scrape_for(d, pid, "numa_process_placement_info")
    assert values(text, "numa_process_placement_info", pid=str(pid), method="full")
    assert not values(text, "numa_process_placement_sampled_pages", pid=str(pid))
    d.wait_scans(2)  # the flag is deprecated: said once at start, not every scan
    assert d.log_path.read_text().count("--placement.sample-above is deprecated") == 1
