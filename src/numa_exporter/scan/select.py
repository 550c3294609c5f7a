"""Selection: which processes a scan reads, and in what order.

Every pid is screened from two lines of its ``status`` (VmRSS + HugetlbPages against
``--process.min-resident``; the full parse only for those that pass, and not again while
the bytes are those it was parsed from: :attr:`ScreenMemo.status`), then by the
include/exclude patterns; the ``--process.top`` largest are kept, the processes left over by
the last scan go first, and each candidate's ``stat`` gives its identity (start time).

A process screened out stays out, without its status read, while its CPU clock
(:mod:`numa_exporter.sources.cpu_clock`) has not moved (:class:`ScreenMemo`), its resident
size is the same and the verdict is younger than :data:`MEMO_MAX_AGE`. Its name (``prctl``,
``exec``, or a write to its own ``comm``: the kernel refuses other writers) and its command
line (its own memory) change only when one of its threads runs. Its resident size does not:
another process writing into it (``process_vm_writev``, ptrace), a ``CLONE_VM`` child, a
userfaultfd handler or khugepaged collapsing its pages grow it while it sleeps. So where the
size decides (``--process.min-resident`` above 0) each kept verdict costs one ``statm``
``pread`` (on a held descriptor) and stands only while the resident page count is the one
it was made with; and no verdict outlives :data:`MEMO_MAX_AGE`, whatever the clock says.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from numa_exporter.config import Config
from numa_exporter.model.process_state import ProcessKey
from numa_exporter.model.snapshot import Outcome
from numa_exporter.parsers.pid_stat import PidStat
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.process_files import (
    StatusMemo,
    read_cmdline,
    read_live_thread,
    read_resident_pages,
    read_stat,
    read_status,
)
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

Outcomes = Counter[Outcome]


class Verdict(Enum):
    """Why screening passed a process over. A decision (``OUT``, ``KERNEL_THREAD``) stands
    while the process does not run; a failed read (``GONE``, ``DENIED``, ``FAILED``) does
    not."""

    OUT = "out"  # below the size, or not matching the patterns: counted skipped
    KERNEL_THREAD = "kernel_thread"  # no user memory: not counted at all
    GONE = "gone"
    DENIED = "denied"
    FAILED = "failed"  # a read failed otherwise, or a file was malformed: counted skipped

    @property
    def decided(self) -> bool:
        """Return whether the verdict is a decision (kept while the process does not run)."""
        return self in (Verdict.OUT, Verdict.KERNEL_THREAD)

    @property
    def outcome(self) -> Outcome | None:
        """Return the scan state the verdict counts as (None: not counted)."""
        return _COUNTED_AS[self]


_COUNTED_AS = {Verdict.OUT: Outcome.SKIPPED, Verdict.KERNEL_THREAD: None,
               Verdict.GONE: Outcome.GONE, Verdict.DENIED: Outcome.DENIED,
               Verdict.FAILED: Outcome.SKIPPED}


@dataclass(slots=True)
class Candidate:
    """A process selected for reading: its parsed status and, once read, its stat."""

    pid: int
    status: PidStatus
    files: ProcessFiles
    stat: PidStat | None = None
    mm: int | None = None  # its address space's generation (sources/exec_probe.py)

    @property
    def key(self) -> ProcessKey:
        """Return the process's identity (pid + start time + exec image + address space
        generation; -1 and None before stat is read)."""
        if self.stat is None:
            return ProcessKey(self.pid, -1)
        return ProcessKey(self.pid, self.stat.starttime, self.stat.image, self.mm)

    @property
    def resident(self) -> int:
        """Return VmRSS + HugetlbPages (hugetlb pages are not in VmRSS) in bytes."""
        return (self.status.vm_rss or 0) + (self.status.hugetlb or 0)


MEMO_MAX_AGE = 300.0  # seconds a screened-out verdict is kept at most (monotonic)


@dataclass(frozen=True, slots=True)
class Kept:
    """One process screened out: its CPU clock (ns) and resident pages (None: not read)
    then, whether it counts as skipped (a kernel thread not) and when (monotonic s)."""

    clock: int
    skipped: bool
    resident: int | None
    at: float


@dataclass(slots=True)
class ScreenMemo:
    """The processes screened out, by pid: a verdict stands while the process's clock has
    not moved, its resident pages are the same (where the size decides), it is younger than
    MEMO_MAX_AGE and the config is the one it was made under. Only decisions are kept (a
    name, a size, a kernel thread), never an error."""

    config: Config | None = None
    out: dict[int, Kept] = field(default_factory=dict)
    # the last parsed status of each candidate (``read_status``): a sleeping process's
    # status is the same bytes scan after scan, and is not parsed again
    status: StatusMemo = field(default_factory=dict)

    def begin(self, config: Config) -> None:
        """Forget every verdict made under another config."""
        if self.config is not config:
            self.out.clear()
            self.config = config

    def end(self, still: dict[int, Kept], listed: Sequence[int]) -> None:
        """Keep the verdicts ``still`` standing, and the statuses of listed processes only."""
        self.out = still
        present = set(listed)
        for gone in [p for p in self.status if p not in present]:
            del self.status[gone]


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
           statm: bool = False, parsed: StatusMemo | None = None) -> Candidate | Verdict:
    """Return the candidate for ``pid``, or the verdict that passed it over (a failed read
    is reported to ``errors``; a gone process quietly).

    ``statm``: no hugetlb page is in use on the host; screen by ``statm`` first.
    ``parsed``: the last parsed status by pid (``read_status``)."""
    files = proc.process(pid)
    patterns = config.include is not None or config.exclude is not None
    try:
        # the patterns are matched before the full parse: most processes stop there
        status = read_status(files, config.min_resident, errors,
                             (lambda name: matches(config, files, name)) if patterns else None,
                             statm, parsed)
        if status is None:
            return Verdict.OUT  # the common case: decided from two lines
        if status.vm_rss is None:  # a kernel thread, or a process whose main thread exited
            if status.kthread:  # the kernel says so in status (PF_KTHREAD): no stat read
                return Verdict.KERNEL_THREAD
            return _without_leader(files, pid, config, errors)
    except SourceError as err:
        return _failure(err, errors)
    cand = Candidate(pid, status, files)
    if cand.resident < config.min_resident:
        return Verdict.OUT
    return cand


def _failure(err: SourceError, errors: ErrorReporter) -> Verdict:
    """Return the verdict of a screening read that failed: gone quietly, otherwise
    reported and denied or failed."""
    if isinstance(err, Gone):
        return Verdict.GONE
    errors.read(err)
    return Verdict.DENIED if isinstance(err, Denied) else Verdict.FAILED


def _without_leader(files: ProcessFiles, pid: int, config: Config, errors: ErrorReporter
                    ) -> Candidate | Verdict:
    """Return the candidate of a process whose status shows no memory: a kernel thread
    (PF_KTHREAD in its stat flags) is not one, else the process read through a live
    thread (its leader is a zombie), or gone when none is left. Raises the SourceError of
    a read."""
    stat = read_stat(files, errors)
    if stat is None:
        return Verdict.FAILED
    if stat.kernel_thread:
        return Verdict.KERNEL_THREAD  # no user memory: not a process for this exporter
    found = read_live_thread(files, config.min_resident, errors)
    if found is None:
        return Verdict.GONE  # every thread has exited: the process is on its way out
    via, status = found
    if status is None:
        return Verdict.OUT
    cand = Candidate(pid, status, via, stat)
    if cand.resident < config.min_resident or not matches(config, via, stat.comm):
        return Verdict.OUT
    return cand


def select(proc: ProcFS, config: Config, errors: ErrorReporter, pending: Sequence[int],
           states: Outcomes, statm: bool = False, memo: ScreenMemo | None = None,
           clock: Callable[[int], int | None] | None = None,
           mono: Callable[[], float] = time.monotonic
           ) -> tuple[list[Candidate], frozenset[int]]:
    """Return the candidates in reading order (each with its stat read) and every pid listed.

    ``statm``: no hugetlb page is in use on the host (see :func:`screen`). ``memo`` and
    ``clock`` (a process's CPU clock by pid; None: unknown, and a SourceError is counted)
    skip the screening of processes screened out before that have not run, grown or been
    kept too long since (see the module); ``mono`` is the monotonic clock of their age.
    Raises the SourceError of listing the procfs root.
    """
    out: list[Candidate] = []
    pids = proc.pids()
    if memo is not None:
        memo.begin(config)
    known = memo.out if memo is not None else {}
    still: dict[int, Kept] = {}
    sized = config.min_resident > 0  # only then can a change of size change a verdict
    now = mono()
    for pid in pids:
        ns: int | None = None
        pages: int | None = None
        if clock is not None and memo is not None:
            try:
                ns = clock(pid)
            except SourceError as err:
                errors.read(err)
            if ns is not None and sized:
                pages = read_resident_pages(proc.process(pid))
            verdict = known.get(pid)
            if (ns is not None and verdict is not None and verdict.clock == ns
                    and now - verdict.at < MEMO_MAX_AGE
                    and (not sized or (pages is not None and pages == verdict.resident))):
                still[pid] = verdict
                states[Outcome.SKIPPED] += verdict.skipped
                continue
        try:
            got = screen(proc, pid, config, errors, statm,
                         memo.status if memo is not None else None)
        except Exception as exc:  # one bad file costs one process, never the scan
            errors.bug("status", f"{proc.root}/{pid}/status", exc)
            states[Outcome.SKIPPED] += 1
            continue
        if isinstance(got, Candidate):
            out.append(got)
            continue
        if got.outcome is not None:
            states[got.outcome] += 1
        if ns is not None and got.decided:
            # a decision, not an error
            still[pid] = Kept(ns, got.outcome is not None, pages, now)
    if memo is not None:
        memo.end(still, pids)
    out.sort(key=lambda c: (-c.resident, c.pid))
    if config.top and len(out) > config.top:
        states[Outcome.SKIPPED] += len(out) - config.top
        out = out[: config.top]
    # processes left over by the last scan's budget go first
    first = {p: i for i, p in enumerate(pending)}
    out.sort(key=lambda c: (0, first[c.pid]) if c.pid in first else (1, 0))
    keyed: list[Candidate] = []
    for cand in out:
        try:
            cand.stat = read_stat(cand.files, errors)
        except Gone:
            states[Outcome.GONE] += 1
            continue
        except SourceError as err:
            errors.read(err)
            states[Outcome.SKIPPED] += 1
            continue
        if cand.stat is None:
            states[Outcome.SKIPPED] += 1
            continue
        cand.mm = proc.exec_generation(cand.pid, cand.files.mm_dir)
        keyed.append(cand)
    return keyed, frozenset(pids)
