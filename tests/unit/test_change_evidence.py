"""Change evidence (issues 33 and 34): the verdict on an interval from a process's own faults
and sizes and the host's counters; movement only with a migration, at most what the host
migrated; and a scan that serves the last placement while nothing changed."""

from __future__ import annotations

import random
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tests.collectors.test_reader_choice import FakeSampled, GiB
from tests.conftest import ROOTS, fixture_config
from tests.unit.test_sample_memory import Process

from numa_exporter.model.change_evidence import (
    HostCounters,
    ProcessCounters,
    Verdict,
    bounded_moves,
    host_counters,
    judge,
    migration_evidence,
    movement_allowance,
)
from numa_exporter.model.sample_memory import CARRY_READS, SampleMemory
from numa_exporter.model.sampling import PlacementEstimate
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.parsers.numa_maps import Kind, fold_nodes
from numa_exporter.parsers.pid_stat import parse_pid_stat
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.sampled.reader import SampledRequest
from numa_exporter.readers.system import read_ksm
from numa_exporter.scan.process import VERIFY_AGE, VERIFY_PER_SCAN
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.procfs import ProcessFiles
from numa_exporter.sources.sysfs import KsmSysFS

MiB = 1 << 20
PAGE = 4096
HOST = HostCounters(migrated=100, collapsed=3, tiering=0, swapped=0, ksm=(), balancing=0)
SIZES = (10 * MiB, 8 * MiB, 2 * MiB, 0, 0)
QUIET = ProcessCounters(faults=500, sizes=SIZES, host=HOST)


def test_nothing_happened_is_unchanged() -> None:
    j = judge(QUIET, replace(QUIET))
    assert j.verdict is Verdict.UNCHANGED and j.unchanged and j.migrated_pages == 0


def test_each_event_that_can_place_a_page_breaks_unchanged() -> None:
    cases = {
        "fault": replace(QUIET, faults=501),
        "size": replace(QUIET, sizes=(10 * MiB, 8 * MiB - PAGE, 2 * MiB + PAGE, 0, 0)),
        "collapse": replace(QUIET, host=replace(HOST, collapsed=4)),
        "tiering": replace(QUIET, host=replace(HOST, tiering=1)),
        "swap": replace(QUIET, host=replace(HOST, swapped=2)),
        "ksm": replace(QUIET, host=replace(HOST, ksm=(1, 5, 9, 2))),
        "balancing": replace(QUIET, host=replace(HOST, balancing=1)),
    }
    for name, now in cases.items():
        j = judge(QUIET, now)
        assert j.verdict is Verdict.REFAULT_ONLY, name
        assert movement_allowance(j, PAGE) == 0, name  # no migration: nothing may count


def test_a_host_migration_makes_movement_possible_up_to_its_size() -> None:
    now = replace(QUIET, faults=900, host=replace(HOST, migrated=164))
    j = judge(QUIET, now)
    assert j.verdict is Verdict.MOVEMENT_POSSIBLE and j.migrated_pages == 64
    assert movement_allowance(j, PAGE) == 64 * PAGE


def test_missing_inputs_are_unknown_and_allow_movement_only_with_a_migration() -> None:
    assert judge(None, QUIET).verdict is Verdict.UNKNOWN  # never read
    for now in (replace(QUIET, faults=None),
                replace(QUIET, sizes=(10 * MiB, None, 2 * MiB, 0, 0)),
                replace(QUIET, host=replace(HOST, ksm=None)),  # a denied file
                replace(QUIET, host=replace(HOST, balancing=None)),
                replace(QUIET, faults=400)):  # went back: not the same counter
        j = judge(QUIET, now)
        assert j.verdict is Verdict.UNKNOWN and not j.unchanged
        assert movement_allowance(j, PAGE) == 0
    j = judge(QUIET, replace(QUIET, faults=None, host=replace(HOST, migrated=110)))
    assert j.verdict is Verdict.UNKNOWN and movement_allowance(j, PAGE) == 10 * PAGE
    j = judge(QUIET, replace(QUIET, host=replace(HOST, migrated=None)))
    assert movement_allowance(j, PAGE) == 0


