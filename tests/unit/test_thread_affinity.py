"""Each thread's allowed CPUs: from task/<tid>/status in a tree, by sched_getaffinity on the
live /proc (readers/threads.py read_affinities)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from numa_exporter.parsers.pid_status import parse_pid_status_cpus_allowed
from numa_exporter.readers.threads import read_affinities
from numa_exporter.sources.procfs import ProcFS

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "realkernel"


def test_status_lines_of_a_real_capture() -> None:
    # split_threads (Debian 6.1 guest): leader on CPU 0, one worker pinned per node
    files = ProcFS(REAL / "split_threads" / "proc").process(150)
    errors: list[tuple[str, str]] = []
    got = read_affinities(files, [150, 151, 152, 999], False,
                          lambda s, p: errors.append((s, p)))
    assert got == {150: frozenset({0}), 151: frozenset({0}), 152: frozenset({1})}
    assert errors == []


def test_malformed_line_is_reported(tmp_path: Path) -> None:
    task = tmp_path / "7" / "task" / "7"
    task.mkdir(parents=True)
    (task / "status").write_bytes(b"Name:\tx\nCpus_allowed_list:\t0-zz\n")
    errors: list[tuple[str, str]] = []
    got = read_affinities(ProcFS(tmp_path).process(7), [7], False,
                          lambda s, p: errors.append((s, p)))
    assert got == {7: None} and errors and errors[0][0] == "status"
    assert parse_pid_status_cpus_allowed(b"Name:\tx\n") is None


def test_live_threads_by_syscall_see_a_mask_set_on_one_thread() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    ready, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def worker() -> None:
        tid.append(threading.get_native_id())
        os.sched_setaffinity(0, {cpus[0]})
        ready.set()
        done.wait()

    t = threading.Thread(target=worker)
    t.start()
    try:
        ready.wait()
        files = ProcFS(Path("/proc")).process(os.getpid())
        got = read_affinities(files, [os.getpid(), tid[0]], True, lambda s, p: None)
        by_status = read_affinities(files, [os.getpid(), tid[0]], False, lambda s, p: None)
    finally:
        done.set()
        t.join()
    assert got[tid[0]] == frozenset({cpus[0]})
    assert got[os.getpid()] == frozenset(os.sched_getaffinity(0))
    assert got == by_status
