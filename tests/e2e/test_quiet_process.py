"""A quiet process above the hold budget is read in full once and kept (issue 34): the real
daemon over HTTP, a real sleeping process on this machine's /proc.

The process (64 MiB of private anonymous memory, touched, then asleep) is made to exceed a
hold budget of 1 us, so the planner would sample it. Quiet (no fault, the same resident
size, nothing migrated with balancing off), it is read in full and that read is served:
its bytes per node are numa_maps' own, exactly. Then a change each makes the next scan read
it again: a fault of new memory by the process itself, and pages written into it from
outside with ``process_vm_writev`` (its resident size grows; the fault is the writer's).

"The next scan": a scan that began after the change has finished (the scan counter moved by
two), never a wall-clock threshold.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.exposition import values
from tests.e2e.test_sleeping_changes import _after_next_scan, _write_into

from numa_exporter.readers.sampled.reader import sampling_available

pytestmark = pytest.mark.e2e
MiB = 1 << 20

# 64 MiB touched; a 64 MiB mapping left unpopulated for another process to write into;
# on a line "grow" it faults 32 MiB more and says "grown"
_QUIET = (
    "import ctypes, mmap, sys\n"
    "buf = bytearray(b'\\x01' * (64 << 20))\n"
    "m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "print(ctypes.addressof(ctypes.c_char.from_buffer(m)), flush=True)\n"
    "more = []\n"
    "for line in sys.stdin:\n"
    "    more.append(bytearray(b'\\x02' * (32 << 20)))\n"
    "    print('grown', flush=True)\n"
)
_NODE = re.compile(r"\bN(\d+)=(\d+)")
_PAGE = re.compile(r"\bkernelpagesize_kB=(\d+)")


def numa_maps_bytes(pid: int) -> dict[str, float]:
    """Return the process's resident bytes per node as its numa_maps says (every line's
    N<node>= pages times its kernelpagesize_kB), node as the exported label."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        page = _PAGE.search(line)
        size = int(page[1]) * 1024 if page else 4096
        for node, pages in _NODE.findall(line):
            out[node] = out.get(node, 0.0) + int(pages) * size
    return {n: b for n, b in out.items() if b}


def served_bytes(text: str, pid: int) -> dict[str, float]:
    """Return the exported bytes per node of ``pid`` (numa_process_memory_bytes summed
    over kinds)."""
    out: dict[str, float] = {}
    for labels, v in values(text, "numa_process_memory_bytes", pid=str(pid)):
        out[labels["node"]] = out.get(labels["node"], 0.0) + v
    return {n: b for n, b in out.items() if b}


def _method(text: str, pid: int) -> tuple[str, str]:
    (info,) = values(text, "numa_process_placement_info", pid=str(pid))
    (why,) = values(text, "numa_process_placement_reason_info", pid=str(pid))
    return info[0]["method"], why[0]["reason"]


def _kept(text: str) -> float:
    got = values(text, "numa_exporter_placement_reads_skipped_total", reason="unchanged")
    return got[0][1] if got else 0.0


@pytest.fixture
def quiet() -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampled placement unavailable here (nothing to keep from): {why}")
    if Path("/proc/sys/kernel/numa_balancing").read_text().strip() != "0":
        pytest.skip("NUMA balancing is on: no process is ever judged unchanged")
    tag = f"quiet-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen([sys.executable, "-c", _QUIET, tag], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    addr = int(p.stdout.readline())
    yield p, addr, tag
    p.kill()
    p.wait()


