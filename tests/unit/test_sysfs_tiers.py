"""sysfs sources for node classes, tiers, HMAT, node vmstat and PCI numa_node.

Read through the sources and parsers from the fixture roots and checked against the roots'
EXPECTED.json (written by hand in build_roots.py) and the real 6.1 capture.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from tests.unit.unprivileged import raises_denied

from numa_exporter.model.tiers.faults import fault_remote_share, process_faults, task_fault_split
from numa_exporter.model.tiers.places import (
    MemoryTiers,
    amounts_by_tier,
    cpu_span,
    memory_span,
    split_by_place,
)
from numa_exporter.parsers.cpulist import MAX_NODE_ID, parse_cpulist
from numa_exporter.parsers.demotion_enabled import parse_demotion_enabled
from numa_exporter.parsers.node_access import parse_node_access
from numa_exporter.parsers.numa_maps import parse_numa_maps
from numa_exporter.parsers.osrelease import parse_osrelease
from numa_exporter.parsers.pid_sched import find_numa_faults
from numa_exporter.parsers.pid_status import parse_pid_status
from numa_exporter.parsers.vmstat import parse_vmstat
from numa_exporter.sources.errors import Denied
from numa_exporter.sources.procfs import ProcFS
from numa_exporter.sources.sysfs import NODE_STATES, MemoryTierSysFS, NodeSysFS, PciSysFS

ROOTS = Path(__file__).resolve().parents[1] / "fixtures" / "roots"
GH = ROOTS / "grace_hopper"
REAL = ROOTS.parent / "source" / "real-kernel-2node" / "common"  # Debian 6.1 guest, as read
STATE_KEYS = {"possible": "possible", "online": "online", "has_cpu": "has_cpu",
              "has_normal_memory": "has_normal_memory", "has_memory": "has_memory",
              "has_generic_initiator": "has_generic_initiator"}


def _expected(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "EXPECTED.json").read_text())
    return data


def _nodes(data: bytes | None) -> list[int] | None:
    ids = None if data is None else parse_cpulist(data, MAX_NODE_ID)
    return None if ids is None else sorted(ids)


def test_node_classes_of_the_grace_hopper_root() -> None:
    exp = _expected(GH)["node_classes"]
    nodes = NodeSysFS(GH / "sys")
    for name in STATE_KEYS:
        assert _nodes(nodes.state(name)) == exp[name], name
    assert nodes.state("has_high_memory") is None  # CONFIG_HIGHMEM only
    with pytest.raises(ValueError, match="not a node state"):
        nodes.state("../../../etc/passwd")


def test_node_classes_of_the_real_capture() -> None:
    nodes = NodeSysFS(ROOTS / "two_node" / "sys")
    got = {name: _nodes(nodes.state(name)) for name in NODE_STATES}
    assert got == {"possible": [0, 1], "online": [0, 1], "has_cpu": [0, 1],
                   "has_normal_memory": [0, 1], "has_high_memory": None,
                   "has_memory": [0, 1], "has_generic_initiator": []}


def test_memory_tiers_and_demotion() -> None:
    for root, tiers, demotion in ((GH, {4: [0, 1]}, False),
                                  (REAL, {4: [0, 1]}, False)):
        src = MemoryTierSysFS(root / "sys")
        got = {t: _nodes(src.nodelist(t)) for t in src.tier_ids()}
        assert got == tiers
        assert parse_demotion_enabled(src.demotion_enabled() or b"") is demotion
    assert _expected(GH)["memory_tiers"] == {"4": [0, 1]}
    none = MemoryTierSysFS(ROOTS / "four_node" / "sys")  # 5.15-flavoured: no tiering
    assert none.tier_ids() == [] and none.demotion_enabled() is None


def test_hmat_access_of_the_hbm_node() -> None:
    exp = _expected(GH)["hmat"]
    nodes = NodeSysFS(GH / "sys")
    for node in range(9):
        classes = nodes.access_classes(node)
        assert [f"access{c}" for c in classes] == sorted(exp.get(str(node), {})), node
        for c in classes:
            r = parse_node_access(c, nodes.access_attributes(node, c),
                                  nodes.access_initiators(node, c))
            want = exp[str(node)][f"access{c}"]
            assert sorted(r.initiators) == want["initiators"]
            assert r.read_latency_seconds == pytest.approx(want["read_latency_seconds"])
            assert r.write_latency_seconds == pytest.approx(want["write_latency_seconds"])
            assert r.read_bandwidth_bytes_per_second == want["read_bandwidth_bytes_per_second"]
            assert (r.write_bandwidth_bytes_per_second
                    == want["write_bandwidth_bytes_per_second"])
            assert r.error_count == 0
    assert NodeSysFS(ROOTS / "two_node" / "sys").access_classes(0) == []  # no HMAT


def test_node_vmstat_counters() -> None:
    exp = _expected(GH)["node_vmstat"]
    nodes = NodeSysFS(GH / "sys")
    for node, want in exp.items():
        r = parse_vmstat(nodes.vmstat(int(node)))
        assert r.error_count == 0
        assert {k: r.values[k] for k in want} == want, node
        assert set(want) <= set(r.numa_counters())


def test_gpu_numa_node_is_minus_one() -> None:
    pci = PciSysFS(GH / "sys")
    (addr, acc), = _expected(GH)["accelerators"].items()
    assert pci.numa_node(addr) == b"-1\n" and acc["pci_numa_node"] == -1
    assert pci.numa_node("0000:ff:1f.7") is None
    for bad in ("../../../../etc", "0009:01:00.0/..", "9:1:0.0", "0009:01:00.8", ""):
        with pytest.raises(ValueError, match="not a PCI address"):
            pci.numa_node(bad)


def test_osrelease_from_the_procfs_root() -> None:
    r = parse_osrelease(ProcFS(GH / "proc").osrelease())
    assert r is not None and r.text == _expected(GH)["kernel_release"]


def test_per_process_tiers_spans_and_faults() -> None:
    """The model on the root's files gives the hand-written expectations of every process."""
    exp = _expected(GH)
    nodes = NodeSysFS(GH / "sys")
    cpu_nodes = frozenset(_nodes(nodes.state("has_cpu")) or ())
    memory_nodes = frozenset(_nodes(nodes.state("has_memory")) or ())
    node_cpus = {n: frozenset(c) for n, c in
                 ((int(k), v) for k, v in exp["topology"]["cpus"].items())}
    tiers_src = MemoryTierSysFS(GH / "sys")
    tier_of = MemoryTiers({t: frozenset(parse_cpulist(tiers_src.nodelist(t), MAX_NODE_ID)
                                        or ()) for t in tiers_src.tier_ids()}).tier_of()
    release = parse_osrelease(ProcFS(GH / "proc").osrelease())
    gpu_memory = {a: frozenset(v["memory_nodes"]) for a, v in exp["accelerators"].items()}
    for pid, e in exp["processes"].items():
        d = GH / "proc" / pid
        maps = parse_numa_maps((d / "numa_maps").read_bytes().splitlines(keepends=True))
        node_bytes: dict[int, int] = {}
        for (node, _kind), b in maps.bytes.items():
            node_bytes[node] = node_bytes.get(node, 0) + b
        for acc, want in e["accessors"].items():
            home = (frozenset(want["home"]) if acc == "cpu"
                    else frozenset().union(*(gpu_memory[a] for a in e["accelerators_used"])))
            got = split_by_place(node_bytes, home, cpu_nodes, tier_of)
            assert got == {"local": want["local_bytes"], "remote": want["remote_bytes"],
                           "far": want["far_bytes"]}, (pid, acc)
        assert amounts_by_tier(node_bytes, tier_of) == (
            {int(k): v for k, v in e["bytes_by_tier"].items()}, e["untiered_bytes"])
        status = parse_pid_status((d / "status").read_bytes())
        assert cpu_span(status.cpus_allowed, node_cpus) == e["spans"]["cpus"]
        assert memory_span(status.mems_allowed, memory_nodes) == e["spans"]["memory"]
        blocks = [find_numa_faults((t / "sched").read_bytes())
                  for t in sorted((d / "task").iterdir())]
        pf = process_faults(blocks)
        if e["faults"] is None:
            assert pf is None, pid
            continue
        assert pf is not None
        assert {str(n): v for n, v in pf.by_node.items() if v} == e["faults"]["by_node"]
        assert pf.total == e["faults"]["total"]
        cpu_home = frozenset(e["accessors"]["cpu"]["home"])
        share = fault_remote_share(pf, cpu_home)
        assert share == pytest.approx(e["faults"]["remote_share_cpu"], abs=1e-6)
        assert split_by_place(pf.by_node, cpu_home, cpu_nodes, tier_of) == e["faults"][
            "by_place_cpu"]
        splits = [task_fault_split(ln, release) for b in blocks for ln in b.lines]
        assert all(s is not None for s in splits)
        assert sum(s[0] for s in splits if s) == e["faults"]["task_private"]
        assert sum(s[1] for s in splits if s) == e["faults"]["task_shared"]


