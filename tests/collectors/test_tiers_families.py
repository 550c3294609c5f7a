"""The tiers collector on the Grace Hopper root, against the root's hand-written numbers.

GH_HAND in tests/fixtures/build_roots.py writes every per-process number out by hand (and
checks it against the tables the root is built from); here the whole path runs: sources,
readers, scan, collector, exposition.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS, fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.config_file import parse_pins
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.errors import Absent
from numa_exporter.sources.procfs import ProcFS

GH = ROOTS / "grace_hopper"
# the root's config declares the GPU's memory node; its pin matches no process, so process
# 700 is found as a user of the GPU through its open /dev/nvidia0 alone
CONFIG = (GH / "config.toml").read_text()


def _expected() -> dict[str, Any]:
    return dict(json.loads((GH / "EXPECTED.json").read_text()))


def _exposition(config: str | None = CONFIG, **kw: Any) -> tuple[Snapshot, str]:
    homes, accels = parse_pins(config) if config else ((), ())
    cfg = fixture_config(GH, detail_above=0,
                         home_pins=homes, accelerator_pins=accels,
                         accelerator_records=GH / "udev.json", **kw)
    snap = Scanner(cfg, accelerators=accelerator_source(cfg)).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return snap, generate_latest(reg).decode()


def _one(text: str, name: str, **labels: str) -> float | None:
    got = values(text, name, **labels)
    assert len(got) <= 1, got
    return got[0][1] if got else None


def test_both_accessor_ratios_and_bytes_by_place() -> None:
    exp = _expected()["processes"]
    _, text = _exposition()
    for pid, e in exp.items():
        for acc, want in e["accessors"].items():
            total = want["local_bytes"] + want["remote_bytes"] + want["far_bytes"]
            for place in ("local", "remote", "far"):
                got = _one(text, "numa_process_memory_locality_ratio", pid=pid,
                           accessor=acc, locality=place)
                assert got == pytest.approx(want[f"{place}_bytes"] / total), (pid, acc, place)
                if acc == "cpu":
                    assert _one(text, "numa_process_memory_locality_bytes", pid=pid,
                                locality=place) == want[f"{place}_bytes"], (pid, place)
        if "accelerator" not in e["accessors"]:
            assert not values(text, "numa_process_memory_locality_ratio", pid=pid,
                              accessor="accelerator"), pid


def test_the_gpu_user_reads_local_for_its_accelerator_and_far_for_its_cpus() -> None:
    """Written out: 2 GiB of HBM (node 1) is far for the CPUs, local for the GPU."""
    _, text = _exposition()
    assert _one(text, "numa_process_memory_locality_bytes", pid="700",
                locality="far") == 2147483648
    assert _one(text, "numa_process_memory_locality_ratio", pid="700",
                accessor="accelerator", locality="local") == pytest.approx(
                    2147483648 / (2147483648 + 424706048))


def test_without_the_config_nor_the_driver_file_there_is_no_accelerator_view(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def absent(self: ProcFS, gpu: str) -> bytes:  # a driver without NUMA support
        raise Absent("nvidia", f"{self.root}/driver/nvidia/gpus/{gpu}/numa_status")

    monkeypatch.setattr(ProcFS, "nvidia_numa_status", absent)
    _, text = _exposition(None)
    assert not values(text, "numa_process_memory_locality_ratio", accessor="accelerator")
    assert values(text, "numa_process_memory_locality_ratio", accessor="cpu")


def test_hint_faults_and_fault_share() -> None:
    exp = _expected()["processes"]
    _, text = _exposition()
    for pid, e in exp.items():
        faults = e["faults"]
        got = {lv["node"]: v for lv, v in values(text, "numa_process_hint_faults", pid=pid)
               if v}
        share = _one(text, "numa_process_fault_remote_ratio", pid=pid)
        if faults is None:
            assert got == {} and share is None, pid  # absent, not 0
            continue
        assert got == {n: float(v) for n, v in faults["by_node"].items()}, pid
        assert share == pytest.approx(faults["remote_share_cpu"], abs=1e-6), pid


def test_tier_bytes_and_spans() -> None:
    exp = _expected()["processes"]
    _, text = _exposition()
    for pid, e in exp.items():
        got = {lv["tier"]: v for lv, v in values(text, "numa_process_tier_memory_bytes",
                                                   pid=pid)}
        want = {k: float(v) for k, v in e["bytes_by_tier"].items()}
        if e["untiered_bytes"]:
            want["none"] = float(e["untiered_bytes"])
        assert got == want, pid
        assert _one(text, "numa_process_allowed_cpu_nodes", pid=pid) == e["spans"]["cpus"]
        assert _one(text, "numa_process_allowed_memory_nodes", pid=pid) == e["spans"]["memory"]


def test_the_cpu_home_holds_no_cpu_less_node() -> None:
    """A config pin naming only the HBM node gives way to the next source: the binding
    (the process's threads are all bound to CPUs 0-3, on node 0)."""
    pin = '[[home]]\nmatch = "^vllm$"\nnodes = "1"\n'
    snap, text = _exposition(pin + CONFIG)
    p = {p.pid: p for p in snap.processes}[700]
    assert p.home.nodes == frozenset({0}) and p.home.source == "binding"
    assert _one(text, "numa_process_memory_locality_bytes", pid="700",
                locality="far") == 2147483648


def test_node_classes_tiers_hmat_demotion_and_node_vmstat() -> None:
    exp = _expected()
    _, text = _exposition()
    classes = exp["node_classes"]
    for node in exp["topology"]["nodes"]:
        n = str(node)
        assert _one(text, "numa_node_has_cpu", node=n) == (node in classes["has_cpu"])
        assert _one(text, "numa_node_has_memory", node=n) == (node in classes["has_memory"])
        assert _one(text, "numa_node_has_generic_initiator", node=n) == (
            node in classes["has_generic_initiator"])
    tiers = {lv["node"]: v for lv, v in values(text, "numa_node_memory_tier")}
    assert tiers == {str(n): float(t) for t, ns in exp["memory_tiers"].items() for n in ns}
    lat = values(text, "numa_node_access_latency_seconds")
    bw = values(text, "numa_node_access_bandwidth_bytes_per_second")
    want_lat, want_bw = {}, {}
    for node, per in exp["hmat"].items():
        for cls, w in per.items():
            for ini in w["initiators"]:
                for op in ("read", "write"):
                    key = (node, str(ini), cls.removeprefix("access"), op)
                    want_lat[key] = w[f"{op}_latency_seconds"]
                    want_bw[key] = w[f"{op}_bandwidth_bytes_per_second"]
    key = ("node", "initiator", "access_class", "op")
    assert {tuple(lv[k] for k in key): pytest.approx(v) for lv, v in lat} == want_lat
    assert {tuple(lv[k] for k in key): v for lv, v in bw} == want_bw
    assert _one(text, "numa_memory_demotion_enabled") == float(exp["demotion_enabled"])
    for node, fields in exp["node_vmstat"].items():
        for name, v in fields.items():
            got = _one(text, f"numa_node_vmstat_{name}_total", node=node)
            if name.startswith(("pgpromote_", "pgdemote_")):
                assert got == v, (node, name)
            else:  # numa_* lines are numastat's, exported as numa_node_*_pages_total
                assert got is None, name


def test_collector_off_reads_and_exports_nothing_of_it() -> None:
    snap, text = _exposition(collectors=frozenset({"process", "node"}))
    assert "numa_process_hint_faults" not in text and "numa_node_has_cpu" not in text
    assert all(p.tiers is None for p in snap.processes)
    assert snap.system.node_vmstat == {} and snap.system.demotion_enabled is None


# Hand-written from the root's tables (tests/fixtures/build_roots.py, grace_hopper): nodes
# 0-8 online, memory on 0-1 only; 700 and 720 have default policies and Mems_allowed 0-1
# (every node with memory: unbound), 710 is numactl --membind=1 (bound to the HBM node);
# numa_balancing is 1 on the root.
GH_MEMORY_BOUND = {"700": 0.0, "710": 1.0, "720": 0.0}


@pytest.mark.parametrize("collectors", [None, frozenset({"process", "binding", "balancing"})])
def test_memory_bound_against_the_nodes_with_memory(collectors: frozenset[str] | None
                                                    ) -> None:
    """Mems_allowed 0-1 on a host whose nodes 2-8 have no memory is no binding, so it is no
    strict binding for balancing to trip on; membind=1 stays bound. With the tiers collector
    off as well: has_memory is read for the binding checks all the same."""
    _, text = _exposition(collectors=collectors)
    for pid, bound in GH_MEMORY_BOUND.items():
        assert _one(text, "numa_process_memory_bound", pid=pid) == bound, pid
        assert _one(text, "numa_process_binding_mismatch", pid=pid,
                    reason="balancing_with_strict_binding") == bound, pid
    assert _one(text, "numa_process_binding_mismatch", pid="710",
                reason="memory_not_on_thread_nodes") == 1.0


def test_the_gpu_memory_node_comes_from_the_driver_without_a_config_file() -> None:
    """The NVIDIA driver's numa_status names the HBM node: no memory_nodes pin needed, and
    the view is the one the config file gave."""
    _, pinned = _exposition()
    _, found = _exposition(config=None)
    for text in (pinned, found):
        got = values(text, "numa_process_memory_locality_ratio", pid="700",
                     accessor="accelerator")
        assert got, "no accelerator view"
    assert (sorted(values(found, "numa_process_memory_locality_ratio", pid="700"),
                   key=str)
            == sorted(values(pinned, "numa_process_memory_locality_ratio", pid="700"),
                      key=str))
