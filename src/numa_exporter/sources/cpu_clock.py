"""A process's CPU-time clock: the nanoseconds all of its threads have run, in one call.

``clock_gettime(2)`` on a process CPU-time clock (the clock id ``clock_getcpuclockid(3)``
returns: ``(~pid << 3) | CPUCLOCK_SCHED`` on Linux) gives the scheduler's run time of the
whole thread group in nanoseconds: ``signal->sum_sched_runtime`` (threads that exited) plus
each live thread's ``se.sum_exec_runtime`` (``thread_group_cputime()``). The kernel checks no
permission for reading it (``posix_cpu_clock_get()`` → ``lookup_task()``), like the
process's ``stat``; it costs one system call whatever the thread count.

The value grows whenever any thread of the process is accounted time on a CPU: on its way
off a CPU, and at every tick while it stays on one. A process whose clock has not moved has
had no thread on a CPU since the clock was last read: no thread started, ran, migrated or
exited. The thread reader uses that to skip reading hundreds of unchanged thread files.

The pid is looked up in the *caller's* PID namespace, so the clock is used only where the
procfs root is the caller's own (its ``self`` names the caller's pid). Elsewhere (a fixture
tree, a host procfs seen from a container with its own PID namespace) :meth:`read` says
nothing and every thread is read as before.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from numa_exporter.sources.errors import classify

_CPUCLOCK_SCHED = 2
# clock_gettime answers EINVAL for a pid that is not a live thread-group leader in the
# caller's namespace (exited and reaped, or a thread id); ESRCH on some older kernels
_NO_SUCH_PROCESS = frozenset({errno.EINVAL, errno.ESRCH})


def clock_id(pid: int) -> int:
    """Return the clock id of process ``pid``'s CPU-time clock (Linux's
    ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``)."""
    return ((~pid) << 3) | _CPUCLOCK_SCHED


def same_pid_namespace(procfs: Path) -> bool:
    """Return whether ``procfs`` is a live procfs of the caller's own PID namespace (its
    ``self`` link names the caller's pid)."""
    try:
        return os.readlink(procfs / "self") == str(os.getpid())
    except OSError:
        return False


class ProcessCpuClock:
    """Reads processes' CPU-time clocks where the procfs root allows it (see the module)."""

    def __init__(self, procfs: Path) -> None:
        self.available = same_pid_namespace(procfs)

    def read(self, pid: int) -> int | None:
        """Return the nanoseconds process ``pid``'s threads have run, or None where the
        clock is not used (another PID namespace, a fixture root) or the pid is no live
        process. Raises a classified SourceError for any other error."""
        if not self.available:
            return None
        try:
            return time.clock_gettime_ns(clock_id(pid))
        except OSError as err:
            if err.errno in _NO_SUCH_PROCESS:
                return None
            raise classify("cpu_clock", f"clock of pid {pid}", err) from err