def test_a_quiet_process_over_the_hold_budget_serves_numa_maps_exactly_until_it_changes(
        start_daemon: Any, quiet: tuple[subprocess.Popen[str], int, str]) -> None:
    proc, addr, tag = quiet
    pid = proc.pid
    d = start_daemon("--scan.interval=1s", "--process.min-resident=0",
                     "--process.detail-above=0", "--placement.hold-budget=0.000001",
                     f"--process.include={tag}")
    d.wait_scans(2)  # two scans of the process: the first read, then quiet
    text = _after_next_scan(d)
    assert _method(text, pid) == ("full", "quiet")
    assert served_bytes(text, pid) == numa_maps_bytes(pid)
    kept = _kept(text)
    assert kept >= 1
    text = _after_next_scan(d)  # still quiet: served again, not read
    assert _kept(text) > kept
    assert served_bytes(text, pid) == numa_maps_bytes(pid)

    # a fault of new memory by the process: the scan after it reads it again (by the
    # planned reader: sampled, or in full for its policies where its size moved by half);
    # quiet again, one full read: within the two scans it is exact again
    before = sum(served_bytes(text, pid).values())
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("grow\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "grown"
    text = _after_next_scan(d)
    assert sum(served_bytes(text, pid).values()) >= before + 32 * MiB
    text = _after_next_scan(d)
    assert _method(text, pid) == ("full", "quiet")
    assert served_bytes(text, pid) == numa_maps_bytes(pid)

    # pages written into it from outside: the fault is the writer's, the resident size
    # the process's
    before = sum(served_bytes(text, pid).values())
    try:
        _write_into(pid, addr, 32 * MiB)
    except OSError as err:
        pytest.skip(f"process_vm_writev refused here: {err}")
    text = _after_next_scan(d)
    assert sum(served_bytes(text, pid).values()) >= before + 32 * MiB
    text = _after_next_scan(d)
    assert served_bytes(text, pid) == numa_maps_bytes(pid)


# 8 MiB of 4 KiB pages touched, then asleep; on a line "collapse" it collapses 4 MiB of them
# into huge pages itself (madvise MADV_COLLAPSE: no fault, the same resident size; the
# kernel counts thp_collapse_alloc) and says "collapsed" or the error
_COLLAPSIBLE = (
    "import ctypes, mmap, sys\n"
    "m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "m.madvise(mmap.MADV_NOHUGEPAGE)\n"
    "m.write(b'\\x01' * (8 << 20))\n"
    "addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
    "off = (-addr) % (2 << 20)\n"
    "print('ready', flush=True)\n"
    "for line in sys.stdin:\n"
    "    try:\n"
    "        m.madvise(mmap.MADV_HUGEPAGE, off, 4 << 20)\n"
    "        m.madvise(25, off, 4 << 20)\n"  # MADV_COLLAPSE (6.1+)
    "        print('collapsed', flush=True)\n"
    "    except OSError as err:\n"
    "        print(f'refused: {err}', flush=True)\n"
)


def _vmstat(name: str) -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return 0


def _scans(text: str) -> float:
    (got,) = values(text, "numa_exporter_scans_total")
    return got[1]


def test_a_thp_collapse_of_a_quiet_process_makes_the_next_scan_read_it(
        start_daemon: Any) -> None:
    """khugepaged's or MADV_COLLAPSE's collapse copies a quiet process's pages into new huge
    pages without a fault of it or a change of its resident size; only the host's
    thp_collapse_alloc says so. Kept before (one skipped read a scan), the process is read
    again in a scan after the collapse. (Fails with the change evidence blind to
    thp_collapse_alloc: every scan keeps it.)"""
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampled placement unavailable here (nothing to keep from): {why}")
    if Path("/proc/sys/kernel/numa_balancing").read_text().strip() != "0":
        pytest.skip("NUMA balancing is on: no process is ever judged unchanged")
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text():
        pytest.skip("transparent huge pages are off here: nothing collapses")
    tag = f"collapse-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen([sys.executable, "-c", _COLLAPSIBLE, tag], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip() == "ready"
        d = start_daemon("--scan.interval=1s", "--process.min-resident=0",
                         "--process.detail-above=0", "--placement.hold-budget=0.000001",
                         f"--process.include={tag}")
        d.wait_scans(3)
        text = _after_next_scan(d)
        # quiet: every scan from here keeps it
        k0, s0 = _kept(text), _scans(text)
        text = _after_next_scan(d)
        k1, s1 = _kept(text), _scans(text)
        assert k1 - k0 == s1 - s0 >= 2
        collapsed = _vmstat("thp_collapse_alloc")
        p.stdin.write("collapse\n")
        p.stdin.flush()
        said = p.stdout.readline().strip()
        if said != "collapsed" or _vmstat("thp_collapse_alloc") == collapsed:
            pytest.skip(f"the kernel did not collapse the pages here ({said})")
        text = _after_next_scan(d)
        k2, s2 = _kept(text), _scans(text)
        assert k2 - k1 < s2 - s1, "every scan after the collapse kept the process"
        text = _after_next_scan(d)  # and once quiet again, exact
        assert served_bytes(text, p.pid) == numa_maps_bytes(p.pid)
    finally:
        p.kill()
        p.wait()