def test_host_counters_from_vmstat() -> None:
    vm = {"pgmigrate_success": 7, "thp_collapse_alloc": 2, "pgdemote_kswapd": 1,
          "pgdemote_direct": 2, "pgpromote_success": 3, "pgpromote_candidate": 50,
          "pswpin": 4, "pswpout": 5}
    h = host_counters(vm, (), 0)
    assert (h.migrated, h.collapsed, h.tiering, h.swapped) == (7, 2, 6, 9) and h.known
    # a kernel without THP or tiering: those events cannot happen there
    h = host_counters({"pgmigrate_success": 7}, (), 0)
    assert (h.collapsed, h.tiering, h.swapped) == (0, 0, 0) and h.known
    assert not host_counters(None, (), 0).known
    assert not host_counters({"numa_hit": 1}, (), 0).known  # no migration counter at all


@given(moves=st.dictionaries(st.tuples(st.integers(0, 3), st.integers(0, 3)),
                             st.integers(0, 1 << 32), max_size=12),
       allowance=st.integers(0, 1 << 34))
def test_bounded_moves_stay_within_the_allowance(moves: dict[tuple[int, int], int],
                                                 allowance: int) -> None:
    got = bounded_moves(moves, allowance)
    assert sum(got.values()) <= allowance
    assert all(0 < b <= moves[k] for k, b in got.items())
    total = sum(moves.values())
    if total <= allowance:
        assert got == {k: b for k, b in moves.items() if b}
    else:  # scaled in proportion: short of the allowance by at most a byte a pair
        assert sum(got.values()) >= allowance - len(moves)


# --- a scan of a fixture root between whose reads the files are changed ------------------

PID = 130
BIG = "7f85bfbdc000 prefer:1 anon=65538 dirty=65538 active=0 N1=65538 kernelpagesize_kB=4"


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    (root / "proc/sys/kernel/numa_balancing").write_text("0\n")
    return root


def _place(root: Path, n0: int, n1: int) -> None:
    """Put the process's 256 MiB mapping's pages: ``n0`` on node 0, ``n1`` on node 1."""
    p = root / f"proc/{PID}/numa_maps"
    text = p.read_text()
    old = next(line for line in text.splitlines() if line.startswith("7f85bfbdc000 "))
    nodes = " ".join(f"N{n}={c}" for n, c in ((0, n0), (1, n1)) if c)
    p.write_text(text.replace(old, f"7f85bfbdc000 prefer:1 anon={n0 + n1} dirty={n0 + n1} "
                             f"active=0 {nodes} kernelpagesize_kB=4"))


def _fault(root: Path, more: int) -> None:
    """Add ``more`` minor faults to the process's stat (field 10)."""
    p = root / f"proc/{PID}/stat"
    head, _, tail = p.read_text().partition(") ")
    f = tail.split(" ")
    f[7] = str(int(f[7]) + more)  # field 10: tail[0] is field 3
    p.write_text(f"{head}) {' '.join(f)}")


def _migrate(root: Path, pages: int) -> None:
    """Add ``pages`` to the host's pgmigrate_success."""
    p = root / "proc/vmstat"
    p.write_text(re.sub(r"pgmigrate_success (\d+)",
                        lambda m: f"pgmigrate_success {int(m[1]) + pages}", p.read_text()))


def _proc(scanner: Scanner) -> ProcessSample:
    return next(p for p in scanner.scan().processes if p.pid == PID)


def _moved(p: ProcessSample) -> tuple[int, int]:
    assert p.drift is not None
    return sum(p.drift.arrived_bytes.values()), sum(p.drift.departed_bytes.values())


def test_recycled_memory_is_not_movement_even_after_an_unrelated_migration(
        tmp_path: Path) -> None:
    """Issue 33: 64 MiB freed on node 1 and faulted again on node 0 (a fault delta, no
    pgmigrate delta) is not movement; one page of another process migrated afterwards
    does not open a comparison against the read from before the recycling (before the fix:
    64 MiB arrived on node 0); a real migration (no fault, the counter moved by as much)
    is counted in full."""
    root = _root(tmp_path)
    scanner = Scanner(fixture_config(root, warmup_age=0.0))
    assert _moved(_proc(scanner)) == (0, 0)
    _place(root, 16384, 49154)  # recycled: freed on node 1, faulted again on node 0
    _fault(root, 16384)
    assert _moved(_proc(scanner)) == (0, 0)
    _migrate(root, 1)  # one page of some other process
    assert _moved(_proc(scanner)) == (0, 0)
    _place(root, 0, 65538)  # migrate_pages moved the 64 MiB back to node 1
    _migrate(root, 16384)
    p = _proc(scanner)
    assert p.drift is not None
    assert p.drift.arrived_bytes == {1: 64 * MiB} and p.drift.departed_bytes == {0: 64 * MiB}


