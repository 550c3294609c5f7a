"""Movement from evidence and converging sampled estimates, in the 4-node guest on each kernel
generation (issue 28).

One boot runs movement_inguest.py: balancing off, every process forced onto the sampled
reader, a 256 MiB process interleaved over all four nodes that nothing moves, and a 128 MiB
process bound to node 2 that ``migratepages`` (migrate_pages(2)) moves to node 3 after a
minute of scans. Each scrape is checked against the workload's numa_maps read beside it:

* the unmoved process's arrived + departed bytes grow by at most 2 % of its size over the
  run (before issue 28: 414-581 MiB in under a minute, sampling noise counted as movement),
  and after the reads its bytes per node are within 2 % of its size of numa_maps';
* the move of the other process is counted within 10 % on both nodes within four scans;
* a third process that frees 64 MiB and faults it again on the next node every 4 s (issue
  33: recycled, nothing migrates it) is counted as moved by neither the sampled exporter nor
  a second one reading in full, beyond one region's size over the run (the one interval in
  which ``migratepages`` moved the other process may count up to that much); the full one
  counts the real move within 10 % too.
"""

from __future__ import annotations

import json
import os
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
TIMEOUT_S = 900.0
_RUN: dict[str, dict[str, Any]] = {}  # by kernel generation


@pytest.fixture(scope="module", params=list(harness.GENERATIONS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> tuple[Path, dict[str, Any]]:
    """Boot the 4-node guest once per kernel generation; return the results folder and the
    summary."""
    generation = str(request.param)
    state = _RUN.setdefault(generation, {})
    if "failed" in state:
        pytest.fail(state["failed"])
    if "done" in state:
        return state["done"]  # type: ignore[no-any-return]
    assets = guest_assets("movement", generation)
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    base = Path(keep).resolve() if keep else tmp_path_factory.mktemp("realkernel-movement")
    path = base / f"movement-4node-{generation}"
    path.mkdir(parents=True, exist_ok=True)
    plan = {"out": "/tmp/rkio/movement", "workload": str(assets.workload),
            "exporter": exporter_command(), "port": 19128, "interval": "2s",
            "scans_before": SCANS_BEFORE, "scans_after": SCANS_AFTER}
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
            if not got and not seen:
                continue  # not read yet (the first scans share a budget)
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
