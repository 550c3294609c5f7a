"""The exporter against live placements in a real multi-node kernel (static scenarios).

For each scenario the guest ran a workload with a known placement, scraped the exporter once
it had scanned it, and saved the kernel's own numa_maps / numastat -p right before and after.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from .results import MiB, ScenarioRun, close, memory_numa_stat, numa_maps_node_bytes
from .scenarios import CGROUP_NAME, SCENARIOS

pytestmark = pytest.mark.realkernel

STATIC = [s.name for s in SCENARIOS if s.phase == "static"]


def _fmt(d: Mapping[int, float]) -> str:
    """Return per-node bytes as a short MiB string."""
    return ", ".join(f"N{k}={v / MiB:.2f} MiB" for k, v in sorted(d.items()))


@pytest.mark.parametrize("scenario", STATIC)
def test_kernel_placement_is_as_intended(run: ScenarioRun, scenario: str) -> None:
    """The workload really got the placement (checks the test bed, not the exporter)."""
    sc = run.scenario
    k = run.kernel(0)
    assert k.node_bytes == run.kernel(0, after=False).node_bytes, "placement moved while scraped"
    for node, frac in sc.on_nodes.items():
        assert k.node_bytes.get(node, 0) >= frac * sc.size_mib * MiB, (
            f"{scenario}: kernel numa_maps {_fmt(k.node_bytes)}; wanted >= {frac:.0%} of "
            f"{sc.size_mib} MiB on node {node}")


@pytest.mark.parametrize("scenario", STATIC)
def test_node_bytes_match_kernel_numa_maps(run: ScenarioRun, scenario: str) -> None:
    """Sum of numa_process_memory_bytes over kinds equals the kernel's numa_maps per node."""
    exp = run.scrape(0).node_bytes(run.pid)
    kern = run.kernel(0).node_bytes
    assert exp, f"no numa_process_memory_bytes for pid {run.pid}\n{run.log_tail()}"
    for node in sorted(set(exp) | set(kern)):
        e, k = exp.get(node, 0.0), kern.get(node, 0)
        assert close(e, k), (f"node {node}: exporter {e / MiB:.2f} MiB, kernel numa_maps "
                             f"{k / MiB:.2f} MiB (exporter {_fmt(exp)}; kernel {_fmt(kern)})")


@pytest.mark.parametrize("scenario", STATIC)
def test_node_bytes_match_numastat(run: ScenarioRun, scenario: str) -> None:
    """Exporter per-node bytes agree with ``numastat -p PID`` (MiB) within 2 % / 1 MiB."""
    exp = run.scrape(0).node_bytes(run.pid)
    nst = run.kernel(0).numastat_mib
    for node, mib in nst.items():
        e = exp.get(node, 0.0)
        assert close(e, mib * MiB), (f"node {node}: exporter {e / MiB:.2f} MiB, numastat -p "
                                     f"{mib:.2f} MiB (exporter {_fmt(exp)}; numastat {nst})")


@pytest.mark.parametrize("scenario", STATIC)
def test_remote_ratio_matches_intent(run: ScenarioRun, scenario: str) -> None:
    """numa_process_remote_memory_ratio is in the range the placement implies."""
    lo, hi = run.scenario.ratio
    ratio = run.scrape(0).ratio(run.pid)
    assert ratio is not None, f"no remote ratio for pid {run.pid}"
    assert lo <= ratio <= hi, (f"{scenario} ({run.scenario.description}): ratio {ratio:.4f} "
                               f"not in [{lo}, {hi}]; kernel {_fmt(run.kernel(0).node_bytes)}")


@pytest.mark.parametrize("scenario", ["membind_remote", "hugetlb_remote", "thp_remote",
                                      "node3_remote"])
def test_bound_remote_flags_binding(run: ScenarioRun, scenario: str) -> None:
    """Memory bound away from the threads: memory_bound=1, cpus_bound=1, mismatch reported."""
    e = run.scrape(0)
    pid = str(run.pid)
    assert e.value("numa_process_memory_bound", pid=pid) == 1.0
    assert e.value("numa_process_cpus_bound", pid=pid) == 1.0
    assert e.value("numa_process_binding_mismatch", pid=pid,
                   reason="memory_not_on_thread_nodes") == 1.0
    bind = e.value("numa_process_policy_memory_bytes", pid=pid, policy="bind") or 0.0
    total = sum(run.kernel(0).node_bytes.values())
    assert bind >= 0.95 * total, f"policy=bind bytes {bind / MiB:.2f} of {total / MiB:.2f} MiB"


@pytest.mark.parametrize("scenario", ["interleave"])
def test_interleave_policy_bytes(run: ScenarioRun, scenario: str) -> None:
    """Interleaved memory shows up under policy="interleave"."""
    v = run.scrape(0).value("numa_process_policy_memory_bytes", pid=str(run.pid),
                            policy="interleave") or 0.0
    assert v >= 0.95 * run.scenario.size_mib * MiB, f"interleave bytes {v / MiB:.2f} MiB"