def test_a_move_beyond_what_the_host_migrated_is_bounded_by_it(tmp_path: Path) -> None:
    """A fault and a migration in one interval: 64 MiB found on another node, 10,000 pages
    of which the process's faults may have recycled; the host migrated 1,000 pages, so at
    most 1,000 pages of the rest count as moved."""
    root = _root(tmp_path)
    scanner = Scanner(fixture_config(root, warmup_age=0.0))
    _proc(scanner)
    _place(root, 16384, 49154)
    _fault(root, 10000)
    _migrate(root, 1000)
    assert _moved(_proc(scanner)) == (1000 * PAGE, 1000 * PAGE)


def test_recycling_while_another_process_migrates_is_not_counted(tmp_path: Path) -> None:
    """Issue 33 (the 4-node 6.1 guest under balancing: 64 MiB counted in the interval in
    which migratepages moved another process): 64 MiB freed and faulted again on node 0,
    16,384 faults of the process, while the host migrated 32,768 pages of another: what
    changed node is no more than its faults recycled, so nothing counts (before: 64 MiB)."""
    root = _root(tmp_path)
    scanner = Scanner(fixture_config(root, warmup_age=0.0))
    _proc(scanner)
    _place(root, 16384, 49154)
    _fault(root, 16384)
    _migrate(root, 32768)
    assert _moved(_proc(scanner)) == (0, 0)


def test_a_migration_read_while_it_runs_is_counted_in_full(tmp_path: Path) -> None:
    """migrate_pages() adds to pgmigrate_success when it ends: a read made while it runs
    sees part of the move (24 MiB) with the host's counter unmoved, the next read the rest
    (40 MiB) with the counter up by all 64 MiB. The process took no fault throughout, so
    no page of it was recycled: both parts count (before: the first part was dropped, 40 of
    64 MiB counted; the 4-node guest under NUMA balancing counted 54 of 128 MiB)."""
    root = _root(tmp_path)
    scanner = Scanner(fixture_config(root, warmup_age=0.0))
    _proc(scanner)
    _migrate(root, 1)  # the host is not quiet: the process is read again
    _proc(scanner)
    _place(root, 6144, 59394)  # 24 MiB moved so far, the call still running
    _migrate(root, 1)  # one page of some other process: the process is read again
    assert _moved(_proc(scanner)) == (24 * MiB, 24 * MiB)
    _place(root, 16384, 49154)
    _migrate(root, 16384)
    p = _proc(scanner)
    assert p.drift is not None
    assert p.drift.arrived_bytes == {0: 64 * MiB} and p.drift.departed_bytes == {1: 64 * MiB}
    _place(root, 0, 65538)  # faulted again on node 1 (its faults), one page migrated
    _fault(root, 16384)
    _migrate(root, 1)
    assert _moved(_proc(scanner)) == (64 * MiB, 64 * MiB)  # recycled: nothing more


def _balance(root: Path, host: int, own: int) -> None:
    """NUMA balancing migrated ``host`` pages on the host (``pgmigrate_success`` and
    ``numa_pages_migrated`` of vmstat), ``own`` of them by the process's thread's hinting
    faults (its ``numa_pages_migrated`` in sched)."""
    p = root / "proc/vmstat"
    p.write_text(re.sub(r"^(pgmigrate_success|numa_pages_migrated) (\d+)$",
                        lambda m: f"{m[1]} {int(m[2]) + host}", p.read_text(), flags=re.M))
    sched = root / f"proc/{PID}/task/{PID}/sched"
    sched.write_text(re.sub(r"(numa_pages_migrated\s+:\s+)(\d+)",
                            lambda m: f"{m[1]}{int(m[2]) + own}", sched.read_text()))


