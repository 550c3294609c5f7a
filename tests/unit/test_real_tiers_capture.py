"""Parsers and model on the real capture of a guest with CPU-less nodes and HMAT.

tests/fixtures/source/real-kernel-tiers (Debian 6.1 under QEMU 7.2; see its README). The
expected numbers are read off the files and QEMU's command line by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from numa_exporter.model.tiers.faults import fault_remote_share, process_faults
from numa_exporter.model.tiers.places import MemoryTiers, split_by_place
from numa_exporter.parsers.cpulist import MAX_NODE_ID, parse_cpulist
from numa_exporter.parsers.demotion_enabled import parse_demotion_enabled
from numa_exporter.parsers.node_access import parse_node_access
from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.parsers.osrelease import parse_osrelease
from numa_exporter.parsers.pid_sched import find_numa_faults, parse_pid_sched
from numa_exporter.parsers.vmstat import parse_vmstat

CAP = Path(__file__).resolve().parents[1] / "fixtures" / "source" / "real-kernel-tiers"
NODE = CAP / "sys" / "node"
PAGE = 4096


def _ids(data: bytes) -> frozenset[int]:
    ids = parse_cpulist(data, MAX_NODE_ID)
    assert ids is not None
    return ids


def _node_bytes(snapshot: str) -> dict[int, int]:
    maps = parse_numa_maps((CAP / snapshot / "numa_maps").read_bytes().splitlines(True))
    assert maps.error_count == 0
    out: dict[int, int] = {}
    for (node, _kind), b in maps.bytes.items():
        out[node] = out.get(node, 0) + b
    return out


def test_node_classes() -> None:
    assert _ids((NODE / "has_cpu").read_bytes()) == {0, 1}
    assert _ids((NODE / "has_memory").read_bytes()) == {0, 1, 2, 3}
    assert _ids((NODE / "has_normal_memory").read_bytes()) == {0, 1, 2, 3}
    assert _ids((NODE / "has_generic_initiator").read_bytes()) == frozenset()
    assert not (NODE / "has_high_memory").exists()
    assert parse_osrelease((CAP / "osrelease").read_bytes()) is not None
    assert parse_demotion_enabled((CAP / "demotion_enabled").read_bytes()) is False
    tier = CAP / "sys" / "memory_tiering" / "memory_tier4" / "nodelist"
    assert MemoryTiers({4: _ids(tier.read_bytes())}).tier_of() == {0: 4, 1: 4, 2: 4, 3: 4}


# QEMU was told (initiator, target) -> (latency ns, bandwidth MiB/s); the kernel keeps the
# best initiator of each target in access0 and access1 (CPU initiators only)
QEMU_HMAT = {0: (0, 80, 20480), 1: (1, 80, 20480), 2: (0, 250, 8192), 3: (1, 250, 8192)}


@pytest.mark.parametrize("target", sorted(QEMU_HMAT))
@pytest.mark.parametrize("access", [0, 1])
def test_hmat_matches_what_qemu_was_told(target: int, access: int) -> None:
    d = NODE / f"node{target}" / f"access{access}" / "initiators"
    files = {p.name: p.read_bytes() for p in d.iterdir() if not p.name.startswith("_")}
    links = [line.split(" -> ")[0] for line in (d / "_links.txt").read_text().splitlines()]
    r = parse_node_access(access, files, links)
    initiator, latency_ns, bandwidth_mib = QEMU_HMAT[target]
    assert r.initiators == {initiator}
    assert r.read_latency_seconds == pytest.approx(latency_ns * 1e-9)
    assert r.write_latency_seconds == pytest.approx(latency_ns * 1e-9)
    assert r.read_bandwidth_bytes_per_second == bandwidth_mib * 1048576
    assert r.write_bandwidth_bytes_per_second == bandwidth_mib * 1048576
    assert r.error_count == 0


def test_node_vmstat_of_a_cpu_less_node() -> None:
    r = parse_vmstat((NODE / "node2" / "vmstat").read_bytes())
    assert r.error_count == 0
    assert {"numa_hit", "numa_local", "pgpromote_success"} <= set(r.numa_counters())


def test_process_bound_to_a_cpu_less_node_is_far() -> None:
    nb = _node_bytes("bound_far")
    # numa_maps: N0 363 pages (libraries), N2 16416 pages; numastat -p: 1.42 / 64.12 MiB
    assert nb == {0: 363 * PAGE, 2: 16416 * PAGE}
    cpu_nodes = _ids((NODE / "has_cpu").read_bytes())
    places = split_by_place(nb, frozenset({0}), cpu_nodes, {0: 4, 1: 4, 2: 4, 3: 4})
    assert places == {"local": 1486848, "remote": 0, "far": 67239936}
    # numa_balancing was still off when it ran: no faults, so no fault share
    block = find_numa_faults((CAP / "bound_far" / "task" / "309" / "sched").read_bytes())
    assert block.numa_format == "current" and process_faults([block]) is None


def _faults(snapshot: str) -> dict[int, int]:
    tasks = sorted((CAP / snapshot / "task").iterdir())
    pf = process_faults([find_numa_faults((t / "sched").read_bytes()) for t in tasks])
    return dict(pf.by_node) if pf is not None else {}


def test_faults_are_counted_where_balancing_moved_the_page() -> None:
    # moved to node 2 by migratepages, then balancing migrates it back while the thread
    # on node 0 keeps touching it
    assert _node_bytes("fault_t1_moved") == {2: 16783 * PAGE}
    assert _node_bytes("fault_t4_48s") == {0: 289 * PAGE, 2: 16496 * PAGE}
    assert _faults("fault_t1_moved") == {}
    # task/<tid>/sched was read moments after the process's sched (42 faults then)
    assert _faults("fault_t3_23s") == {0: 60, 1: 0, 2: 0, 3: 0}
    assert _faults("fault_t4_48s") == {0: 60, 1: 0, 2: 0, 3: 0}
    migrated = [parse_pid_sched((CAP / s / "sched").read_bytes()).numa_pages_migrated
                for s in ("fault_t1_moved", "fault_t2_8s", "fault_t3_23s", "fault_t4_48s")]
    assert migrated == [0, 41, 81, 287]
    # every fault migrated its page to node 0 and was counted there: the fault share reads
    # local while 98 % of the bytes are still far (docs/tiers.md)
    pf = process_faults([find_numa_faults((CAP / "fault_t4_48s" / "sched").read_bytes())])
    assert fault_remote_share(pf, frozenset({0})) == 0.0
    vm = parse_vmstat((CAP / "vmstat.after").read_bytes()).values
    assert (vm["numa_hint_faults"], vm["numa_hint_faults_local"]) == (288, 0)


def test_numastat_p_agrees() -> None:
    text = (CAP / "bound_far" / "numastat_p.txt").read_text()
    total = re.search(r"^Total\s+(.*)$", text, re.M)
    assert total is not None
    mib = [float(x) for x in total.group(1).split()]
    nb = _node_bytes("bound_far")
    assert mib[:4] == [round(nb.get(n, 0) / 2**20, 2) for n in range(4)]