def test_unreadable_node_vmstat_is_denied() -> None:
    """A mode-0 file is Denied; as root the check runs as nobody, since root reads it."""
    tmp = Path(tempfile.mkdtemp(prefix="numa-denied-"))
    try:
        node = tmp / "devices" / "system" / "node" / "node0"
        node.mkdir(parents=True)
        for d in (tmp, *node.parents):
            if tmp in (d, *d.parents):
                d.chmod(0o755)
        (node / "vmstat").write_text("numa_hit 1\n")
        (node / "vmstat").chmod(0)
        assert raises_denied("from numa_exporter.sources.sysfs import NodeSysFS",
                             "NodeSysFS(Path(sys.argv[1])).vmstat(0)", tmp)
        assert Denied.reason == "denied"
    finally:
        shutil.rmtree(tmp)


def test_absent_node_files() -> None:
    empty = Path(tempfile.mkdtemp(prefix="numa-empty-"))
    try:
        nodes = NodeSysFS(empty)
        assert nodes.state("has_memory") is None
        assert nodes.access_classes(0) == [] and nodes.access_initiators(0, 0) == []
        assert nodes.access_attributes(0, 0) == {}
        assert MemoryTierSysFS(empty).tier_ids() == []
    finally:
        shutil.rmtree(empty)