def test_balancing_migrations_of_other_processes_do_not_count_recycled_memory(
        tmp_path: Path) -> None:
    """Balancing on (issue 33): the host's NUMA balancing migrated 20,000 pages of other
    processes (pgmigrate_success and numa_pages_migrated moved together; this process's
    threads migrated none) while its 64 MiB was freed and faulted again on node 0: nothing
    counts as moved (before: the host's 20,000 pages let all 64 MiB count). Its own hinting
    faults migrating its memory back to node 1 count in full; so does a migrate_pages of
    it (pgmigrate_success alone)."""
    root = _root(tmp_path)
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    scanner = Scanner(fixture_config(root, warmup_age=0.0))
    assert _moved(_proc(scanner)) == (0, 0)
    _place(root, 16384, 49154)  # recycled: freed on node 1, faulted again on node 0
    _fault(root, 16384)
    _balance(root, 20000, 0)
    assert _moved(_proc(scanner)) == (0, 0)
    _place(root, 0, 65538)  # its own hinting faults migrated it back to node 1
    _fault(root, 16384)
    _balance(root, 20000, 16384)
    p = _proc(scanner)
    assert p.drift is not None
    assert p.drift.arrived_bytes == {1: 64 * MiB} and p.drift.departed_bytes == {0: 64 * MiB}
    _place(root, 16384, 49154)  # migrate_pages(2) by another process: no fault of its own
    _balance(root, 5000, 0)
    _migrate(root, 16384)
    p = _proc(scanner)
    assert p.drift is not None
    assert p.drift.arrived_bytes == {1: 64 * MiB, 0: 64 * MiB}


def test_migration_evidence_takes_balancing_out_of_the_host_count_but_its_own() -> None:
    # pgmigrate_success 1000, of which balancing 800, 50 of those of this process
    assert migration_evidence(1000, 800, 50) == 250
    assert migration_evidence(1000, 800, None) == 1000  # its own unknown: the host's
    assert migration_evidence(1000, None, 50) == 1000  # no split known: the host's
    assert migration_evidence(None, 800, 50) is None
    assert migration_evidence(100, 120, 7) == 7  # counters read a moment apart


def _skipped(scanner: Scanner) -> int:
    return scanner.reader.evidence.skipped.get("unchanged", 0)


def test_an_unchanged_process_is_served_its_last_read(tmp_path: Path) -> None:
    """Issue 34: nothing that can place a page happened, so numa_maps is not read again:
    the last read is served (a numa_maps changed behind the evidence's back shows that it
    was not read); any fault, or balancing on, reads it again."""
    root = _root(tmp_path)
    scanner = Scanner(fixture_config(root))
    first = _proc(scanner)
    assert _skipped(scanner) == 0
    _place(root, 65538, 0)  # not something a kernel does without a fault or migration
    again = _proc(scanner)
    assert _skipped(scanner) >= 1
    assert again.node_bytes() == first.node_bytes()
    _fault(root, 1)
    moved = _proc(scanner)
    assert moved.node_bytes()[0] >= first.node_bytes().get(0, 0) + 256 * MiB
    skipped = _skipped(scanner)
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    _proc(scanner)
    _proc(scanner)
    assert _skipped(scanner) == skipped  # hinting faults may come any time: read


def test_a_kept_placement_is_verified_and_a_disagreement_counted(tmp_path: Path) -> None:
    root = _root(tmp_path)
    now = [1000.0]
    scanner = Scanner(fixture_config(root), clock=lambda: now[0])
    _proc(scanner)
    _place(root, 65538, 0)  # the evidence cannot see this
    _proc(scanner)
    assert scanner.reader.evidence.verified == 0
    now[0] += VERIFY_AGE
    served = []
    for scans in range(1, 10):  # a few processes a scan, in turn
        served.append(_proc(scanner).node_bytes().get(0, 0))
        assert scanner.reader.evidence.verified <= scans * VERIFY_PER_SCAN
        if scanner.reader.evidence.disagreed:
            break
    assert scanner.reader.evidence.disagreed == 1
    assert served[-1] >= 256 * MiB  # the verification's read is served
    assert all(b < 256 * MiB for b in served[:-1])  # the kept one until then
    snap = scanner.scan()
    assert snap.stats.evidence_disagreements == 1
    assert snap.stats.evidence_verifications >= 1
    assert snap.stats.placement_reads_skipped["unchanged"] >= 2


def test_stat_gives_the_faults_of_the_process() -> None:
    # fields 10-13: minflt cminflt majflt cmajflt (children's not the process's)
    got = parse_pid_stat((ROOTS / "two_node/proc/130/stat").read_bytes())
    assert got is not None and (got.minflt, got.majflt, got.faults) == (65676, 5, 65681)


