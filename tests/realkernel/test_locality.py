"""Locality diagnosis on the live guest: inspect verdicts, binding mismatches, drift, cgroups."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .results import Exposition, MiB, ScenarioRun, memory_numa_stat

pytestmark = pytest.mark.realkernel


def _inspect(run: ScenarioRun, name: str = "inspect") -> dict[str, Any]:
    path = run.path / f"{name}.json"
    assert path.exists() and path.stat().st_size, (
        f"no {name}.json; errors={run.summary.get('errors')}\n{run.log_tail()}")
    return dict(json.loads(path.read_text()))


@pytest.mark.parametrize("scenario", ["membind_remote", "local", "shared_pool",
                                      "split_threads", "cgroup_cpuset", "balancing_on"])
def test_inspect_verdict(run: ScenarioRun, scenario: str) -> None:
    rep = _inspect(run)
    assert rep["pid"] == run.pid
    assert rep["verdict"] == run.scenario.verdict, rep["summary"]
    if rep["verdict"] == "remote":
        text = "\n".join(rep["remedies"])
        assert "numactl --cpunodebind=0 --membind=0" in text, text
        assert "NUMAPolicy=bind" in text and "NUMAMask=0" in text
    else:
        assert rep["remedies"] == [] or rep["problems"]


@pytest.mark.parametrize("scenario", ["membind_remote"])
def test_remote_bound_mismatch_and_strict_balancing(run: ScenarioRun, scenario: str) -> None:
    pid = str(run.pid)
    static = run.scrape(0)
    assert static.value("numa_process_memory_bound", pid=pid) == 1
    assert static.value("numa_process_cpus_bound", pid=pid) == 1
    assert static.value("numa_process_binding_mismatch", pid=pid,
                        reason="memory_not_on_thread_nodes") == 1
    assert static.value("numa_process_binding_mismatch", pid=pid,
                        reason="balancing_with_strict_binding") == 0  # balancing is off
    on = Exposition((run.path / "scrape-strict.txt").read_text())
    assert on.value("numa_balancing_mode") == 1
    assert on.value("numa_process_binding_mismatch", pid=pid,
                    reason="balancing_with_strict_binding") == 1
    rep = _inspect(run, "inspect-strict")
    assert rep["numa_balancing"] == 1
    assert any("numa_balancing is on while the process's memory is strictly bound" in p
               for p in rep["problems"]), rep["problems"]
    assert any("kernel.numa_balancing=0" in r for r in rep["remedies"])


@pytest.mark.parametrize("scenario", ["membind_remote"])
def test_pages_moved_off_their_own_bind_policy(run: ScenarioRun, scenario: str) -> None:
    """After ``migratepages PID 1 0`` on a --membind=1 process, its pages sit on node 0
    against its own bind:1 policy: flagged, and inspect does not suggest the launch line."""
    pid = str(run.pid)
    assert run.scrape(0).value("numa_process_binding_mismatch", pid=pid,
                               reason="memory_off_policy_nodes") == 0
    moved = Exposition((run.path / "scrape-migrated.txt").read_text())
    size = run.scenario.size_mib * MiB
    assert moved.node_bytes(run.pid).get(0, 0) >= 0.95 * size, moved.node_bytes(run.pid)
    assert moved.value("numa_process_binding_mismatch", pid=pid,
                       reason="memory_off_policy_nodes") == 1
    rep = _inspect(run, "inspect-migrated")
    assert rep["verdict"] == "local"
    assert any("own bind policy" in p for p in rep["problems"]), rep["problems"]
    assert rep["memory_bound_nodes"] == "1" and rep["mems_allowed"] == "0-1"
    text = "\n".join(rep["remedies"])
    assert "--membind=1" not in text, text  # the line it was launched with changes nothing
    assert "--membind=0" in text, text


@pytest.mark.parametrize("scenario", ["split_threads"])
def test_split_threads_have_no_mismatch(run: ScenarioRun, scenario: str) -> None:
    s = run.scrape(0)
    for reason in ("memory_not_on_thread_nodes", "threads_bound_memory_free"):
        assert s.value("numa_process_binding_mismatch", pid=str(run.pid), reason=reason) == 0


@pytest.mark.parametrize("scenario", ["cgroup_cpuset"])
def test_cgroup_numa_stat_and_cpuset_binding(run: ScenarioRun, scenario: str) -> None:
    s = run.scrape(0)
    cg = "/" + str(run.summary["cgroup"]).strip("/")
    on1 = s.value("numa_cgroup_memory_bytes", cgroup=cg, node="1", kind="anon")
    assert on1 is not None and on1 >= 0.99 * run.scenario.size_mib * MiB
    lo = memory_numa_stat(run.kernel(0, after=False).text("cgroupfs/memory.numa_stat"))
    hi = memory_numa_stat(run.kernel(0).text("cgroupfs/memory.numa_stat"))
    assert lo and hi, "kernel memory.numa_stat not captured"
    k = sorted((lo["anon"][1], hi["anon"][1]))
    assert k[0] - MiB <= on1 <= k[1] + MiB, (on1, k)  # the kernel's own figure, read around it
    pid = str(run.pid)
    assert s.value("numa_process_memory_bound", pid=pid) == 1
    assert s.value("numa_process_binding_mismatch", pid=pid,
                   reason="memory_not_on_thread_nodes") == 1


@pytest.mark.parametrize("scenario", ["balancing_on"])
def test_drift_after_warmup_then_pages_arrive(run: ScenarioRun, scenario: str) -> None:
    """The baseline is taken before the thread moves; the move shows as drift, migration as
    bytes departing node 1 and arriving on node 0."""
    pid = str(run.pid)
    size = run.scenario.size_mib * MiB
    first, last = run.scrape(0), run.scrape(-1)
    base = first.value("numa_process_baseline_remote_memory_ratio", pid=pid)
    assert base is not None and base <= 0.05, "baseline should be the pre-move placement"
    change = first.value("numa_process_remote_memory_ratio_change", pid=pid)
    assert change is not None and change >= 0.9, f"the move should show as drift: {change}"
    end = last.value("numa_process_remote_memory_ratio_change", pid=pid)
    assert end is not None and end <= 0.05, f"after migration drift returns to ~0: {end}"
    arrived = last.value("numa_process_node_arrived_bytes_total", pid=pid, node="0") or 0
    departed = last.value("numa_process_node_departed_bytes_total", pid=pid, node="1") or 0
    a0 = first.value("numa_process_node_arrived_bytes_total", pid=pid, node="0") or 0
    d0 = first.value("numa_process_node_departed_bytes_total", pid=pid, node="1") or 0
    assert arrived - a0 >= 0.95 * size, (a0, arrived)
    assert departed - d0 >= 0.95 * size, (d0, departed)


@pytest.mark.parametrize("scenario", ["balancing_off"])
def test_no_movement_without_balancing(run: ScenarioRun, scenario: str) -> None:
    pid = str(run.pid)
    first, last = run.scrape(0), run.scrape(-1)
    for name, node in (("numa_process_node_arrived_bytes_total", "0"),
                       ("numa_process_node_departed_bytes_total", "1")):
        a = first.value(name, pid=pid, node=node) or 0
        b = last.value(name, pid=pid, node=node) or 0
        assert b - a <= 2 * MiB, (name, a, b)
