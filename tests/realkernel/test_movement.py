"""Movement from evidence and converging sampled estimates, in the 4-node guest on each kernel
generation, with NUMA balancing off and on (issues 28 and 33; ids end in the generation:
``-k "balancing_on-6.12"``; units ``movement`` and ``movement_balancing_on`` of
scenarios.EDGE_UNITS).

One boot per balancing mode runs movement_inguest.py: every process forced onto the sampled
reader, a 256 MiB process interleaved over all four nodes that nothing moves, and a 128 MiB
process bound to node 2 that ``migratepages`` (migrate_pages(2)) moves to node 3 after a
minute of scans. Each scrape is checked against the workload's numa_maps read beside it:

* the unmoved process's arrived + departed bytes grow by at most 2 % of its size over the
  run (before issue 28: 414-581 MiB in under a minute, sampling noise counted as movement),
  and after the reads its bytes per node are within 2 % of its size of numa_maps';
* the move of the other process is counted within 10 % on both nodes within four scans;
* a third process that frees 64 MiB and faults it again on the next node every 6 s (issue
  33: recycled, nothing migrates it) is counted as moved by neither the sampled exporter nor
  a second one reading in full, beyond one region's size over the run (the one interval in
  which ``migratepages`` moved the other process may count up to that much); the full one
  counts the real move within 10 % too;
* per scrape, each exporter's bytes per node of the recycling process against where the
  kernel had them when that exporter read it (the recycler logs its phases): the sampled
  exporter is within 5 % of the process's size as often as the full one (10 points slack);
* a sparse static mapping (every 17th page of 1 GiB, interleaved) and a heap growing 2 MiB
  every 2 s all run, read by the sampled exporter, are within 3 % of their size per node
  after a minute (the median scrape after it, and the last);
* a process whose memory NUMA balancing migrates (its thread moved off its memory's node,
  touching it) has what left its node counted by the full exporter within 10 % of 64 MiB
  (balancing on: its own hinting-fault migrations; off: nothing moved, nothing counted).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from . import guest as harness
from .conftest import exporter_command, guest_assets
from .results import Exposition, MiB, numa_maps_node_bytes

pytestmark = pytest.mark.realkernel

HERE = Path(__file__).resolve().parent
SCANS_BEFORE = 25  # ~a minute of 2 s scans (longer under TCG)
SCANS_AFTER = 5
#: the run goes on at least this long: scans on time (2 s, an idle host) end at about a
#: minute, which left the "after a minute" checks nothing to check (6.1, balancing off:
#: 30 scans in 59.95 s)
MIN_RUN_S = 84.0
TIMEOUT_S = 900.0
_RUN: dict[str, dict[str, Any]] = {}  # by balancing mode and kernel generation
#: the budget unit of each balancing mode (scenarios.EDGE_UNITS; ``-k balancing_on`` picks)
UNITS = {0: "movement", 1: "movement_balancing_on"}


RUNS = [(balancing, g) for balancing in (0, 1) for g in harness.GENERATIONS]


@pytest.fixture(scope="module", params=RUNS,
                ids=[f"balancing_{'on' if b else 'off'}-{g}" for b, g in RUNS])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> tuple[Path, dict[str, Any]]:
    """Boot the 4-node guest once per NUMA balancing mode and kernel generation; return the
    results folder and the summary."""
    balancing, generation = request.param
    key = f"{balancing}-{generation}"
    state = _RUN.setdefault(key, {})
    if "failed" in state:
        pytest.fail(state["failed"])
    if "done" in state:
        return state["done"]  # type: ignore[no-any-return]
    assets = guest_assets(UNITS[balancing], generation)
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    base = Path(keep).resolve() if keep else tmp_path_factory.mktemp("realkernel-movement")
    path = base / f"movement-4node-{generation}{'-balancing' if balancing else ''}"
    path.mkdir(parents=True, exist_ok=True)
    plan = {"out": "/tmp/rkio/movement", "workload": str(assets.workload),
            "exporter": exporter_command(), "port": 19128, "interval": "2s",
            "scans_before": SCANS_BEFORE, "scans_after": SCANS_AFTER,
            "min_seconds": MIN_RUN_S, "balancing": balancing}
    script = ("set -e\ncd /\n"
              f"exec /usr/bin/python3 {HERE / 'movement_inguest.py'} /tmp/rkio/plan.json\n")
    boot = harness.boot("4node", script, timeout=TIMEOUT_S, results=path, assets=assets,
                        files={"plan.json": json.dumps(plan)})
    if boot.userland_s is None:
        pytest.skip(f"REAL-KERNEL TESTS SKIPPED: the 4node guest never reached userland "
                    f"({'; '.join(boot.attempts)})")
    out = path / "movement"
    summary_file = out / "summary.json"
    if not boot.ok or not summary_file.exists():
        state["failed"] = (f"4node guest job failed (rc={boot.rc}, timed_out={boot.timed_out});"
                          f" job log tail:\n{boot.job_log[-4000:]}")
        pytest.fail(state["failed"])
    summary = json.loads(summary_file.read_text())
    if summary["errors"]:
        state["failed"] = f"{summary['errors']}\n{summary.get('traceback', '')}"
        pytest.fail(state["failed"])
    state["done"] = (out, summary)
    return out, summary


def _moved(s: Exposition, pid: int, name: str, node: int | None = None) -> float:
    return sum(v for lab, v in s.select(name, pid=str(pid))
               if node is None or lab["node"] == str(node))


def _scan(out: Path, n: int, full: bool = False) -> Exposition:
    return Exposition((out / f"scan-{n:03d}{'-full' if full else ''}.prom").read_text())


def _kernel(out: Path, n: int, name: str) -> dict[int, int]:
    return numa_maps_node_bytes((out / f"numa_maps-{n:03d}-{name}").read_text())


def test_every_read_was_sampled(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    # not the recycling process: its size moves, so its memory policies are due again and
    # again (a full read for them: model/policies.py)
    for pid in (summary["pids"]["still"], summary["pids"]["moved"]):
        seen = 0
        for n, _ in summary["scans"]:
            got = _scan(out, n).select("numa_process_placement_info", pid=str(pid))
            if not seen and not (got and all(lab["method"] == "sampled" for lab, _ in got)):
                # not read yet (the first scans share a budget, six processes under TCG), or
                # its first read, of its memory policies, in full (model/policies.py)
                continue
            seen += 1
            assert got and all(lab["method"] == "sampled" for lab, _ in got), (n, pid, got)
            assert all(lab["path"] in ("move_pages", "pagemap_scan") for lab, _ in got)
        assert seen >= SCANS_BEFORE - 2, (pid, seen)


def test_unmoved_process_shows_no_movement_and_converges(
        run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    pid = summary["pids"]["still"]
    size = 256 * MiB
    scans = [n for n, _ in summary["scans"]]
    first, last = _scan(out, scans[0]), _scan(out, scans[-1])
    grew = sum(_moved(last, pid, name) - _moved(first, pid, name)
               for name in ("numa_process_node_arrived_bytes_total",
                            "numa_process_node_departed_bytes_total"))
    assert grew <= 0.02 * size, f"{grew / MiB:.1f} MiB counted as moved; nothing moved it"
    kern = _kernel(out, scans[-1], "still")
    assert sorted(kern) == [0, 1, 2, 3], kern
    got = last.node_bytes(pid)
    errs = {n: (got.get(n, 0) - b) / MiB for n, b in kern.items()}
    assert all(abs(e) * MiB <= 0.02 * size for e in errs.values()), (
        f"per-node error (MiB) after {len(scans)} reads: {errs}")
    err0 = _scan(out, scans[1]).value("numa_process_memory_bytes_stderr", pid=str(pid))
    err1 = last.value("numa_process_memory_bytes_stderr", pid=str(pid))
    assert err0 is not None and err1 is not None and err1 < err0, (err0, err1)


def test_migrate_pages_move_is_counted_within_four_scans(
        run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    pid = summary["pids"]["moved"]
    assert summary["migratepages"][0] == 0, summary["migratepages"]
    at = summary["migrated_after"]
    before = _scan(out, at)
    assert _kernel(out, at, "moved").get(2, 0) >= 0.99 * 128 * MiB
    after = [n for n, _ in summary["scans"] if n > at]
    # what the kernel moved: the bound 128 MiB, from node 2 to node 3 (the program's own
    # text and libraries may sit on other nodes and stay there)
    end = _kernel(out, after[-1], "moved")
    size = _kernel(out, at, "moved").get(2, 0) - end.get(2, 0)
    assert size >= 0.99 * 128 * MiB and end.get(3, 0) >= size, (size / MiB, end)
    fourth = _scan(out, after[min(3, len(after) - 1)])
    arrived = (_moved(fourth, pid, "numa_process_node_arrived_bytes_total", 3)
               - _moved(before, pid, "numa_process_node_arrived_bytes_total", 3))
    departed = (_moved(fourth, pid, "numa_process_node_departed_bytes_total", 2)
                - _moved(before, pid, "numa_process_node_departed_bytes_total", 2))
    assert abs(arrived - size) <= 0.1 * size, (arrived / MiB, size / MiB)
    assert abs(departed - size) <= 0.1 * size, (departed / MiB, size / MiB)
    assert _moved(before, pid, "numa_process_node_arrived_bytes_total") <= 0.02 * size


RECYCLED = 64 * MiB


@pytest.mark.parametrize("full", [False, True], ids=["sampled", "full"])
def test_recycled_memory_is_not_counted_as_moved(run: tuple[Path, dict[str, Any]],
                                                  full: bool) -> None:
    out, summary = run
    pid = summary["pids"]["recycle"]
    scans = [n for n, _ in summary["scans"]]
    # the kernel did put the region on other nodes, read after read
    homes = {max(k.items(), key=lambda kv: kv[1])[0]
             for k in (_kernel(out, n, "recycle") for n in scans) if k}
    assert len(homes) >= 3, homes
    first, last = _scan(out, scans[0], full), _scan(out, scans[-1], full)
    for name in ("numa_process_node_arrived_bytes_total",
                 "numa_process_node_departed_bytes_total"):
        grew = _moved(last, pid, name) - _moved(first, pid, name)
        assert grew <= 1.1 * RECYCLED, (
            f"{name}: {grew / MiB:.1f} MiB of recycled memory counted as moved over "
            f"{len(scans)} scans")


def test_full_reader_counts_the_migrate_pages_move(run: tuple[Path, dict[str, Any]]) -> None:
    out, summary = run
    pid = summary["pids"]["moved"]
    at = summary["migrated_after"]
    after = [n for n, _ in summary["scans"] if n > at]
    end = _kernel(out, after[-1], "moved")
    size = _kernel(out, at, "moved").get(2, 0) - end.get(2, 0)
    before, last = _scan(out, at, True), _scan(out, after[-1], True)
    arrived = (_moved(last, pid, "numa_process_node_arrived_bytes_total", 3)
               - _moved(before, pid, "numa_process_node_arrived_bytes_total", 3))
    departed = (_moved(last, pid, "numa_process_node_departed_bytes_total", 2)
                - _moved(before, pid, "numa_process_node_departed_bytes_total", 2))
    assert abs(arrived - size) <= 0.1 * size, (arrived / MiB, size / MiB)
    assert abs(departed - size) <= 0.1 * size, (departed / MiB, size / MiB)


#: a scrape "follows the kernel" where each node's bytes of the process are within this
#: fraction of its size of where the kernel had them
FOLLOW_TOLERANCE = 0.05
#: the sampled exporter may follow the kernel in this many fewer scrapes (a fraction of
#: them) than the full one: "as often as" over ~30 scrapes
FOLLOW_SLACK = 0.1
CONVERGED = 0.03  # per-node error of a sparse or growing process after a minute: of its size
MINUTE_S = 60.0


def _node_error(s: Exposition, pid: int, kern: dict[int, int]) -> float:
    """Return the largest per-node difference between the scrape and numa_maps, as a
    fraction of the process's size in numa_maps."""
    got = s.node_bytes(pid)
    size = sum(kern.values())
    return max(abs(got.get(n, 0) - kern.get(n, 0)) for n in set(got) | set(kern)) / size