def test_the_sampled_reader_counts_no_recycled_page_and_follows_it() -> None:
    """Issue 33, sampled: a region freed and faulted again on another node read after read
    (the process faults, the host's pgmigrate_success stands still): the followed pages on
    another node are not moved (before: a fresh sample at odds with the carried counts
    opened the panel check and its pages counted as moved, ~9x the region in 80 s), and the
    estimate follows the new placement (the kind's carried counts are dropped)."""
    proc = Process(16384, (0, 1, 2, 3), 5)
    rng = random.Random(5)
    mem = SampleMemory()
    for _ in range(4):  # settle: full panel, carried counts
        est = proc.read(mem, 1000, rng)
    region = range(0, 4096)  # a quarter of the process
    for rnd in range(6):
        for i in region:  # MADV_DONTNEED, touched again from a thread on another node
            proc.node[i] = rnd % 4
        est = proc.read(mem, 1000, rng)
        assert not est.moved, est.moved
        got = fold_nodes(est.bytes)
        for n, b in proc.truth().items():
            assert abs(got.get(n, 0) - b) <= 5 * est.node_bytes_stderr() + PAGE


def _big(tmp_path: Path) -> Path:
    """Return a root whose process 300 ("splitter") has 4 GiB resident: sampled by its hold
    at a hold budget of 1 us."""
    root = _root(tmp_path)
    status = root / "proc/300/status"
    text = re.sub(r"VmRSS:\s+\d+ kB", f"VmRSS:\t{4 * GiB // 1024} kB", status.read_text())
    status.write_text(re.sub(r"RssAnon:\s+\d+ kB", f"RssAnon:\t{4 * GiB // 1024} kB", text))
    return root


def test_a_sampled_placement_is_kept_only_once_its_carried_counts_converged(
        tmp_path: Path) -> None:
    """An unchanged sampled process is still sampled while its carried counts can improve
    the estimate (CARRY_READS reads in a row found nothing changed), then kept; any change
    starts the count again (found in the 4-node guest: kept from its second read, a
    256 MiB process's per-node error stayed at 3.3 % of its size instead of converging).
    No full read is allowed for a quiet process here (``policy_hold_budget`` 0)."""
    root = _big(tmp_path)
    fake = FakeSampled(4 * GiB)
    scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                     policy_interval=0.0, hold_budget=1e-6,
                                     policy_hold_budget=0.0), sampled=fake)
    for _ in range(CARRY_READS + 4):
        scanner.scan()
    assert fake.calls == CARRY_READS + 1  # the first read, then CARRY_READS unchanged ones
    (root / "proc/vmstat").write_text(re.sub(
        r"pgmigrate_success (\d+)", lambda m: f"pgmigrate_success {int(m[1]) + 1}",
        (root / "proc/vmstat").read_text()))
    scanner.scan()
    scanner.scan()
    assert fake.calls == CARRY_READS + 3  # read again, and counting again


def _split(root: Path, n0: int, n1: int) -> None:
    """Make the splitter's numa_maps one anonymous mapping: ``n0`` pages of 4 KiB on node
    0, ``n1`` on node 1 (what a full read then finds)."""
    (root / "proc/300/numa_maps").write_text(
        f"7f5000000000 default anon={n0 + n1} dirty={n0 + n1} N0={n0} N1={n1} "
        "kernelpagesize_kB=4\n")


def _splitter(scanner: Scanner) -> ProcessSample:
    return next(p for p in scanner.scan().processes if p.pid == 300)


def _splitter_fault(root: Path) -> None:
    p = root / "proc/300/stat"
    head, _, tail = p.read_text().partition(") ")
    f = tail.split(" ")
    f[7] = str(int(f[7]) + 1)
    p.write_text(f"{head}) {' '.join(f)}")


