"""What is timed for one target process: the kernel's read, numastat -p and the exporter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

from numa_exporter.parsers.numa_maps import COMPILED, parse_numa_maps
from numa_exporter.readers.threads import ThreadReading, read_threads
from numa_exporter.sources.files import STREAM_CHUNK
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.threads import TaskDir, ThreadMissing

REPO = Path(__file__).resolve().parents[1]
Contender = Callable[[], object]


def _errors(source: str, path: str) -> None:
    raise AssertionError(f"unexpected malformed {source}: {path}")


def raw_read(pid: int) -> Contender:
    """Read numa_maps to its end and drop the bytes: the kernel's page-table walk alone."""
    path = f"/proc/{pid}/numa_maps"

    def run() -> int:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        n = 0
        try:
            while chunk := os.read(fd, STREAM_CHUNK):
                n += len(chunk)
        finally:
            os.close(fd)
        return n

    return run


def numastat(pid: int) -> Contender | None:
    """Run ``numastat -p PID`` (Debian's numactl package), or None when it is missing."""
    exe = shutil.which("numastat")
    if exe is None:
        return None
    cmd = [exe, "-p", str(pid)]
    return lambda: subprocess.run(cmd, capture_output=True, check=True)


def exporter(pid: int, compiled: bool | None = None, maps: bool = True,
             threads: bool = True, warm: bool = True) -> Contender:
    """The exporter's read of one process: placement parse plus the thread readings.

    ``warm`` passes the previous run's readings, as the daemon does from its second scan on.
    """
    files = ProcFS(Path("/proc")).process(pid)
    state: dict[int, ThreadReading] = {}

    def run() -> object:
        out = None
        if maps:
            out = parse_numa_maps(files.numa_maps(), compiled=compiled)
            assert out.error_count == 0, out.errors
        if threads:
            got = read_threads(files, state if warm else {}, _errors)
            state.clear()
            state.update((r.tid, r) for r in got)
        return out

    if threads and warm:
        run()
    return run


def load_module(ref: str, name: str) -> types.ModuleType | None:
    """Return the parser module ``name`` as it was at git ``ref`` (exec'd from ``git show``),
    or None where the ref or the file is missing."""
    try:
        src = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{ref}:src/numa_exporter/parsers/{name}.py"],
            capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    mod = types.ModuleType(f"{name}_at_{ref.replace('/', '_')}")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(src, f"{ref}:{name}.py", "exec"), mod.__dict__)
    return mod


def load_baseline(ref: str) -> tuple[types.ModuleType, types.ModuleType] | None:
    """Return ``ref``'s numa_maps and pid_sched parser modules read from git, or None."""
    numa_maps, pid_sched = load_module(ref, "numa_maps"), load_module(ref, "pid_sched")
    if numa_maps is None or pid_sched is None:
        return None
    return numa_maps, pid_sched


def baseline(pid: int, mods: tuple[types.ModuleType, types.ModuleType]) -> Contender:
    """The same read as the baseline branch did it: numa_maps line by line, every thread's
    stat and sched parsed in full."""
    from numa_exporter.parsers.pid_stat import parse_pid_stat

    numa_maps, pid_sched = mods
    files = ProcFS(Path("/proc")).process(pid)
    path = files.path / "numa_maps"

    def lines() -> Iterator[bytes]:
        with open(path, "rb", buffering=64 << 10) as fh:
            while line := fh.readline(1 << 20):
                yield line

    def run() -> object:
        out = numa_maps.parse_numa_maps(lines())
        with TaskDir(files) as task:
            for tid in task.tids():
                parse_pid_stat(task.read(f"{tid}/stat", "task_stat"))
                try:
                    sched = task.read(f"{tid}/sched", "sched")
                except ThreadMissing:
                    continue  # CONFIG_SCHED_DEBUG off, or the thread exited
                pid_sched.parse_pid_sched(sched)
        return out

    return run


def contenders(pid: int, threads: int, baseline_mods: tuple[types.ModuleType,
               types.ModuleType] | None) -> dict[str, Contender]:
    """Return the contenders for a target with ``threads`` threads, by name."""
    out: dict[str, Contender] = {"raw": raw_read(pid)}
    ns = numastat(pid)
    if ns is not None:
        out["numastat"] = ns
    out["exporter"] = exporter(pid)
    if COMPILED:
        out["exporter_python"] = exporter(pid, compiled=False)
    if baseline_mods is not None:
        out["baseline"] = baseline(pid, baseline_mods)
    if threads > 1:
        out["threads_warm"] = exporter(pid, maps=False)
        out["threads_cold"] = exporter(pid, maps=False, warm=False)
    return out