def _follows(out: Path, summary: dict[str, Any], name: str, full: bool) -> list[float]:
    pid = summary["pids"][name]
    return [_node_error(_scan(out, n, full), pid, _kernel(out, n, name))
            for n, _ in summary["scans"]]


def _phases(out: Path) -> list[tuple[str, float, float, int]]:
    """Return the recycler's phases: (region address, freed at, touched again by, node)."""
    rows = [line.split() for line in (out / "recycle-phases.txt").read_text().splitlines()]
    return [(a, float(f), float(t), int(n)) for a, f, t, n in rows]


def _region_node(phases: list[tuple[str, float, float, int]], t0: float, t1: float
                 ) -> int | None:
    """Return the node the whole region was on from wall time t0 to t1 (None: it was
    freed or being touched again in between)."""
    for (_, _, touched, node), nxt in zip(phases, [*phases[1:], None], strict=True):
        if touched <= t0 and (nxt is None or t1 < nxt[1]):
            return node
    return None


def _without_region(text: str, start: str) -> dict[int, int]:
    """Return numa_maps' bytes per node but those of the mapping that holds the region
    (the mapping that starts at or below its address; a thread stack may share it)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    addr = int(start, 16)
    holder = max((int(ln.split()[0], 16), i) for i, ln in enumerate(lines)
                 if int(ln.split()[0], 16) <= addr)[1]
    return numa_maps_node_bytes("\n".join(ln for i, ln in enumerate(lines) if i != holder))


def _sampled_reads(out: Path, pid: int) -> tuple[list[float], list[float]]:
    """Return the (wall) times the sampled exporter logged a sampled read of ``pid``
    (``sampled placement`` at debug level, logged as the estimate is made) and those it
    logged each scan's end (``scan``)."""
    reads: list[float] = []
    scans: list[float] = []
    for line in (out / "exporter.log").read_text().splitlines():
        rec = json.loads(line) if line.startswith("{") else {}
        at = (datetime.strptime(rec["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
              .timestamp() if "ts" in rec else 0.0)
        if rec.get("msg") == "sampled placement" and rec.get("pid") == pid:
            reads.append(at)
        elif rec.get("msg") == "scan":
            scans.append(at)
    return reads, scans


def _recycle_errors(out: Path, summary: dict[str, Any], full: bool) -> list[float]:
    """Return, for each scrape whose read of the recycling process fell wholly inside one
    phase, the largest per-node error against the kernel then: the region on the phase's
    node, the rest of the process as numa_maps read beside the scrape. When the read was:
    the full exporter's, from the start of the scan that read it to the scrape (its scans
    are short); the sampled one's, from the end of the scan before the one it was logged
    in up to its log line (its scans take up to 10 s under TCG, longer than a phase; a
    read's own duration misses a read resumed after a scan deadline); a scrape of the
    sampled one served from a full read of the process's policies (no log line) is left
    out."""
    pid = str(summary["pids"]["recycle"])
    phases = _phases(out)
    reads, done = ([], []) if full else _sampled_reads(out, int(pid))
    errs = []
    for n, _ in summary["scans"]:
        s = _scan(out, n, full)
        t1 = float((out / f"scraped-{n:03d}").read_text().split()[int(full)])
        t0 = s.value("numa_process_last_scan_timestamp_seconds", pid=pid)
        if not full and not all(lab["method"] == "sampled" for lab, _ in s.select(
                "numa_process_placement_info", pid=pid)):
            continue  # a full read of its policies (due as its size moves): not timed
        if not full:  # the last sampled read of the scan scraped: it ended when it logged
            end = max((t for t in done if t <= t1), default=0.0)  # of the scan scraped
            t1 = max((t for t in reads if t <= end), default=0.0)
            # made in the scan it was logged in: after the scan before it ended
            t0 = max((t for t in done if t < t1), default=0.0)
        # else read after its scan began (the timestamp), before the scrape
        node = _region_node(phases, t0, t1) if t0 is not None else None
        if node is None:
            continue
        want = _without_region((out / f"numa_maps-{n:03d}-recycle").read_text(),
                               phases[0][0])
        want[node] = want.get(node, 0) + RECYCLED
        errs.append(_node_error(s, int(pid), want))
    return errs


def test_recycling_bytes_follow_the_kernel_as_often_sampled_as_full(
        run: tuple[Path, dict[str, Any]]) -> None:
    """Per scrape: each exporter's per-node bytes of the recycling process against where
    the kernel had them when that exporter read the process (the recycler logs each phase:
    when it freed the region, when it had touched it again and on which node, from its own
    numa_maps; reads that overlap a change are left out); the sampled exporter follows the
    kernel as often as the full one."""
    out, summary = run
    errs = {full: _recycle_errors(out, summary, full) for full in (False, True)}
    frac = {full: sum(e <= FOLLOW_TOLERANCE for e in es) / max(len(es), 1)
            for full, es in errs.items()}
    print(f"recycle follows the kernel (within {FOLLOW_TOLERANCE:.0%} of its size per node):"
          f" sampled {frac[False]:.2f} of {len(errs[False])} scrapes, full {frac[True]:.2f}"
          f" of {len(errs[True])}")
    assert len(errs[False]) >= 5 and len(errs[True]) >= 5, errs
    assert frac[False] >= frac[True] - FOLLOW_SLACK, (
        frac, [round(e, 3) for e in errs[False]], [round(e, 3) for e in errs[True]])


@pytest.mark.parametrize("name", ["sparse", "grow"])
def test_sparse_and_growing_processes_converge_within_a_minute(
        run: tuple[Path, dict[str, Any]], name: str) -> None:
    """A sparse static mapping (every 17th page of 1 GiB) and a heap growing 2 MiB every
    2 s for the whole run (into a 448 MiB reservation), both interleaved, read by the
    sampled exporter: after a minute of scans their bytes per node are within 3 % of their
    size of numa_maps' (the last scrape, and the median scrape after the minute)."""
    out, summary = run
    errs = _follows(out, summary, name, False)
    late = [e for e, (_, t) in zip(errs, summary["scans"], strict=True) if t >= MINUTE_S]
    print(f"{name}: per-node error after a minute (of its size): "
          f"{[round(e, 4) for e in late]}")
    assert late, summary["scans"]
    assert late[-1] <= CONVERGED and sorted(late)[len(late) // 2] <= CONVERGED, late


def test_balancing_migrations_of_a_process_are_still_counted(
        run: tuple[Path, dict[str, Any]]) -> None:
    """The drifting process (its memory on node 1, its thread on node 0, touching it): with
    NUMA balancing on, the kernel migrates it towards node 0, by its own hinting faults; the
    full exporter counts what left node 1 within 10 % of what numa_maps shows left (or
    counts nothing where nothing moved: balancing off)."""
    out, summary = run
    pid = summary["pids"]["drift"]
    scans = [n for n, _ in summary["scans"]]
    k0, k1 = _kernel(out, scans[0], "drift"), _kernel(out, scans[-1], "drift")
    left = max(k0.get(1, 0) - k1.get(1, 0), 0)
    first, last = _scan(out, scans[0], True), _scan(out, scans[-1], True)
    departed = (_moved(last, pid, "numa_process_node_departed_bytes_total", 1)
                - _moved(first, pid, "numa_process_node_departed_bytes_total", 1))
    print(f"drift: numa_maps shows {left / MiB:.1f} MiB left node 1; the full exporter "
          f"counted {departed / MiB:.1f} MiB departed")
    assert abs(departed - left) <= 0.1 * max(left, DRIFT), (departed / MiB, left / MiB)


DRIFT = 64 * MiB
