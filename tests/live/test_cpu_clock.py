"""The process CPU clock on the real kernel: one call gives the run time of every thread of
another process, stands still while none runs, and says nothing for what it cannot name."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from numa_exporter.sources.cpu_clock import ProcessCpuClock, clock_id, same_pid_namespace

PROC = Path("/proc")
live = pytest.mark.skipif(not same_pid_namespace(PROC), reason="/proc is not this PID namespace")

SLEEPER = ("import threading,sys\n"
           "ev=threading.Event()\n"
           "ts=[threading.Thread(target=ev.wait,daemon=True) for _ in range(20)]\n"
           "[t.start() for t in ts]\n"
           "print('ready',flush=True); sys.stdin.read()\n")


def _start(code: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def _settled(read: Callable[[], int | None], still: int = 5, tries: int = 500) -> int | None:
    """Return ``read()`` once ``still`` readings in a row, 10 ms apart, agree (polled; fails
    if they never do)."""
    prev, same = read(), 1
    for _ in range(tries):
        time.sleep(0.01)
        cur = read()
        same = same + 1 if cur == prev else 1
        if same >= still:
            return cur
        prev = cur
    pytest.fail("the clock never stood still")


@live
def test_clock_of_a_sleeping_process_stands_still_and_matches_its_threads() -> None:
    clock = ProcessCpuClock(PROC)
    p = _start(SLEEPER)
    try:
        # polled until five readings in a row agree: the threads have parked, and the clock
        # stands still while none runs (not a nanosecond); fails if it never does
        a = _settled(lambda: clock.read(p.pid))
        assert a is not None and a > 0
        # the sum over the live threads' schedstat run times (the clock also holds threads
        # that exited, so it is at least that sum)
        task = PROC / str(p.pid) / "task"
        threads = sum(int((task / t / "schedstat").read_text().split()[0])
                      for t in os.listdir(task))
        assert a >= threads > 0
    finally:
        p.kill()
        p.wait()


@live
def test_clock_moves_when_any_thread_runs() -> None:
    clock = ProcessCpuClock(PROC)
    p = _start(SLEEPER)
    try:
        a = clock.read(p.pid)
        assert p.stdin is not None
        p.stdin.write("x")  # the main thread wakes, reads a byte and sleeps again
        p.stdin.flush()
        deadline = time.monotonic() + 30
        while clock.read(p.pid) == a and time.monotonic() < deadline:
            time.sleep(0.01)
        b = clock.read(p.pid)
        assert a is not None and b is not None and b > a
    finally:
        p.kill()
        p.wait()


@live
def test_own_clock_is_the_process_cpu_time_clock() -> None:
    # the clock id is the one clock_getcpuclockid(3) gives for a pid: for this process it
    # runs with CLOCK_PROCESS_CPUTIME_ID (read in between, so the order is known)
    own = clock_id(os.getpid())
    a = time.clock_gettime_ns(own)
    b = time.clock_gettime_ns(time.CLOCK_PROCESS_CPUTIME_ID)
    c = time.clock_gettime_ns(own)
    assert a <= b <= c


@live
def test_a_reaped_pid_and_a_thread_id_are_no_process() -> None:
    clock = ProcessCpuClock(PROC)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # reaped: the pid names nothing until it is handed out again
    assert clock.read(p.pid) is None or os.path.exists(f"/proc/{p.pid}")
    ready = threading.Event()
    done = threading.Event()
    tid: list[int] = []

    def worker() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait()

    t = threading.Thread(target=worker)
    t.start()
    try:
        ready.wait()
        assert clock.read(tid[0]) is None  # a thread, not a thread-group leader
    finally:
        done.set()
        t.join()


def test_a_fixture_tree_or_foreign_procfs_has_no_clock(tmp_path: Path) -> None:
    (tmp_path / "self").symlink_to("1")  # a procfs of another PID namespace: self is not us
    assert not same_pid_namespace(tmp_path)
    assert ProcessCpuClock(tmp_path).read(os.getpid()) is None
    assert ProcessCpuClock(tmp_path / "missing").read(os.getpid()) is None