def test_a_quiet_sampled_process_is_read_in_full_once_then_kept(tmp_path: Path) -> None:
    """Issue 34: a process sampled for its lock hold that took no fault, kept its sizes,
    on a host that moved nothing, is read in full once (reason quiet: its bytes per node
    are then numa_maps' own) and that read is served while nothing changes; a fault brings
    the sampled read back, and quiet again, one full read again (before: sampled every
    scan until CARRY_READS quiet reads, then the estimate kept)."""
    root = _big(tmp_path)
    _split(root, 786432, 262144)  # 3 GiB on node 0, 1 GiB on node 1
    fake = FakeSampled(4 * GiB)  # its estimate: all 4 GiB on node 0
    scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                     policy_interval=0.0, hold_budget=1e-6), sampled=fake)
    first = _splitter(scanner)
    assert (first.method, first.placement_reason, fake.calls) == ("sampled", "hold", 1)
    second = _splitter(scanner)
    assert (second.method, second.placement_reason) == ("full", "quiet")
    assert second.node_bytes() == {0: 3 * GiB, 1: 1 * GiB}
    _split(root, 0, 1048576)  # behind the evidence's back: shows it is not read again
    for _ in range(CARRY_READS + 2):
        kept = _splitter(scanner)
        assert kept.method == "full" and kept.node_bytes() == {0: 3 * GiB, 1: 1 * GiB}
    assert fake.calls == 1
    assert _skipped(scanner) == CARRY_READS + 2
    _splitter_fault(root)
    changed = _splitter(scanner)
    assert (changed.method, changed.placement_reason, fake.calls) == ("sampled", "hold", 2)
    again = _splitter(scanner)  # quiet again: one full read, then kept
    assert again.method == "full"
    assert {n: b for n, b in again.node_bytes().items() if b} == {1: 4 * GiB}
    _splitter(scanner)
    assert fake.calls == 2 and _skipped(scanner) == CARRY_READS + 3


def test_with_balancing_on_a_process_sampled_for_its_hold_is_sampled_every_scan(
        tmp_path: Path) -> None:
    """Hinting faults and migrations may come any time with NUMA balancing on: no process
    is quiet, so the one sampled for its hold is sampled every scan, as before issue 34."""
    root = _big(tmp_path)
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    fake = FakeSampled(4 * GiB)
    scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                     policy_interval=0.0, hold_budget=1e-6), sampled=fake)
    for _ in range(4):
        p = _splitter(scanner)
        assert (p.method, p.placement_reason) == ("sampled", "hold")
    assert fake.calls == 4 and _skipped(scanner) == 0


def test_no_quiet_full_read_over_the_policy_hold_budget(tmp_path: Path) -> None:
    """A quiet process whose full read would hold its lock longer than
    --placement.policy-hold-budget (4 GiB of 4 KiB pages: ~32 ms estimated, over 10 ms)
    stays sampled."""
    root = _big(tmp_path)
    fake = FakeSampled(4 * GiB)
    scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                     policy_interval=0.0, hold_budget=1e-6,
                                     policy_hold_budget=0.01), sampled=fake)
    for _ in range(3):
        assert _splitter(scanner).method == "sampled"
    assert fake.calls == 3


def test_a_kept_full_read_of_a_process_otherwise_sampled_is_given_a_panel(
        tmp_path: Path) -> None:
    """At discovery the policies are due: one full read; while quiet it is served, and a
    small sampled read (at most 512 queries, its estimate dropped) gives the process pages
    to follow, once (before: a sampled read of the full budget served every scan)."""
    root = _big(tmp_path)
    _split(root, 786432, 262144)
    fake = FakeSampled(4 * GiB)
    scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                     hold_budget=1e-6), sampled=fake)
    first = _splitter(scanner)
    assert (first.method, first.placement_reason, fake.calls) == ("full", "policy", 0)
    for _ in range(4):
        p = _splitter(scanner)
        assert p.method == "full" and p.node_bytes() == {0: 3 * GiB, 1: 1 * GiB}
    assert fake.calls == 1
    assert fake.max_queries[0] is not None and 0 < fake.max_queries[0] <= 512


class PanelSampled(FakeSampled):
    """A sampled reader that, like the real one, counts movement only against pages it
    followed: with a memory of an earlier read and a host that migrated since, everything
    it finds on node 1 arrived from node 0."""

    def __init__(self, largest: int) -> None:
        super().__init__(largest)
        self.on1 = 0

    def __call__(self, files: ProcessFiles, status: PidStatus,
                 request: SampledRequest | None = None) -> PlacementEstimate:
        est = super().__call__(files, status, request)
        mem = request.memory if request is not None else None
        moved = None
        if mem is not None and mem.host_migrated is not None and request is not None:
            moved = ({(0, 1): self.on1} if request.host_migrated != mem.host_migrated
                     and self.on1 else {})
        if mem is not None and request is not None:
            mem.host_migrated = request.host_migrated
        return replace(est, bytes={(0, Kind.ANON): 4 * GiB - self.on1,
                                   (1, Kind.ANON): self.on1}, moved=moved)