@pytest.mark.parametrize("scenario", ["hugetlb_remote"])
def test_hugetlb_kind_and_node_hugepages(run: ScenarioRun, scenario: str) -> None:
    """hugetlb pages count as kind="hugetlb" on node 1; node hugepage gauges match sysfs."""
    e = run.scrape(0)
    kern = numa_maps_node_bytes(run.kernel(0).text("numa_maps"), only="huge")
    assert kern == {1: run.scenario.size_mib * MiB}, f"kernel hugetlb bytes {kern}"
    assert e.node_bytes(run.pid, kind="hugetlb") == {1: float(kern[1])}
    size = str(2 * MiB)
    assert e.value("numa_node_hugepages", node="1", page_size_bytes=size, state="total") == 32
    assert e.value("numa_node_hugepages", node="1", page_size_bytes=size, state="free") == 0
    assert e.value("numa_node_hugepages", node="0", page_size_bytes=size, state="total") == 0


@pytest.mark.parametrize("scenario", ["thp_remote"])
def test_thp_counted_as_anon_on_node1(run: ScenarioRun, scenario: str) -> None:
    """THP-backed memory (AnonHugePages in smaps_rollup) is anon bytes on node 1."""
    rollup = run.kernel(0).text("smaps_rollup")
    thp_kb = next(int(line.split()[1]) for line in rollup.splitlines()
                  if line.startswith("AnonHugePages:"))
    assert thp_kb * 1024 >= 0.9 * run.scenario.size_mib * MiB, f"THP not used: {thp_kb} kB"
    anon = run.scrape(0).node_bytes(run.pid, kind="anon")
    assert anon.get(1, 0.0) >= thp_kb * 1024, f"anon per node {anon}, THP {thp_kb} kB"


@pytest.mark.parametrize("scenario", ["split_threads"])
def test_split_threads_are_local_on_both_nodes(run: ScenarioRun, scenario: str) -> None:
    """One thread per node: threads gauge covers both nodes, home nodes are both."""
    e = run.scrape(0)
    pid = str(run.pid)
    cpus = run.kernel(0).task_cpus()
    assert sorted(set(cpus.values())) == [0, 1], f"kernel: task cpus {cpus}"
    threads = {lab["node"]: v for lab, v in e.select("numa_process_threads", pid=pid)}
    assert threads.get("0", 0) >= 1 and threads.get("1", 0) >= 1, f"threads gauge {threads}"
    assert sum(threads.values()) == len(cpus)
    homes = e.select("numa_process_home_nodes_info", pid=pid)
    assert len(homes) == 1 and homes[0][0]["source"] == "threads", homes
    assert homes[0][0]["nodes"] in ("0-1", "0,1"), homes


@pytest.mark.parametrize("scenario", ["shared_pool"])
def test_shared_pool_child_remote_parent_local(run: ScenarioRun, scenario: str) -> None:
    """The child on node 0 sees the node-1 pool as remote shmem; the parent sees it local."""
    e = run.scrape(0)
    child = run.pid
    parent = int(run.summary["main_pid"])
    size = run.scenario.size_mib * MiB
    shmem = e.node_bytes(child, kind="shmem")
    assert shmem.get(1, 0.0) >= 0.99 * size, f"child shmem per node {shmem}"
    assert e.node_bytes(parent, kind="shmem").get(1, 0.0) >= 0.99 * size
    parent_ratio = e.ratio(parent)
    assert parent_ratio is not None and parent_ratio <= 0.05, parent_ratio
    assert e.select("numa_process_info", pid=str(child))[0][0]["comm"] == "rkwork-child"


@pytest.mark.parametrize("scenario", ["cgroup_cpuset"])
def test_cgroup_cpuset_memory(run: ScenarioRun, scenario: str) -> None:
    """cpuset.mems=1 binds the process (memory_bound=1); cgroup bytes match memory.numa_stat."""
    e = run.scrape(0)
    k = run.kernel(0)
    assert k.text("cgroupfs/cpuset.mems.effective").strip() == "1"
    assert e.value("numa_process_memory_bound", pid=str(run.pid)) == 1.0
    stat = memory_numa_stat(k.text("cgroupfs/memory.numa_stat"))
    samples = [(lab, v) for lab, v in e.select("numa_cgroup_memory_bytes")
               if CGROUP_NAME in lab.get("cgroup", "")]
    assert samples, ("no numa_cgroup_memory_bytes for cgroup "
                     f"{CGROUP_NAME}; kernel memory.numa_stat anon={stat.get('anon')}")
    got = {(lab["node"], lab["kind"]): v for lab, v in samples}
    for node, value in stat["anon"].items():
        g = got.get((str(node), "anon"), 0.0)
        assert close(g, value), (f"cgroup anon node {node}: exporter {g / MiB:.2f} MiB, "
                                 f"memory.numa_stat {value / MiB:.2f} MiB")
    assert stat["anon"].get(1, 0) >= 0.99 * run.scenario.size_mib * MiB
