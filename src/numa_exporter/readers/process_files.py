"""Per-process files read and parsed: status, stat, cmdline, cgroup, numa_maps, boot time.

Each function reads through :class:`ProcessFiles` (or :class:`ProcFS`) and parses with the
file's own parser. Malformed files are reported to the :class:`ErrorReporter`; read errors
are raised as the classified SourceError (the caller decides what a process's state is),
except where a function says it reports them itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from numa_exporter.parsers.numa_maps import NumaMaps, parse_numa_maps
from numa_exporter.parsers.pid_comm import parse_pid_comm
from numa_exporter.parsers.pid_stat import PidStat, parse_pid_stat
from numa_exporter.parsers.pid_statm import parse_pid_statm
from numa_exporter.parsers.pid_status import (
    PidStatus,
    parse_pid_status,
    parse_pid_status_name,
    parse_pid_status_resident,
)
from numa_exporter.parsers.proc_cgroup import ProcCgroup, parse_proc_cgroup
from numa_exporter.parsers.proc_stat import parse_btime
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.deadline import NEVER, Deadline
from numa_exporter.sources.errors import Gone, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS
from numa_exporter.sources.threads import TaskDir


class HoldMeter:
    """The longest CPU time one chunk of a read took to arrive: one ``read()`` of a
    seq_file such as numa_maps, so one hold of the target's mmap lock."""

    def __init__(self, cpu: Callable[[], float]) -> None:
        self.cpu = cpu
        self.longest = 0.0

    def timed(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Return ``chunks`` as they are, timing each one's arrival into ``longest``."""
        cpu = self.cpu
        it = iter(chunks)
        while True:
            t = cpu()
            chunk = next(it, None)
            self.longest = max(self.longest, cpu() - t)
            if chunk is None:
                return
            yield chunk


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _kthread_line(raw: bytes) -> bool | None:
    """Return the Kthread line of a status (PF_KTHREAD, printed since 6.x), None without it."""
    if b"\nKthread:\t1\n" in raw:
        return True
    if b"\nKthread:\t0\n" in raw:
        return False
    return None


#: The last parsed status of each process, by pid, with the bytes it was parsed from
#: (see :func:`read_status`); its owner drops the pids no longer listed.
StatusMemo = dict[int, tuple[bytes, PidStatus]]


def read_status(files: ProcessFiles, min_resident: int, errors: ErrorReporter,
                keep: Callable[[str], bool] | None = None, statm: bool = False,
                memo: StatusMemo | None = None) -> PidStatus | None:
    """Return the parsed status, or None when its resident memory (VmRSS + HugetlbPages) is
    below ``min_resident`` (decided from two lines, the common case) or when ``keep``,
    given the process's name, says no (decided before the full parse).

    With ``statm`` (the caller knows no hugetlb page is in use on the host, so HugetlbPages
    is 0 everywhere), ``statm`` decides first: a process below ``min_resident`` there is
    not read further; one without an mm (a kernel thread or a zombie leader) and an
    unreadable or malformed statm leave the decision to status. The status of a kernel
    thread or a zombie leader has ``vm_rss`` None, and ``kthread`` from its Kthread line
    where the kernel prints one.

    With ``keep`` and no ``min_resident`` (the size decides nothing), a process with an mm
    is matched on its ``comm`` first and status is read only for those ``keep`` takes.
    With ``memo``, a status whose bytes are those of the last parse of the same pid is not
    parsed again (the parse is a pure function of the bytes; a sleeping process's status
    stays the same byte for byte), and the memo keeps the latest parse.
    Raises the SourceError of the read.
    """
    if statm and min_resident > 0:
        try:
            pages = parse_pid_statm(files.statm())
        except SourceError:  # status says what is wrong (or has what statm lacks)
            pages = None
        # size 0: a kernel thread or a zombie leader; status tells them apart (Kthread)
        if (pages is not None and pages.size_pages != 0
                and pages.resident_pages * PAGE_SIZE < min_resident):
            return None
    elif keep is not None and min_resident <= 0:
        kept = _kept_by_comm(files, keep)
        if kept is False:
            return None
        if kept:
            keep = None  # decided: status is not asked again
    raw = files.status()
    vm_rss, hugetlb = parse_pid_status_resident(raw)
    if vm_rss is None and b"\nVmRSS:" not in raw:  # a kernel thread or a zombie leader
        return PidStatus(parse_pid_status_name(raw), None, None, None, None, None, None, None,
                         None, None, None, kthread=_kthread_line(raw))
    if vm_rss is not None and (vm_rss + hugetlb < min_resident or (
            keep is not None and not keep(parse_pid_status_name(raw)))):
        return None
    last = memo.get(files.pid) if memo is not None else None
    if last is not None and last[0] == raw:
        status = last[1]
    else:
        status = parse_pid_status(raw)
        if memo is not None:
            memo[files.pid] = (raw, status)
    if status.error_count:
        errors.parse("status", f"{files.path}/status")
    return status


def _kept_by_comm(files: ProcessFiles, keep: Callable[[str], bool]) -> bool | None:
    """Return what ``keep`` says of the name in ``comm`` (the name status shows, written by
    the kernel for a fraction of status' cost) for a process with an mm (statm's size is
    not 0); None when status must decide: no mm (a kernel thread or a zombie leader, which
    status tells apart), or either file unreadable or malformed."""
    try:
        pages = parse_pid_statm(files.statm())
        if pages is None or pages.size_pages == 0:
            return None
        return keep(parse_pid_comm(files.comm()))
    except SourceError:  # status says what is wrong
        return None


def read_live_thread(files: ProcessFiles, min_resident: int, errors: ErrorReporter
                     ) -> tuple[ProcessFiles, PidStatus | None] | None:
    """Return a process whose main thread exited (leader a zombie, its status without
    VmRSS) as the files read through its first live thread with memory, and that thread's
    status (None when below ``min_resident``); None when no thread holds memory (the whole
    process is exiting). Threads that exit meanwhile are passed over; raises the
    SourceError of listing the threads (Gone when none is listed)."""
    with TaskDir(files) as task:
        tids = task.tids()
    for tid in tids:
        if tid == files.pid:
            continue
        via = files.through(tid)
        try:
            status = read_status(via, min_resident, errors)
        except Gone:
            continue
        if status is None:
            return via, None
        if status.vm_rss is not None:
            return via, status
    return None


def read_resident_pages(files: ProcessFiles) -> int | None:
    """Return the resident pages ``statm`` shows (one ``pread`` on a held descriptor where
    the root is live), or None when it cannot be read or parsed (the caller screens the
    process again, which reports what is wrong)."""
    try:
        pages = parse_pid_statm(files.statm())
    except SourceError:
        return None
    return pages.resident_pages if pages is not None else None


def read_stat(files: ProcessFiles, errors: ErrorReporter) -> PidStat | None:
    """Return the parsed stat (None when malformed, reported); raises the read's SourceError."""
    stat = parse_pid_stat(files.stat())
    if stat is None:
        errors.parse("stat", f"{files.path}/stat")
    return stat


def read_cmdline(files: ProcessFiles) -> str:
    """Return the command line with NULs as spaces, decoded leniently; "" when unreadable."""
    try:  # not contextlib.suppress: this runs for every process of the host with patterns
        raw = files.cmdline()
    except SourceError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


#: Parsed cgroup files by their bytes: most processes of a host share a few cgroups, and the
#: parse is pure. Bounded: emptied when full.
_CGROUPS: dict[bytes, ProcCgroup] = {}
MAX_CGROUPS = 1024


def parse_cgroup_cached(raw: bytes) -> ProcCgroup:
    """Return ``parse_proc_cgroup(raw)``, from the cache when the same bytes were parsed."""
    cg = _CGROUPS.get(raw)
    if cg is None:
        if len(_CGROUPS) >= MAX_CGROUPS:
            _CGROUPS.clear()
        cg = _CGROUPS[raw] = parse_proc_cgroup(raw)
    return cg


def read_cgroup(files: ProcessFiles, errors: ErrorReporter) -> ProcCgroup | None:
    """Return the parsed cgroup file; None when unreadable (reported). Raises Gone."""
    try:
        cg = parse_cgroup_cached(files.cgroup())
    except Gone:
        raise
    except SourceError as err:
        errors.read(err)
        return None
    if cg.error_count:
        errors.parse("cgroup", f"{files.path}/cgroup")
    return cg


def read_numa_maps(files: ProcessFiles, deadline: Deadline = NEVER,
                   hold: HoldMeter | None = None) -> NumaMaps:
    """Return the totals of the process's numa_maps, checking ``deadline`` before each
    chunk and timing each chunk into ``hold`` when given.

    Malformed lines are counted in the result (the caller reports them); raises the
    read's SourceError, or ``Expired`` past ``deadline``.
    """
    chunks = deadline.each(files.numa_maps())
    return parse_numa_maps(hold.timed(chunks) if hold is not None else chunks)


def read_boot_time(proc: ProcFS, errors: ErrorReporter) -> int | None:
    """Return the boot time from ``stat`` (None when unreadable or malformed; reported)."""
    btime: int | None = None
    try:
        btime = parse_btime(proc.stat())
    except SourceError as err:
        errors.read(err)
    if btime is None:
        errors.parse("stat", f"{proc.root}/stat")
    return btime
