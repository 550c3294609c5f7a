"""inspect's verdicts and remedies: each remedy must change something for the process."""

from __future__ import annotations

from dataclasses import replace

from numa_exporter.inspect.diagnosis import diagnose, render, report
from numa_exporter.model.binding import analyse
from numa_exporter.model.home import Home, locality
from numa_exporter.model.snapshot import ProcessSample, SystemSample
from numa_exporter.model.tiers.faults import ProcessFaults
from numa_exporter.model.tiers.process import AccessorLocality, ProcessTiers
from numa_exporter.model.topology import build_topology
from numa_exporter.parsers.numa_maps import Kind

MiB = 1 << 20
TOPO = build_topology(frozenset({0, 1}), {0: frozenset({0}), 1: frozenset({1})},
                      {0: (10, 20), 1: (20, 10)})
SYSTEM = SystemSample(topology=TOPO, balancing_mode=0)


def _sample(memory: dict[int, int], policy: dict[tuple[str, frozenset[int]], int],
            off_policy: int, cpus: frozenset[int], mems: frozenset[int]) -> ProcessSample:
    home = Home(frozenset({0}), "threads")
    node_bytes = dict(memory)
    b = analyse(online=frozenset({0, 1}), memory_nodes=None, cpu_nodes_online=frozenset({0, 1}),
                policy_nodes=policy, mems_allowed=mems,
                affinity_nodes=TOPO.nodes_of_cpus(cpus), thread_nodes=frozenset({0}),
                accelerator_nodes=frozenset(), balancing_mode=0, off_policy_bytes=off_policy)
    return ProcessSample(
        pid=4242, comm="membound", start_time=0.0, rss_bytes=sum(memory.values()),
        memory={(n, Kind.ANON): v for n, v in memory.items()}, policy_bytes={"bind": 256 * MiB},
        policy_nodes=policy, threads_by_node={0: 1}, home=home,
        locality=locality(node_bytes, home), pages_migrated=0, scan_seconds=0.0,
        cpus_allowed=cpus, mems_allowed=mems, memory_bound=b.memory_bound,
        cpus_bound=b.cpus_bound, mismatches=b.mismatches)


def test_after_migratepages_against_its_own_bind_policy() -> None:
    # started with numactl --cpunodebind=0 --membind=1, then `migratepages PID 1 0`:
    # its pages are local now, against its own bind:1 policy
    s = _sample({0: 256 * MiB}, {("bind", frozenset({1})): 256 * MiB}, 256 * MiB,
                cpus=frozenset({0}), mems=frozenset({0, 1}))
    assert s.mismatches["memory_off_policy_nodes"]
    d = diagnose(s, SYSTEM, None)
    assert d.verdict == "local"
    assert any("own bind policy" in p for p in d.problems)
    text = "\n".join(d.remedies)
    assert "--membind=0" in text  # new pages should follow: bind to node 0


def test_no_remedy_repeats_the_binding_the_process_already_has() -> None:
    # started with numactl --cpunodebind=0 --membind=0, then its pages were moved to node 1
    # (`migratepages PID 0 1`): relaunching with the same numactl line changes nothing;
    # moving the pages back does
    s = _sample({1: 256 * MiB}, {("bind", frozenset({0})): 256 * MiB}, 256 * MiB,
                cpus=frozenset({0}), mems=frozenset({0, 1}))
    d = diagnose(s, SYSTEM, None)
    assert d.verdict == "remote"
    assert not any("numactl --cpunodebind=0 --membind=0" in r for r in d.remedies)
    assert any(r.startswith("migratepages 4242 1 0") for r in d.remedies)
    # the first case's launch line is not suggested back either
    s = _sample({0: 256 * MiB}, {("bind", frozenset({1})): 256 * MiB}, 256 * MiB,
                cpus=frozenset({0}), mems=frozenset({0, 1}))
    assert not any("--membind=1" in r for r in diagnose(s, SYSTEM, None).remedies)


def test_full_mems_allowed_is_not_shown_as_bound() -> None:
    # "Memory allowed 0-1 (bound)" was printed for a full Mems_allowed with a bind policy
    s = _sample({1: 256 * MiB}, {("bind", frozenset({1})): 256 * MiB}, 0,
                cpus=frozenset({0}), mems=frozenset({0, 1}))
    text = render(report(s, SYSTEM))
    assert "Memory allowed    0-1\n" in text
    assert "Memory bound to   node 1" in text


def test_no_tiers_view_no_tiers_section() -> None:
    # a sample without a tiers view (the host's node classes unread): no section, null in JSON
    s = _sample({0: 256 * MiB}, {}, 0, cpus=frozenset({0}), mems=frozenset({0, 1}))
    rep = report(s, SYSTEM)
    assert rep["tiers"] is None
    text = render(rep)
    assert "Locality by accessor" not in text and "Hinting faults" not in text


def test_tiers_view_without_a_home_has_no_share() -> None:
    # faults taken but no home node: the counts are shown, the share is not (no remote known)
    s = _sample({0: 256 * MiB}, {}, 0, cpus=frozenset({0}), mems=frozenset({0, 1}))
    view = ProcessTiers(accessors=(AccessorLocality("cpu", frozenset(),
                                                    {"local": 256 * MiB, "remote": 0,
                                                     "far": 0}),),
                        bytes_by_tier={}, untiered_bytes=256 * MiB, cpu_span=None,
                        memory_span=2, faults=ProcessFaults({0: 7, 1: 0}, 1),
                        fault_remote_share=None)
    rep = report(replace(s, tiers=view), SYSTEM)
    assert rep["tiers"]["faults"]["by_node"] == {"0": 7}
    assert rep["tiers"]["faults"]["remote_share"] is None
    assert rep["tiers"]["faults"]["by_place_cpu"] is None  # no node classes read
    lines = render(rep).splitlines()
    assert "  remote share    - (no home node)" in lines
    assert "Memory by tier    in no tier 256.00 MiB" in lines
    assert "NUMA in play      CPUs on ? nodes, memory on 2 nodes" in lines
    assert "Hinting faults    node 0 7 (decayed counts, 1 thread)" in lines
