"""Parser for ``/proc/<pid>/stat`` and ``/proc/<pid>/task/<tid>/stat`` (proc(5))."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from numa_exporter.parsers._kv import MAX_DIGITS, to_int
from numa_exporter.parsers.cpulist import MAX_CPU_ID
from numa_exporter.parsers.text import label_text

_MIN_FIELDS = 20  # state .. starttime at least (fields 3..22)
# the numeric fields, space-joined: each ASCII decimal with an optional '-' (as ``to_int``);
# one match checks them all, and only the fields used are converted
_NUMBERS = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}(?: -?[0-9]{{1,{MAX_DIGITS}}})*")


PF_KTHREAD = 0x00200000  # include/linux/sched.h: "I am a kernel thread"


@dataclass(frozen=True, slots=True)
class PidStat:
    """Fields of a stat line that the exporter uses; times in clock ticks.

    ``comm`` is safe text (``_text.label_text``): bytes that are not UTF-8 become ``\\xNN``.
    """

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    processor: int | None  # last CPU; absent on very old kernels
    flags: int = 0  # the task's PF_* flags (field 9)
    # what exec() sets anew (see exec_marker); None: not shown (no mm, or no ptrace access)
    image: tuple[int, ...] | None = None
    # faults the process took, live and exited threads together (fields 10 and 12; children
    # not included): minor and major, as mm_account_fault() in mm/memory.c counts them
    minflt: int = 0
    majflt: int = 0

    @property
    def faults(self) -> int:
        """Return the faults the process took (minor + major)."""
        return self.minflt + self.majflt

    @property
    def kernel_thread(self) -> bool:
        """Return whether the kernel says this is a kernel thread (PF_KTHREAD in flags)."""
        return bool(self.flags & PF_KTHREAD)


#: Fields of the program image exec() lays out anew: startcode, endcode, startstack (26-28).
#: With address-space randomisation each exec gives new values even for the same program
#: (the stack always, the code of a PIE); without it, another program's code ends
#: elsewhere. No other user moves them (only ``prctl(PR_SET_MM)`` with CAP_SYS_RESOURCE, on
#: the caller itself, which CRIU uses). Not arg_start..env_end (48-51): privileged programs
#: move those to rename themselves (systemd's ``rename_process``), which is no exec. Without
#: randomisation an exec of the same binary with the same arguments keeps all three: the
#: address space generation (``sources/exec_probe.py``) tells that exec; this is its fallback.
_IMAGE_FIELDS = (26, 27, 28)


def exec_marker(field: Callable[[int], int], count: int) -> tuple[int, ...] | None:
    """Return the image fields of a stat line (``field(n)`` is field n, ``count`` the last
    field there is), or None where the kernel hides them: all zero without an mm (a zombie
    leader), 1, 1, 0... where the reader may not ptrace the process (``do_task_stat``'s
    ``permitted``)."""
    got = tuple(field(n) for n in _IMAGE_FIELDS if n <= count)
    if len(got) < len(_IMAGE_FIELDS) or not any(got) or (got[0] == 1 and got[1] == 1
                                                         and not any(got[2:])):
        return None
    return got


def parse_pid_stat(data: bytes) -> PidStat | None:
    """Return the parsed stat line, or None when it is malformed.

    Every number must be ASCII decimal; the fields used are non-negative and the last CPU is
    below the kernel's NR_CPUS bound (8192). Never raises.
    """
    open_p = data.find(b"(")
    close_p = data.rfind(b")")  # comm may itself contain ')' and spaces
    if open_p <= 0 or close_p < open_p:
        return None
    head = data[:open_p].strip()
    tail = data[close_p + 1 :]
    if not head.isascii() or not tail.isascii():
        return None
    rest = tail.decode("ascii").split()
    # rest[0] is field 3 (state); field N is rest[N - 3]
    if len(rest) < _MIN_FIELDS:
        return None
    pid = to_int(head.decode("ascii"))
    if pid is None or pid <= 0 or _NUMBERS.fullmatch(" ".join(rest[1:])) is None:
        return None

    def field(n: int) -> int:
        return int(rest[n - 3])

    used = (field(4), field(9), field(10), field(12), field(14), field(15), field(20),
            field(22))
    processor = field(39) if len(rest) >= 37 else None
    if any(v < 0 for v in used) or (processor is not None and not 0 <= processor <= MAX_CPU_ID):
        return None
    return PidStat(
        pid=pid,
        comm=label_text(data[open_p + 1 : close_p]),
        state=rest[0],
        ppid=field(4),
        utime=field(14),
        stime=field(15),
        num_threads=field(20),
        starttime=field(22),
        processor=processor,
        flags=field(9),
        minflt=field(10),
        majflt=field(12),
        image=exec_marker(field, len(rest) + 2),
    )