def test_movement_after_a_kept_full_read_is_counted_by_the_sampled_read(
        tmp_path: Path) -> None:
    """A migrate_pages from outside while the exact full read was kept: the sampled read the
    migration brings counts the move against the pages followed since before it (the
    panel survives a full read made while nothing changed), both where the panel came from
    a sampled read and where a kept full read was given one."""
    for policy_interval in (0.0, 300.0):  # sampled first; a policy full read first
        root = _big(tmp_path / str(policy_interval))
        _split(root, 1048576, 0)
        fake = PanelSampled(4 * GiB)
        scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                         policy_interval=policy_interval, hold_budget=1e-6,
                                         warmup_age=0.0), sampled=fake)
        for _ in range(4):
            assert _moved(_splitter(scanner)) == (0, 0)
        assert _splitter(scanner).method == "full"
        fake.on1 = 1 * GiB  # 1 GiB migrated to node 1 by another process's migrate_pages
        _migrate(root, 262144)
        moved = _splitter(scanner)
        assert moved.method == "sampled"
        assert _moved(moved) == (1 * GiB, 1 * GiB), policy_interval
class _MemorySeen(FakeSampled):
    """FakeSampled that records the carried memory each read is given."""

    def __init__(self, largest: int) -> None:
        super().__init__(largest)
        self.memories: list[SampleMemory | None] = []

    def __call__(self, files: Any, status: Any, request: Any = None) -> Any:
        self.memories.append(request.memory if request is not None else None)
        return super().__call__(files, status, request)


def test_a_read_of_policies_keeps_what_the_sampled_reads_carry(tmp_path: Path) -> None:
    """A sampled process whose resident size moved by half has its memory policies read
    in full; the sampled reads after it go on with the same carried memory (before: the
    policy read dropped it, so a growing heap in the 4-node guest restarted its estimate
    at every policy read, its per-node error back at 5-6 % each time)."""
    root = _root(tmp_path)
    status = root / "proc/300/status"  # "splitter", made 4 GiB: sampled by its hold

    def resident(gib: int) -> None:
        text = re.sub(r"VmRSS:\s+\d+ kB", f"VmRSS:\t{gib * GiB // 1024} kB",
                      status.read_text())
        status.write_text(re.sub(r"RssAnon:\s+\d+ kB", f"RssAnon:\t{gib * GiB // 1024} kB",
                                 text))

    resident(4)
    fake = _MemorySeen(4 * GiB)
    scanner = Scanner(fixture_config(root, include=re.compile("^splitter$"),
                                     policy_interval=1e9, hold_budget=1e-6), sampled=fake)
    for _ in range(3):  # the policies' first full read, then sampled reads
        _migrate(root, 1)
        scanner.scan()
    before = fake.calls
    assert before >= 1 and fake.memories[-1] is not None
    carried = fake.memories[-1]
    resident(8)  # grown by half: its policies are due, read in full
    _migrate(root, 1)
    scanner.scan()
    assert fake.calls == before  # the policy read was a full one
    _migrate(root, 1)
    scanner.scan()
    assert fake.calls == before + 1 and fake.memories[-1] is carried


def test_ksm_values_read_from_sysfs(tmp_path: Path) -> None:
    errors = ErrorReporter()
    ksm = KsmSysFS(tmp_path)
    assert read_ksm(ksm, errors) == ()  # no KSM in this kernel: it merges nothing
    d = tmp_path / "kernel/mm/ksm"
    d.mkdir(parents=True)
    (d / "run").write_text("0\n")
    assert read_ksm(ksm, errors) == (0,)  # stopped: the counters are not read
    (d / "run").write_text("1\n")
    for name, v in (("pages_shared", 5), ("pages_sharing", 9), ("full_scans", 2)):
        (d / name).write_text(f"{v}\n")
    assert read_ksm(ksm, errors) == (1, 5, 9, 2)
    (d / "full_scans").write_text("x\n")
    assert read_ksm(ksm, errors) is None and errors.parse_errors.get("ksm") == 1
    (d / "full_scans").unlink()
    assert read_ksm(ksm, errors) is None and errors.read_errors
