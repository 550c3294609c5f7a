"""Hot memory per cgroup and node from one paddr kdamond (``--collector.damon.cgroups``):
one memcg-filtered stat scheme per watched cgroup, each hot region's ``sz_filter_passed``
split over the nodes the region lies on. Against the fake DAMON sysfs answering as 7.3 does
(tests/unit/damon_kernel.py ``generation="7.3"``) and as 6.12 does (no per-filter bytes:
the worker says so, counts it and goes on as without the flag). The node ranges are the
2-node guest's memory blocks (tests/fixtures/memory_blocks: node 0 holds [0, 1 GiB), node 1
[1 GiB, 2 GiB)). Never the host's own DAMON."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from tests.unit.damon_kernel import FakeDamon

from numa_exporter.collectors import damon as damon_collector
from numa_exporter.model.home import Home
from numa_exporter.model.hot_memory import CgroupHotMemory, DamonStatus, cgroup_home
from numa_exporter.model.snapshot import Snapshot
from numa_exporter.model.topology import Topology
from numa_exporter.readers.node_memory import read_node_ranges
from numa_exporter.scan.damon import HotMemoryMonitor, cgroup_candidates, cgroup_homes
from numa_exporter.sources.damon import DamonSettings, DamonSysfs, DamonUnavailable

BOOT = "0b5c1a2e-1111-4222-8333-944455556666"
MiB = 1 << 20
GiB = 1 << 30
NODES = Path(__file__).resolve().parents[1] / "fixtures/memory_blocks/6.12-2node/sys"
# what the 7.3 guest showed (cgroup hotA: 64 MiB read in a loop on node 1; coldB: 256 MiB
# written once on node 0): a hot region around A's hot set, cold regions elsewhere
REGIONS = [(0, 512 * MiB, 0, 30), (512 * MiB, GiB, 0, 30),
           (GiB + 24 * MiB, GiB + 88 * MiB, 20, 1), (GiB + 88 * MiB, 2 * GiB, 0, 25)]
MEMCGS = {"/hotA": [(GiB + 24 * MiB, GiB + 88 * MiB)],  # its hot set, on node 1
          "/coldB": [(100 * MiB, 356 * MiB)]}  # its cold set, on node 0


def _settings(**kw: object) -> DamonSettings:
    base: dict[str, object] = {"mode": "auto", "cgroups": 4, "cgroup_min_accesses": 1}
    base.update(kw)
    return DamonSettings(**base)  # type: ignore[arg-type]


def _driver(tmp: Path, **kw: object) -> DamonSysfs:
    return DamonSysfs(tmp / "sys", tmp / "run", _settings(**kw), BOOT, sleep=lambda _: None)


def _kernel(tmp: Path, monkeypatch: pytest.MonkeyPatch, generation: str = "7.3") -> FakeDamon:
    k = FakeDamon(tmp / "sys", generation=generation)
    k.install(monkeypatch)
    k.memcgs = {p: list(r) for p, r in MEMCGS.items()}
    return k


def _monitor(tmp: Path, exists: set[str] | None = None, clock: list[float] | None = None,
             **kw: object) -> HotMemoryMonitor:
    present = exists if exists is not None else set(MEMCGS)
    now = clock if clock is not None else [0.0]
    return HotMemoryMonitor(_driver(tmp, **kw), None, 0.05,
                            node_ranges=lambda: read_node_ranges(NODES),
                            cgroup_exists=lambda p: p in present, clock=lambda: now[0])


def _hot(m: HotMemoryMonitor) -> dict[str, dict[int, float]]:
    return {p: c.bytes_by_node for p, c in (m.status().cgroups or {}).items()}


# --- the driver -------------------------------------------------------------------------------

def test_auto_takes_paddr_where_the_kernel_offers_filter_bytes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path)
    assert d.claim() == [0]
    assert d.filter_bytes is True and d.ops == "paddr"  # vaddr is listed too


def test_612_has_no_filter_bytes_and_auto_stays_vaddr(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _kernel(tmp_path, monkeypatch, "6.12")
    d = _driver(tmp_path)
    d.claim()
    assert d.filter_bytes is False and d.ops == "vaddr"  # what it does today


def test_cgroup_schemes_are_written_as_the_kernel_wants_them(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    k = _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path, cgroup_min_accesses=2)
    d.claim()
    d.watch_physical(0, [(0, GiB), (GiB, 2 * GiB)], ["/hotA", "/coldB"])
    schemes = k.kd / "0/contexts/0/schemes"
    assert (schemes / "nr_schemes").read_text() == "3\n"
    assert (schemes / "0/access_pattern/nr_accesses/min").read_text() == "0\n"
    assert (schemes / "0/ops_filters/nr_filters").read_text() == "0\n"
    for i, path in ((1, "/hotA"), (2, "/coldB")):
        f = schemes / str(i) / "ops_filters/0"
        assert [(f / n).read_text().strip() for n in ("type", "memcg_path", "matching",
                                                      "allow")] == ["memcg", path, "N", "N"]
        assert (schemes / str(i) / "action").read_text() == "stat\n"
        assert (schemes / str(i) / "access_pattern/nr_accesses/min").read_text() == "2\n"
        assert (schemes / str(i) / "filters/nr_filters").read_text() == "0\n"
    state = json.loads((tmp_path / "run/damon.json").read_text())
    assert state["cgroups"] == ["/hotA", "/coldB"] and state["operations"] == "paddr"
    assert (k.kd / "0/state").read_text() == "on\n"


def test_each_cgroup_scheme_reads_its_own_passed_bytes(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path)
    d.claim()
    d.watch_physical(0, [(0, 2 * GiB)], ["/hotA", "/coldB"])
    k.set_regions(0, REGIONS)
    every, a, b = d.read_schemes(0)
    assert len(every.regions) == 4 and all(r.passed is None for r in every.regions)
    assert [(r.start, r.passed) for r in a.regions] == [(GiB + 24 * MiB, 64 * MiB)]
    assert [(r.start, r.passed) for r in b.regions] == [(GiB + 24 * MiB, 0)]  # hot only


def test_a_restart_recognises_its_own_cgroup_schemes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path)
    d.claim()
    d.watch_physical(0, [(0, 2 * GiB)], ["/hotA"])
    again = _driver(tmp_path)
    assert again.claim() == [0]  # not foreign
    assert again.cgroups == ["/hotA"]


def test_a_cgroup_scheme_someone_changed_makes_the_kdamond_foreign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path)
    d.claim()
    d.watch_physical(0, [(0, 2 * GiB)], ["/hotA"])
    d.release()
    k.store("0/contexts/0/schemes/1/ops_filters/0/memcg_path", "/coldB")
    before = {p: p.read_bytes() for p in k.kd.rglob("*") if p.is_file()}
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "foreign"
    assert {p: p.read_bytes() for p in k.kd.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("bad", ["/../x", "relative", "/a\nb"])
def test_a_cgroup_path_no_memcg_filter_may_take_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    k = _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path)
    d.claim()
    if bad == "/../x":  # a path, just one the kernel finds no memcg for: refused at start
        with pytest.raises(DamonUnavailable) as got:
            d.watch_physical(0, [(0, 2 * GiB)], [bad])
        assert got.value.reason == "gone"
        return
    with pytest.raises(DamonUnavailable) as got:
        d.watch_physical(0, [(0, 2 * GiB)], [bad])
    assert got.value.reason == "error"
    assert not any("memcg_path" in rel for rel, _ in k.writes)


def test_an_exclusive_kdamond_is_busy_not_a_gone_cgroup(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    d = _driver(tmp_path)
    d.claim()
    k.exclusive_errno = errno.EBUSY  # DAMON_STAT's kdamond runs (7.3 from boot)
    with pytest.raises(DamonUnavailable) as got:
        d.watch_physical(0, [(0, 2 * GiB)], ["/hotA"])
    assert got.value.reason == "busy"
    assert (k.kd / "nr_kdamonds").read_text() == "0\n"  # its own, removed again


def test_the_fake_refuses_memcg_in_core_filters_as_73_does(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    k = _kernel(tmp_path, monkeypatch)
    for rel, v in (("nr_kdamonds", "1"), ("0/contexts/nr_contexts", "1"),
                   ("0/contexts/0/schemes/nr_schemes", "1"),
                   ("0/contexts/0/schemes/0/core_filters/nr_filters", "1")):
        k.store(rel, v)
    with pytest.raises(OSError) as got:
        k.store("0/contexts/0/schemes/0/core_filters/0/type", "memcg")
    assert got.value.errno == errno.EINVAL


@pytest.mark.parametrize(("matching", "allow"), [("Y", "Y"), ("N", "N")])
def test_the_fake_passes_a_memcgs_pages_either_way_as_73_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matching: str, allow: str) -> None:
    """Measured in the 7.3 guest: one memcg filter ``matching`` Y ``allow`` Y passed 64 MiB of
    the 67 MiB hot region holding the cgroup's 64 MiB (the other pages rejected by default);
    the driver writes the reject form, N/N, which passes the same pages on 6.14 too."""
    k = _kernel(tmp_path, monkeypatch)
    for rel, v in (("nr_kdamonds", "1"), ("0/contexts/nr_contexts", "1"),
                   ("0/contexts/0/operations", "paddr"),
                   ("0/contexts/0/schemes/nr_schemes", "1"),
                   ("0/contexts/0/schemes/0/ops_filters/nr_filters", "1"),
                   ("0/contexts/0/schemes/0/ops_filters/0/type", "memcg"),
                   ("0/contexts/0/schemes/0/ops_filters/0/memcg_path", "/hotA"),
                   ("0/contexts/0/schemes/0/ops_filters/0/matching", matching),
                   ("0/contexts/0/schemes/0/ops_filters/0/allow", allow), ("0/state", "on")):
        k.store(rel, v)
    k.set_regions(0, [(GiB + 20 * MiB, GiB + 88 * MiB, 20, 0)])
    k.store("0/state", "update_schemes_tried_regions")
    tried = k.kd / "0/contexts/0/schemes/0/tried_regions/0/sz_filter_passed"
    assert int(tried.read_text()) == 64 * MiB


# --- the worker -------------------------------------------------------------------------------

def test_hot_bytes_per_cgroup_and_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    m = _monitor(tmp_path)
    m.want_cgroups(["/hotA", "/coldB"])
    k.set_regions(0, REGIONS)
    assert m.step() == m.period_s
    assert m.status().state == "monitoring"
    assert _hot(m) == {"/hotA": {0: 0, 1: 64 * MiB}, "/coldB": {0: 0, 1: 0}}
    nodes = m.status().nodes
    assert nodes is not None and nodes.hot == {1: 64 * MiB}  # the unfiltered scheme goes on


def test_a_hot_region_over_two_nodes_is_split_in_proportion(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    k = _kernel(tmp_path, monkeypatch)
    k.memcgs["/hotA"] = [(GiB - 96 * MiB, GiB + 32 * MiB)]  # 128 MiB of A across the border
    m = _monitor(tmp_path)
    m.want_cgroups(["/hotA"])
    k.set_regions(0, [(GiB - 256 * MiB, GiB + 256 * MiB, 20, 0)])  # 512 MiB, half on each
    m.step()
    assert _hot(m) == {"/hotA": {0: 64 * MiB, 1: 64 * MiB}}


def test_612_says_once_counts_once_and_goes_on_as_today(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    k = _kernel(tmp_path, monkeypatch, "6.12")
    m = _monitor(tmp_path, mode="paddr")
    m.want_cgroups(["/hotA"])
    k.set_regions(0, REGIONS)
    m.step()
    m.driver.slots.clear()  # claimed again (as after a refused start): still once
    m.step()
    st = m.status()
    assert st.state == "monitoring" and st.cgroups is None
    assert (st.events or {}).get("cgroups_unsupported") == 1
    assert st.nodes is not None and st.nodes.hot == {1: 64 * MiB}  # today's paddr families
    assert "schemes/1" not in " ".join(rel for rel, _ in k.writes)
    assert capsys.readouterr().out.count("per-cgroup hot memory") == 1


def test_a_forced_vaddr_mode_says_cgroups_are_unsupported(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    k = _kernel(tmp_path, monkeypatch)  # 7.3: per-filter bytes offered, but vaddr forced
    m = _monitor(tmp_path, mode="vaddr")
    m.want_cgroups(["/hotA"])
    m.step()
    assert m.driver.ops == "vaddr" and m.driver.filter_bytes is True
    assert (m.status().events or {}).get("cgroups_unsupported") == 1
    assert "vaddr" in capsys.readouterr().out
    assert (k.kd / "0/contexts/0/schemes/nr_schemes").read_text() == "1\n"


def test_a_cgroup_that_vanishes_is_dropped_and_counted(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    present = set(MEMCGS)
    m = _monitor(tmp_path, exists=present)
    m.want_cgroups(["/hotA", "/coldB"])
    k.set_regions(0, REGIONS)
    m.step()
    assert set(_hot(m)) == {"/hotA", "/coldB"}
    present.discard("/coldB")  # the pod went: its cgroup is removed
    del k.memcgs["/coldB"]
    m.step()
    assert set(_hot(m)) == {"/hotA"}
    assert m.driver.cgroups == ["/hotA"]
    assert (m.status().events or {}).get("cgroup_gone") == 1
    assert (k.kd / "0/contexts/0/schemes/nr_schemes").read_text() == "2\n"


def test_a_cgroup_gone_between_the_check_and_the_start_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    present = set(MEMCGS)
    m = _monitor(tmp_path, exists=present)
    m.want_cgroups(["/hotA", "/coldB"])
    del k.memcgs["/coldB"]  # the kernel has no memcg of it any more ...
    real = m.cgroup_exists
    calls: list[str] = []

    def exists(p: str) -> bool:  # ... and the cgroupfs says so from the second look on
        calls.append(p)
        return real(p) if calls.count(p) == 1 else p in k.memcgs
    m.cgroup_exists = exists
    k.set_regions(0, REGIONS)
    m.step()
    assert m.status().state == "monitoring"
    assert m.driver.cgroups == ["/hotA"]
    assert _hot(m) == {"/hotA": {0: 0, 1: 64 * MiB}}
    assert (m.status().events or {}).get("cgroup_gone") == 1


def test_unsound_passed_bytes_are_refused_and_counted(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    m = _monitor(tmp_path)
    m.want_cgroups(["/hotA"])
    k.set_regions(0, REGIONS)
    m.step()
    tried = k.kd / "0/contexts/0/schemes/1/tried_regions/0"
    orig = k._tried

    def hostile(i: int) -> None:
        orig(i)
        (tried / "sz_filter_passed").write_text("-1\n")
    monkeypatch.setattr(k, "_tried", hostile)
    m.step()
    assert _hot(m) == {"/hotA": {0: 0, 1: 0}}
    assert (m.status().events or {}).get("regions_refused") == 1

    def missing(i: int) -> None:
        orig(i)
        (tried / "sz_filter_passed").unlink()
    monkeypatch.setattr(k, "_tried", missing)
    m.step()
    assert (m.status().events or {}).get("regions_refused") == 2


def test_passed_bytes_above_the_region_count_as_the_region(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    k = _kernel(tmp_path, monkeypatch)
    k.memcgs["/hotA"] = [(GiB + 24 * MiB, GiB + 88 * MiB)] * 3  # 192 MiB in a 64 MiB region
    m = _monitor(tmp_path)
    m.want_cgroups(["/hotA"])
    k.set_regions(0, REGIONS)
    m.step()
    assert _hot(m) == {"/hotA": {0: 0, 1: 64 * MiB}}


def test_busy_is_counted_and_the_worker_retries_later(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    k = _kernel(tmp_path, monkeypatch)
    k.exclusive_errno = errno.EBUSY
    m = _monitor(tmp_path)
    m.want_cgroups(["/hotA"])
    assert m.step() > m.period_s  # RETRY_S
    assert m.status().state == "busy"
    k.exclusive_errno = None
    k.set_regions(0, REGIONS)
    m.step()
    assert _hot(m) == {"/hotA": {0: 0, 1: 64 * MiB}}


def test_the_watched_set_is_chosen_again_after_its_interval(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    k = _kernel(tmp_path, monkeypatch)
    now = [0.0]
    m = _monitor(tmp_path, clock=now, cgroups=1)
    m.want_cgroups(["/hotA", "/coldB"])
    k.set_regions(0, REGIONS)
    m.step()
    assert m.driver.cgroups == ["/hotA"]  # the flag's count: one
    m.want_cgroups(["/coldB", "/hotA"])
    now[0] = 30.0
    m.step()
    assert m.driver.cgroups == ["/hotA"]  # kept: no restart within the interval
    now[0] = 61.0
    m.step()
    assert m.driver.cgroups == ["/coldB"]


# --- homes, candidates and the collector ------------------------------------------------------

@pytest.mark.parametrize(("kubelet", "cpus", "mems", "want"), [
    ({1}, {0}, {0}, {1}),  # the kubelet's assignment first
    (set(), {0}, {0, 1}, {0}),  # else the nodes of its CPUs, where narrower than all
    (set(), {0, 1}, {1}, {1}),  # else cpuset.mems.effective, where narrower than all
    (set(), {0, 1}, {0, 1}, set()),  # every node allowed: no home, no ratio
])
def test_cgroup_home(kubelet: set[int], cpus: set[int], mems: set[int], want: set[int]) -> None:
    both = frozenset({0, 1})
    assert cgroup_home(frozenset(kubelet), frozenset(cpus), frozenset(mems), both,
                       both) == frozenset(want)


def _sample(pid: int, cgroup: str | None, rss: int, pod: bool = False,
            cpus: frozenset[int] | None = None, home: Home | None = None) -> object:
    from dataclasses import replace

    from numa_exporter.model.home import Locality
    from numa_exporter.model.kubernetes import ContainerRef
    from numa_exporter.model.snapshot import ProcessSample

    s = ProcessSample(pid, "x", 1.0, rss, {}, {}, {}, {}, home or Home(frozenset(), "none"),
                      Locality(0, 0), None, 0.0, cpus, None, cgroup=cgroup)
    if pod:
        s = replace(s, kubernetes=ContainerRef(namespace="ns", pod="p", container="c",
                                               uid="u", qos="", container_id="", kind="container"),
                    kubernetes_cgroup=cgroup)
    return s


def test_candidates_pod_containers_first_then_by_resident_bytes() -> None:
    samples = [_sample(1, "/system.slice/a", 900), _sample(2, "/kubepods/p1/c1", 10, pod=True),
               _sample(3, "/system.slice/b", 400), _sample(4, "/system.slice/b", 600),
               _sample(5, "/", 10_000), _sample(6, None, 10_000),
               _sample(7, "/kubepods/p2/c2", 50, pod=True)]
    assert cgroup_candidates(samples) == [  # type: ignore[arg-type]
        "/kubepods/p2/c2", "/kubepods/p1/c1", "/system.slice/b", "/system.slice/a"]


def test_homes_from_the_kubelet_or_the_cpus() -> None:
    topo = Topology(cpus={0: frozenset({0}), 1: frozenset({1})})
    samples = [_sample(1, "/a", 1, cpus=frozenset({0})),
               _sample(2, "/b", 1, cpus=frozenset({0, 1}), home=Home(frozenset({1}), "kubelet")),
               _sample(3, "/c", 1, cpus=frozenset({0, 1}))]
    assert cgroup_homes(samples, ["/a", "/b", "/c"], topo,  # type: ignore[arg-type]
                        frozenset({0, 1})) == {"/a": frozenset({0}), "/b": frozenset({1}),
                                               "/c": frozenset()}


def test_the_collector_exports_hot_bytes_and_the_ratio_per_cgroup() -> None:
    st = DamonStatus("monitoring", {}, {}, cgroups={
        "/hotA": CgroupHotMemory("/hotA", {0: 16 * MiB, 1: 48 * MiB}),
        "/coldB": CgroupHotMemory("/coldB", {}),
        "/open": CgroupHotMemory("/open", {0: MiB})},
        homes={"/hotA": frozenset({0}), "/coldB": frozenset({0}), "/open": frozenset()})
    fams = {f.name: f for f in damon_collector.emit(Snapshot(damon=st))}
    hot = {(s.labels["cgroup"], s.labels["node"]): s.value
           for s in fams["numa_cgroup_hot_memory_bytes"].samples}
    assert hot == {("/hotA", "0"): 16 * MiB, ("/hotA", "1"): 48 * MiB, ("/open", "0"): MiB}
    ratio = {s.labels["cgroup"]: s.value
             for s in fams["numa_cgroup_hot_remote_memory_ratio"].samples}
    assert ratio == {"/hotA": 0.75}  # coldB: no hot bytes; open: every node allowed


def test_memcg_exists_only_for_a_cgroup_with_a_memcg_of_its_own(tmp_path: Path) -> None:
    from numa_exporter.sources.cgroupfs import CgroupFS

    root = tmp_path / "sys/fs/cgroup"
    (root / "a").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (root / "a/memory.current").write_text("4096\n")
    (root / "b").mkdir()  # its parent does not enable memory: no memcg (7.3: ENOMEM)
    fs = CgroupFS(tmp_path / "sys")
    assert fs.memcg_exists("/a")
    assert not fs.memcg_exists("/b")
    assert not fs.memcg_exists("/gone")
    assert not fs.memcg_exists("/../a")
