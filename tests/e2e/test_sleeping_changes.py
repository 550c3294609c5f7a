"""Changes made while a process sleeps show within one scan interval (issue 24): the real
daemon over HTTP, real processes on this machine's /proc.

* ``taskset -p`` on the main thread of a sleeping two-thread process (a late bind: the
  other thread keeps its mask) and then ``taskset -a -p`` on all of them;
* a sleeping process below ``--process.min-resident`` grown by another process writing into
  its memory with ``process_vm_writev``: its CPU clock never moves.

"Within one interval": a scan that began after the change has finished (the scan counter
moved by two), never a wall-clock threshold.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.e2e.exposition import values

pytestmark = pytest.mark.e2e
MiB = 1 << 20

_TWO_THREADS = (
    "import sys, threading, time\n"
    "stop = threading.Event()\n"
    "t = threading.Thread(target=stop.wait); t.start()\n"
    "buf = bytearray(8 << 20)\n"
    "print(threading.get_native_id(), t.native_id, flush=True)\n"
    "time.sleep(600)\n"
)
_SPARSE = (
    "import ctypes, mmap, sys, time\n"
    "m = mmap.mmap(-1, 256 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
    "addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
    "print(addr, flush=True)\n"
    "time.sleep(600)\n"
)


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _write_into(pid: int, addr: int, size: int) -> None:
    """Write ``size`` bytes into process ``pid`` at ``addr`` with process_vm_writev."""
    libc = ctypes.CDLL(None, use_errno=True)
    chunk = 16 * MiB
    src = ctypes.create_string_buffer(b"\x5a" * chunk, chunk)
    for off in range(0, size, chunk):
        local = IoVec(ctypes.cast(src, ctypes.c_void_p), chunk)
        remote = IoVec(addr + off, chunk)
        n = libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n != chunk:
            raise OSError(ctypes.get_errno(), "process_vm_writev")


def _scans(text: str) -> float:
    (got,) = values(text, "numa_exporter_scans_total")
    return got[1]


def _after_next_scan(d: Any) -> str:
    """Return an exposition from a scan that began after this call."""
    start = _scans(d.metrics())
    return str(d.wait_scans(int(start) + 2, timeout=120.0))


@pytest.fixture
def sleeper() -> Iterator[Callable[[str, str], tuple[subprocess.Popen[bytes], str]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str, tag: str) -> tuple[subprocess.Popen[bytes], str]:
        p = subprocess.Popen([sys.executable, "-c", code, tag], stdout=subprocess.PIPE)
        procs.append(p)
        assert p.stdout is not None
        return p, p.stdout.readline().decode().strip()

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _outside(text: str, pid: int) -> tuple[list[float], list[float]]:
    count = [v for _, v in values(text, "numa_process_threads_outside_binding", pid=str(pid))]
    flag = [v for _, v in values(text, "numa_process_binding_mismatch", pid=str(pid),
                                 reason="threads_outside_binding")]
    return count, flag


def test_taskset_on_a_sleeping_process_shows_within_one_interval(
        start_daemon: Any, sleeper: Any) -> None:
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None:
        pytest.skip("needs two CPUs and taskset")
    tag = f"sleeper-taskset-{uuid.uuid4().hex[:8]}"
    proc, line = sleeper(_TWO_THREADS, tag)
    pid = proc.pid
    main_tid, worker = (int(x) for x in line.split())
    assert main_tid == pid
    d = start_daemon("--scan.interval=1s", "--process.min-resident=0", "--process.detail-above=0",
                     f"--process.include={tag}")
    d.wait_scans(2)
    assert _outside(_after_next_scan(d), pid) == ([], [0.0])  # unbound: nothing to escape
    cpu = min(os.sched_getaffinity(pid))
    # a late bind of the sleeping process: only its main thread
    subprocess.run(["taskset", "-p", "-c", str(cpu), str(pid)], check=True,
                   stdout=subprocess.DEVNULL)
    assert os.sched_getaffinity(worker) != {cpu}
    assert _outside(_after_next_scan(d), pid) == ([1.0], [1.0])
    # the remedy: every thread
    subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True,
                   stdout=subprocess.DEVNULL)
    assert _outside(_after_next_scan(d), pid) == ([0.0], [0.0])


def test_a_sleeping_process_grown_by_another_appears_within_one_interval(
        start_daemon: Any, sleeper: Any) -> None:
    tag = f"sleeper-grown-{uuid.uuid4().hex[:8]}"
    proc, line = sleeper(_SPARSE, tag)
    pid, addr = proc.pid, int(line)
    d = start_daemon("--scan.interval=1s", "--process.min-resident=64MiB",
                     f"--process.include={tag}")
    d.wait_scans(2)
    assert values(_after_next_scan(d), "numa_process_info", pid=str(pid)) == []
    try:
        _write_into(pid, addr, 128 * MiB)
    except OSError as err:
        pytest.skip(f"process_vm_writev refused here: {err}")
    text = _after_next_scan(d)
    assert values(text, "numa_process_info", pid=str(pid)) != []
    placed = sum(v for name in ("numa_process_local_memory_bytes",
                                "numa_process_remote_memory_bytes")
                 for _, v in values(text, name, pid=str(pid)))
    assert placed >= 128 * MiB
