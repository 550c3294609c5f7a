"""Selection: which processes a scan reads, and in what order.

Every pid is screened from two lines of its ``status`` (VmRSS + HugetlbPages against
``--process.min-resident``; the full parse only for those that pass), then by the
include/exclude patterns; the ``--process.top`` largest are kept, the processes left over by
the last scan go first, and each candidate's ``stat`` gives its identity (start time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from numa_exporter.config import Config
from numa_exporter.model.process_state import ProcessKey
from numa_exporter.parsers.pid_stat import PidStat
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.process_files import (
    read_cmdline,
    read_live_thread,
    read_stat,
    read_status,
)
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

# The states a process considered by a scan ends in, one each (see collectors/exporter.py).
STATES = ("scanned", "kept", "skipped", "denied", "gone")


def new_states() -> dict[str, int]:
    """Return a zero count per state."""
    return dict.fromkeys(STATES, 0)


@dataclass(slots=True)
class Candidate:
    """A process selected for reading: its parsed status and, once read, its stat."""

    pid: int
    status: PidStatus
    files: ProcessFiles
    stat: PidStat | None = None

    @property
    def key(self) -> ProcessKey:
        """Return the process's identity (pid + start time; -1 before stat is read)."""
        return ProcessKey(self.pid, self.stat.starttime if self.stat else -1)

    @property
    def resident(self) -> int:
        """Return VmRSS + HugetlbPages (hugetlb pages are not in VmRSS) in bytes."""
        return (self.status.vm_rss or 0) + (self.status.hugetlb or 0)


def texts(files: ProcessFiles, comm: str) -> tuple[str, str]:
    """Return (comm, cmdline) for matching patterns; cmdline is empty when unreadable."""
    return comm, read_cmdline(files)


def matches(config: Config, files: ProcessFiles, comm: str) -> bool:
    """Return whether the process passes ``--process.include`` and ``--process.exclude``."""
    inc, exc = config.include, config.exclude
    if inc is None and exc is None:
        return True
    # no generators: this runs for every process of the host each scan
    if exc is None and comm and inc is not None and inc.search(comm):
        return True  # the command line cannot change the answer: not read
    cmdline = read_cmdline(files)
    if inc is not None and not ((comm and inc.search(comm))
                                or (cmdline and inc.search(cmdline))):
        return False
    return not (exc is not None and ((comm and exc.search(comm))
                                     or (cmdline and exc.search(cmdline))))


def screen(proc: ProcFS, pid: int, config: Config, errors: ErrorReporter,
           states: dict[str, int], statm: bool = False) -> Candidate | None:
    """Return the candidate for ``pid``, or None (counted in ``states``, except kernel
    threads, which have no user memory and are not processes for this exporter).

    ``statm``: no hugetlb page is in use on the host; screen by ``statm`` first."""
    files = proc.process(pid)
    patterns = config.include is not None or config.exclude is not None
    try:
        # the patterns are matched before the full parse: most processes stop there
        status = read_status(files, config.min_resident, errors,
                             (lambda name: matches(config, files, name)) if patterns else None,
                             statm)
    except Gone:
        states["gone"] += 1
        return None
    except SourceError as err:
        errors.read(err)
        states["denied" if isinstance(err, Denied) else "skipped"] += 1
        return None
    if status is None:
        states["skipped"] += 1  # the common case: decided from two lines
        return None
    if status.vm_rss is None:  # a kernel thread, or a process whose main thread exited
        if status.kthread:  # the kernel says so in status (PF_KTHREAD): no stat read
            return None
        try:
            return _without_leader(files, pid, config, errors, states)
        except Gone:
            states["gone"] += 1
            return None
        except SourceError as err:
            errors.read(err)
            states["denied" if isinstance(err, Denied) else "skipped"] += 1
            return None
    cand = Candidate(pid, status, files)
    if cand.resident < config.min_resident:
        states["skipped"] += 1
        return None
    return cand


def _without_leader(files: ProcessFiles, pid: int, config: Config, errors: ErrorReporter,
                    states: dict[str, int]) -> Candidate | None:
    """Return the candidate of a process whose status shows no memory: None for a kernel
    thread (PF_KTHREAD in its stat flags: not counted), else the process read through a
    live thread (its leader is a zombie), or None counted as gone when none is left.
    Raises the SourceError of a read."""
    stat = read_stat(files, errors)
    if stat is None:
        states["skipped"] += 1
        return None
    if stat.kernel_thread:
        return None  # no user memory: not a process for this exporter
    found = read_live_thread(files, config.min_resident, errors)
    if found is None:
        states["gone"] += 1  # every thread has exited: the process is on its way out
        return None
    via, status = found
    if status is None:
        states["skipped"] += 1
        return None
    cand = Candidate(pid, status, via, stat)
    if cand.resident < config.min_resident or not matches(config, via, stat.comm):
        states["skipped"] += 1
        return None
    return cand


def select(proc: ProcFS, config: Config, errors: ErrorReporter, pending: Sequence[int],
           states: dict[str, int], statm: bool = False
           ) -> tuple[list[Candidate], frozenset[int]]:
    """Return the candidates in reading order (each with its stat read) and every pid listed.

    ``statm``: no hugetlb page is in use on the host (see :func:`screen`). Raises the
    SourceError of listing the procfs root.
    """
    out: list[Candidate] = []
    pids = proc.pids()
    for pid in pids:
        try:
            cand = screen(proc, pid, config, errors, states, statm)
        except Exception as exc:  # one bad file costs one process, never the scan
            errors.bug("status", f"{proc.root}/{pid}/status", exc)
            states["skipped"] += 1
            continue
        if cand is not None:
            out.append(cand)
    out.sort(key=lambda c: (-c.resident, c.pid))
    if config.top and len(out) > config.top:
        states["skipped"] += len(out) - config.top
        out = out[: config.top]
    # processes left over by the last scan's budget go first
    first = {p: i for i, p in enumerate(pending)}
    out.sort(key=lambda c: (0, first[c.pid]) if c.pid in first else (1, 0))
    keyed: list[Candidate] = []
    for cand in out:
        try:
            cand.stat = read_stat(cand.files, errors)
        except Gone:
            states["gone"] += 1
            continue
        except SourceError as err:
            errors.read(err)
            states["skipped"] += 1
            continue
        if cand.stat is None:
            states["skipped"] += 1
            continue
        keyed.append(cand)
    return keyed, frozenset(pids)
