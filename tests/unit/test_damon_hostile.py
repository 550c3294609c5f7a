"""The DAMON collector against hostile and changing conditions (issue 37), on a fake sysfs
tree that answers writes as the kernel does (tests/unit/damon_kernel.py); never the host's
DAMON."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import pytest
from tests.unit.damon_kernel import FakeDamon

from numa_exporter.sources.damon import DamonSettings, DamonSysfs, DamonUnavailable

BOOT = "0b5c1a2e-1111-4222-8333-944455556666"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _driver(tmp: Path, settings: DamonSettings | None = None, **kw: object) -> DamonSysfs:
    return DamonSysfs(tmp / "sys", tmp / "run", settings or DamonSettings(), BOOT,
                      sleep=lambda _: None, **kw)  # type: ignore[arg-type]


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDamon:
    k = FakeDamon(tmp_path / "sys", alive=[1234, 2000, 3000])
    k.install(monkeypatch)
    return k


def _foreign_pageout(kernel: FakeDamon) -> None:
    """Someone else's kdamond: vaddr pageout on pid 2000, running."""
    kernel.store("nr_kdamonds", "1")
    for rel, v in (("0/contexts/nr_contexts", "1"), ("0/contexts/0/targets/nr_targets", "1"),
                   ("0/contexts/0/schemes/nr_schemes", "1")):
        kernel.store(rel, v)
    (kernel.kd / "0/contexts/0/targets/0/pid_target").write_text("2000\n")
    kernel.store("0/state", "on")


# --- 3. the run directory and the state file ------------------------------------------------

def test_the_fake_answers_as_the_kernel(tmp_path: Path, kernel: FakeDamon) -> None:
    d = _driver(tmp_path)
    assert d.claim() == [0]
    d.watch(0, 1234)
    assert d.state(0) == "on" and d.kdamond_pid(0) == 4242
    with pytest.raises(DamonUnavailable) as got:  # nr_kdamonds while one runs: EBUSY
        d._write(kernel.kd / "nr_kdamonds", "0")
    assert got.value.reason == "busy"
    assert (kernel.kd / "nr_kdamonds").read_text() == "1\n"
    with pytest.raises(DamonUnavailable):  # a target that does not exist: EINVAL
        d.watch(0, 999_999)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_run_dir_others_can_write_is_refused(tmp_path: Path, kernel: FakeDamon,
                                              mode: int) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(mode)
    before = _snapshot(tmp_path / "sys")
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "run_dir" and "writable" in str(got.value)
    assert _snapshot(tmp_path / "sys") == before and kernel.writes == []


def test_a_run_dir_another_user_owns_is_refused(tmp_path: Path, kernel: FakeDamon) -> None:
    (tmp_path / "run").mkdir(mode=0o700)
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path, uid=os.geteuid() + 1).claim()  # the directory is not the exporter's
    assert got.value.reason == "run_dir" and "owned by uid" in str(got.value)
    assert kernel.writes == []


def test_a_run_dir_that_is_a_link_is_refused(tmp_path: Path, kernel: FakeDamon) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "run_dir"
    assert kernel.writes == []


def test_a_forged_state_file_does_not_take_a_foreign_running_kdamond(
        tmp_path: Path, kernel: FakeDamon) -> None:
    # the state file names the foreign kdamond's thread pid (all the old check compared),
    # and another mode, so that a takeover would also stop it and write nr_kdamonds=0
    _foreign_pageout(kernel)
    (tmp_path / "run").mkdir(mode=0o700)
    forged = {"boot_id": BOOT, "nr_kdamonds": 1, "slots": [0], "pids": {"0": 4242},
              "targets": {"0": 2000}, "operations": "paddr"}
    (tmp_path / "run" / "damon.json").write_text(json.dumps(forged))
    before = _snapshot(tmp_path / "sys")
    kernel.writes.clear()
    d = _driver(tmp_path, DamonSettings(mode="vaddr"))
    with pytest.raises(DamonUnavailable) as got:
        d.claim()
    assert got.value.reason == "foreign"
    assert kernel.writes == [] and _snapshot(tmp_path / "sys") == before
    assert kernel.kdamonds[0].running  # the foreign pageout kdamond runs on, untouched


def test_the_state_file_is_never_followed_through_a_link(tmp_path: Path,
                                                        kernel: FakeDamon) -> None:
    (tmp_path / "run").mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (tmp_path / "run" / "damon.tmp").symlink_to(victim)  # the old temporary name
    (tmp_path / "run" / "damon.json.tmp").symlink_to(victim)
    d = _driver(tmp_path)
    assert d.claim() == [0]  # nobody had a kdamond: created, state written
    assert victim.read_text() == "root's file\n"
    state = tmp_path / "run" / "damon.json"
    assert not state.is_symlink() and json.loads(state.read_text())["slots"] == [0]
    assert state.stat().st_mode & 0o077 == 0


def test_a_state_file_linked_to_dev_zero_is_refused_without_reading_it(
        tmp_path: Path, kernel: FakeDamon) -> None:
    _foreign_pageout(kernel)  # kdamonds exist: the state file is consulted
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run" / "damon.json").symlink_to("/dev/zero")
    done: list[BaseException] = []

    def claim() -> None:
        try:
            _driver(tmp_path).claim()
        except BaseException as exc:  # handed to the test thread
            done.append(exc)

    t = threading.Thread(target=claim, daemon=True)
    t.start()
    t.join(10)
    assert done and isinstance(done[0], DamonUnavailable) and done[0].reason == "run_dir"


@pytest.mark.parametrize("kind", ["fifo", "huge", "directory"])
def test_a_state_file_that_is_no_small_regular_file_is_refused(
        tmp_path: Path, kernel: FakeDamon, kind: str) -> None:
    _foreign_pageout(kernel)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    state = run / "damon.json"
    if kind == "fifo":
        os.mkfifo(state)  # a reader of the old code blocked here for good
    elif kind == "huge":
        with state.open("wb") as f:
            f.write(b'{"boot_id": "' + BOOT.encode() + b'", "pad": "' + b"x" * (8 << 20)
                    + b'"}')
    else:
        state.mkdir()
    done: list[BaseException] = []

    def claim() -> None:
        try:
            _driver(tmp_path).claim()
        except BaseException as exc:  # handed to the test thread
            done.append(exc)

    t = threading.Thread(target=claim, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "claim hung on the state file"
    assert done and isinstance(done[0], DamonUnavailable) and done[0].reason == "run_dir"


def test_a_mode_change_never_wipes_kdamonds_that_are_not_provably_its_own(
        tmp_path: Path, kernel: FakeDamon) -> None:
    # its own stopped vaddr kdamond, reconfigured by someone since (the state file still
    # names it): a restart in paddr mode must not stop or remove it (nr_kdamonds unwritten)
    d = _driver(tmp_path)
    d.claim()
    d.watch(0, 1234)
    d.release()
    state = json.loads((tmp_path / "run" / "damon.json").read_text())
    (kernel.kd / "0/contexts/0/schemes/0/action").write_text("pageout\n")
    kernel.writes.clear()
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path, DamonSettings(mode="paddr")).claim()
    assert got.value.reason == "foreign"
    assert all(rel != "nr_kdamonds" for rel, _ in kernel.writes)
    assert state["operations"] == "vaddr"


def test_the_worker_counts_an_unsafe_run_dir_and_serves_on(tmp_path: Path,
                                                         kernel: FakeDamon) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor

    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o777)
    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [], 0.05)
    m.step()
    st = m.status()
    assert st.state == "run_dir" and st.unavailable == {"run_dir": 1}
    assert kernel.writes == []


# --- 1, 2: a target that exits, a kdamond stopped from outside, a stalled worker -----------

MiB = 1 << 20
HOT = [(0x10000, 0x10000 + 4 * MiB, 19, 3), (0x10000 + 4 * MiB, 0x10000 + 8 * MiB, 0, 40)]


def _monitor(tmp_path: Path, kernel: FakeDamon, **kw: object) -> object:
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched

    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [0] * len(a), 0.05,
                         **kw)  # type: ignore[arg-type]
    m.driver.claim()
    kernel.set_regions(0, HOT)
    m.want([Watched(1234, 10.0), Watched(2000, 20.0), Watched(3000, 30.0)])
    return m


@pytest.mark.parametrize("when", ["during the update (ECANCELED)", "just before (EINVAL)"])
def test_a_target_that_exits_is_replaced_in_the_same_round(tmp_path: Path, kernel: FakeDamon,
                                                           when: str) -> None:
    m = _monitor(tmp_path, kernel)
    m.round()  # type: ignore[attr-defined]
    assert set(m.status().hot or {}) == {1234}  # type: ignore[attr-defined]
    if when.startswith("during"):
        def exit_once(i: int) -> None:
            kernel.during_update = None
            kernel.exit_target(1234)
        kernel.during_update = exit_once
    else:  # it exited after the state read: the kernel's state already off, the file not
        kernel.alive.discard(1234)
        kernel.kdamonds[0].running, kernel.kdamonds[0].pid = False, -1
    m.round()  # type: ignore[attr-defined]
    st = m.status()  # type: ignore[attr-defined]
    assert st.state == "monitoring"  # numa_exporter_damon_up stays 1
    assert set(st.hot or {}) == {2000}
    assert sum(st.hot[2000].bytes_by_node.values()) == 4 * MiB
    assert kernel._target(0) == 2000 and kernel.kdamonds[0].running
    assert st.events == {"target_exited": 1} and not st.unavailable


def test_a_kdamond_stopped_from_outside_is_started_again(tmp_path: Path,
                                                        kernel: FakeDamon) -> None:
    m = _monitor(tmp_path, kernel)
    m.round()  # type: ignore[attr-defined]
    kernel.stop(0)  # `damo stop`, an operator's echo off; pid 1234 lives on
    m.round()  # type: ignore[attr-defined]
    st = m.status()  # type: ignore[attr-defined]
    assert st.state == "monitoring"
    assert sum((st.hot or {})[1234].bytes_by_node.values()) == 4 * MiB  # not 0
    assert kernel.kdamonds[0].running and kernel._target(0) == 1234
    assert st.events == {"kdamond_restarted": 1}


def test_a_stopped_kdamond_someone_reconfigured_is_not_started(tmp_path: Path,
                                                             kernel: FakeDamon) -> None:
    m = _monitor(tmp_path, kernel)
    m.round()  # type: ignore[attr-defined]
    kernel.stop(0)
    (kernel.kd / "0/contexts/0/schemes/0/action").write_text("pageout\n")  # taken over
    assert m.step() > 1  # type: ignore[attr-defined]  # waits RETRY_S
    st = m.status()  # type: ignore[attr-defined]
    assert st.state == "foreign" and not kernel.kdamonds[0].running


def test_hot_memory_older_than_its_bound_is_not_joined(tmp_path: Path, kernel: FakeDamon,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import time as time_mod

    from numa_exporter.model.snapshot import Home, ProcessSample
    from numa_exporter.scan import damon as worker

    m = _monitor(tmp_path, kernel)
    m.round()  # type: ignore[attr-defined]
    sample = ProcessSample(
        pid=1234, comm="big", start_time=10.0, rss_bytes=64 * MiB, memory={}, policy_bytes={},
        policy_nodes={}, threads_by_node={}, home=Home(frozenset({0}), "threads"),
        locality=None, pages_migrated=None, scan_seconds=0.0,  # type: ignore[arg-type]
        cpus_allowed=None, mems_allowed=None)
    joined, st = worker.join_hot(m, [sample])  # type: ignore[arg-type]
    assert joined[0].hot is not None and st.state == "monitoring"
    later = time_mod.monotonic() + 3600  # the worker hung an hour ago
    monkeypatch.setattr(worker.time, "monotonic", lambda: later)
    joined, st = worker.join_hot(m, [sample])  # type: ignore[arg-type]
    assert joined[0].hot is None
    assert st.state == "stalled" and (st.unavailable or {}).get("stalled") == 1


# --- 6. region values bounded by the process ------------------------------------------------

def test_a_region_to_the_top_of_the_address_space_gives_no_more_than_resident(
        tmp_path: Path, kernel: FakeDamon) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched

    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [0] * len(a), 0.05)
    m.driver.claim()
    kernel.set_regions(0, [(0x10000, (1 << 64) - 1, 20, 1)])  # hot, to 2^64-1
    m.want([Watched(1234, 10.0, 400 * MiB)])  # 400 MiB resident
    m.round()
    h = (m.status().hot or {})[1234]
    assert 0 < sum(h.bytes_by_node.values()) <= 400 * MiB  # the old code: 1.8e19
    assert (m.status().events or {}).get("hot_bytes_clamped") == 1
    assert (m.status().events or {}).get("regions_refused") == 1  # cut at TASK_SIZE_MAX


@pytest.mark.parametrize("bad", [("-4096", 0x20000, 20, 0), (0x30000, "-1", 20, 0),
                                 (0x40000, 0x50000, "-3", 0), (0x60000, 0x60000, 20, 0),
                                 (0x70000, 0x80000, "1e9", 0), (0x90000, "18446744073709551616",
                                                                20, 0)])
def test_a_region_with_an_unsound_value_is_refused_and_counted(
        tmp_path: Path, kernel: FakeDamon, bad: tuple[int | str, ...]) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched

    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [0] * len(a), 0.05)
    m.driver.claim()
    kernel.set_regions(0, [bad, (0x100000, 0x100000 + MiB, 20, 0)])
    m.want([Watched(1234, 10.0)])
    m.round()
    st = m.status()
    assert st.state == "monitoring"
    assert (st.hot or {})[1234].bytes_by_node == {0: MiB}  # only the sound region
    assert (st.events or {}).get("regions_refused") == 1


# --- 4. hot bytes from every hot region -----------------------------------------------------

def _half_hot(n: int, hot_bytes: int) -> tuple[list[object], dict[int, int]]:
    """Return n equal regions, every other one hot (``hot_bytes`` in all), and the node of
    each region's pages: about a third of the regions on node 1 (a fixed scramble)."""
    from numa_exporter.sources.damon import Region

    size = 2 * hot_bytes // n // 4096 * 4096
    base = 0x7F0000000000 - n * size
    regions = [Region(base + i * size, base + (i + 1) * size, 20 if i % 2 == 0 else 0)
               for i in range(n)]
    node = {i: 1 if (i * 2654435761) % 97 < 32 else 0 for i in range(n)}
    return regions, node


@pytest.mark.parametrize("n", [1_000, 10_000])
def test_every_hot_region_counts_not_the_largest_256(n: int) -> None:
    from numa_exporter.readers.hot_memory import place_hot_regions

    regions, node = _half_hot(n, 200 * MiB)
    size = regions[0].end - regions[0].start  # type: ignore[attr-defined]
    base = regions[0].start  # type: ignore[attr-defined]
    truth: dict[int, int] = {}
    for i, r in enumerate(regions):
        if r.nr_accesses:  # type: ignore[attr-defined]
            truth[node[i]] = truth.get(node[i], 0) + size
    asked: list[int] = []

    def query(addrs: list[int]) -> list[int]:
        asked.extend(addrs)
        return [node[(a - base) // size] for a in addrs]

    h = place_hot_regions(1234, 1.0, regions, 20, 0.05, query, 0.0,  # type: ignore[arg-type]
                          offset=0.5)
    total = sum(h.bytes_by_node.values())
    hot = sum(truth.values())
    assert abs(hot - 200 * MiB) < 0.03 * 200 * MiB  # the layout's hot bytes (page-rounded)
    assert abs(total - hot) <= 0.10 * hot  # the old code: 102 MiB (1,000), 10 MiB (10,000)
    for nd, b in truth.items():  # each node within its stated error (4 standard errors)
        assert abs(h.bytes_by_node.get(nd, 0.0) - b) <= 4 * h.stderr_bytes + 0.02 * hot
    assert 0 < h.stderr_bytes < 0.05 * hot
    assert h.placed_regions <= 256 and len(asked) <= 256 * 32  # a bounded sample
    assert h.hot_regions == n // 2 and h.hot_bytes == pytest.approx(hot)


def test_a_few_hot_regions_are_all_placed_with_no_region_sampling_error() -> None:
    from numa_exporter.readers.hot_memory import place_hot_regions

    regions, node = _half_hot(100, 20 * MiB)
    size = regions[0].end - regions[0].start  # type: ignore[attr-defined]
    base = regions[0].start  # type: ignore[attr-defined]
    h = place_hot_regions(1, 1.0, regions, 20, 0.05,  # type: ignore[arg-type]
                          lambda a: [node[(x - base) // size] for x in a], 0.0)
    truth: dict[int, float] = {}
    for i, r in enumerate(regions):
        if r.nr_accesses:  # type: ignore[attr-defined]
            truth[node[i]] = truth.get(node[i], 0) + size
    assert h.bytes_by_node == truth and h.placed_regions == 50 and h.stderr_bytes == 0


def test_the_worker_reads_1000_regions_half_hot_as_200_mib(tmp_path: Path,
                                                         kernel: FakeDamon) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched

    regions, _ = _half_hot(1_000, 200 * MiB)
    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [0] * len(a), 0.05)
    m.driver.claim()
    kernel.set_regions(0, [(r.start, r.end, r.nr_accesses, 7)  # type: ignore[attr-defined]
                           for r in regions])
    m.want([Watched(1234, 10.0)])
    m.round()
    h = (m.status().hot or {})[1234]
    assert abs(sum(h.bytes_by_node.values()) - 200 * MiB) <= 0.10 * 200 * MiB  # old: 102 MiB
    assert h.regions == 1_000


# --- 9. the kernel's own DAMON modules ------------------------------------------------------

def _module(sysfs: Path, name: str, enabled: str, pid: int | None = -1) -> None:
    params = sysfs / "module" / name / "parameters"
    params.mkdir(parents=True, exist_ok=True)
    (params / "enabled").write_text(enabled + "\n")
    if pid is not None:
        (params / "kdamond_pid").write_text(f"{pid}\n")


def _module_monitor(tmp_path: Path, kernel: FakeDamon, **kw: object) -> object:
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched
    from numa_exporter.sources.damon import damon_modules

    sysfs = tmp_path / "sys"
    _module(sysfs, "damon_reclaim", "N")
    _module(sysfs, "damon_lru_sort", "N")
    _module(sysfs, "damon_stat", "N", pid=None)  # it has no kdamond_pid parameter
    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [0] * len(a), 0.05,
                         modules=lambda: damon_modules(sysfs), **kw)  # type: ignore[arg-type]
    kernel.set_regions(0, HOT)
    m.want([Watched(1234, 10.0)])
    return m


def test_a_module_blocked_or_refused_while_our_kdamond_runs_is_reported(
        tmp_path: Path, kernel: FakeDamon) -> None:
    m = _module_monitor(tmp_path, kernel)
    m.step()  # type: ignore[attr-defined]
    # present, not running, our kdamond runs: enabling any of them fails now
    assert m.status().modules_blocked == {  # type: ignore[attr-defined]
        "damon_reclaim": True, "damon_lru_sort": True, "damon_stat": True}
    assert not (m.status().events or {}).get("module_refused")  # type: ignore[attr-defined]
    # `echo Y > .../damon_reclaim/parameters/enabled` failed (EIO): enabled Y, no kdamond
    _module(tmp_path / "sys", "damon_reclaim", "Y", pid=-1)
    for _ in range(3):
        m.step()  # type: ignore[attr-defined]
    st = m.status()  # type: ignore[attr-defined]
    assert st.state == "monitoring" and kernel.kdamonds[0].running  # no flag: it stays
    assert st.modules_blocked["damon_reclaim"] is True
    assert (st.events or {}).get("module_refused") == 1  # one episode, said once
    _module(tmp_path / "sys", "damon_reclaim", "N", pid=-1)
    m.step()  # type: ignore[attr-defined]
    _module(tmp_path / "sys", "damon_reclaim", "Y", pid=-1)  # a second request
    m.step()  # type: ignore[attr-defined]
    assert (m.status().events or {}).get("module_refused") == 2  # type: ignore[attr-defined]
    m.driver.release()  # our kdamond stops: nothing blocks the modules
    m._check_modules(m._read_modules())  # type: ignore[attr-defined]
    assert not any(m.status().modules_blocked.values())  # type: ignore[attr-defined]


def test_yield_to_modules_stops_our_kdamonds_and_resumes(tmp_path: Path,
                                                        kernel: FakeDamon) -> None:
    m = _module_monitor(tmp_path, kernel, yield_to_modules=True)
    m.step()  # type: ignore[attr-defined]
    assert kernel.kdamonds[0].running
    _module(tmp_path / "sys", "damon_stat", "Y", pid=None)
    m.step()  # type: ignore[attr-defined]
    st = m.status()  # type: ignore[attr-defined]
    assert st.state == "yielded" and not kernel.kdamonds[0].running  # made way
    assert (st.events or {}).get("yielded") == 1
    # the module may now start: nr_kdamonds untouched, our slot stopped; then it stops
    _module(tmp_path / "sys", "damon_stat", "N", pid=None)
    m.step()  # type: ignore[attr-defined]
    st = m.status()  # type: ignore[attr-defined]
    assert st.state == "monitoring" and kernel.kdamonds[0].running
    assert kernel._target(0) == 1234 and sum((st.hot or {})[1234].bytes_by_node.values()) > 0


def test_module_parameters_with_hostile_values_are_left_out(tmp_path: Path) -> None:
    from numa_exporter.sources.damon import DamonModule, damon_modules

    _module(tmp_path, "damon_reclaim", "maybe")
    _module(tmp_path, "damon_lru_sort", "Y", pid=None)
    (tmp_path / "module/damon_lru_sort/parameters/kdamond_pid").write_text("-" + "9" * 40)
    assert damon_modules(tmp_path) == [DamonModule("damon_lru_sort", True, None)]


def test_the_collector_exports_a_refused_module() -> None:
    from numa_exporter.collectors.damon import emit
    from numa_exporter.model.hot_memory import DamonStatus

    class Snap:
        processes = ()
        damon = DamonStatus("monitoring", {}, {}, modules_blocked={"damon_reclaim": True,
                                                                   "damon_stat": False},
                            events={"module_refused": 2})

    fams = {f.name: f for f in emit(Snap())}  # type: ignore[arg-type]
    refused = {s.labels["module"]: s.value for s in fams["numa_exporter_damon_module_blocked"]
               .samples}
    assert refused == {"damon_reclaim": 1, "damon_stat": 0}
    events = {s.labels["event"]: s.value for s in fams["numa_exporter_damon_events"].samples
              if s.name.endswith("_total")}
    assert events["module_refused"] == 2 and events["target_exited"] == 0


def test_a_read_with_no_region_is_made_again_in_the_same_round(tmp_path: Path,
                                                             kernel: FakeDamon) -> None:
    # one read a round (item 5); an update that comes back with no region at all (seen in
    # the 6.12 guest's paddr reads) must not leave the round without hot memory
    m = _monitor(tmp_path, kernel)
    m.round()  # type: ignore[attr-defined]
    kernel.updates = 0
    kernel.empty_updates = 2
    m.round()  # type: ignore[attr-defined]
    h = (m.status().hot or {})[1234]  # type: ignore[attr-defined]
    assert sum(h.bytes_by_node.values()) == 4 * MiB and kernel.updates == 3
    kernel.updates = 0
    m.round()  # type: ignore[attr-defined]
    assert kernel.updates == 1  # a read with regions is not repeated


# --- a start the kernel refuses: nothing of the exporter's is left behind ------------------

@pytest.mark.parametrize(("err", "reason"), [(errno.EBUSY, "busy"), (errno.EIO, "error")])
def test_a_refused_start_leaves_no_kdamond_of_its_own_and_a_retry_creates_it(
        tmp_path: Path, kernel: FakeDamon, err: int, reason: str) -> None:
    # DAMON_STAT's kdamond runs from boot (7.3: `on` answers EBUSY; 6.12's modules: EIO)
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched

    kernel.exclusive_errno = err
    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [0] * len(a), 0.05)
    m.want([Watched(1234, 10.0)])
    assert m.step() > 1  # waits RETRY_S
    assert m.status().state == reason and m.status().unavailable == {reason: 1}
    # the kdamond it created and configured never ran: removed, nr_kdamonds as it found it
    assert (kernel.kd / "nr_kdamonds").read_text() == "0\n" and kernel.kdamonds == []
    assert not (kernel.kd / "0").exists()
    state = json.loads((tmp_path / "run" / "damon.json").read_text())
    assert state["nr_kdamonds"] == 0 and state["slots"] == [] and state["pids"] == {}
    kernel.exclusive_errno = None  # `echo N > /sys/module/damon_stat/parameters/enabled`
    kernel.set_regions(0, HOT)
    m.step()
    st = m.status()
    assert st.state == "monitoring" and kernel.kdamonds[0].running
    assert kernel._target(0) == 1234 and sum((st.hot or {})[1234].bytes_by_node.values()) > 0


def test_a_refused_paddr_start_leaves_no_kdamond_of_its_own(tmp_path: Path,
                                                            kernel: FakeDamon) -> None:
    d = _driver(tmp_path, DamonSettings(mode="paddr"))
    d.claim()
    kernel.exclusive_errno = errno.EBUSY
    with pytest.raises(DamonUnavailable) as got:
        d.watch_physical(0, [(0, 128 * MiB)])
    assert (kernel.kd / "nr_kdamonds").read_text() == "0\n" and d.slots == []
    assert got.value.reason == "busy" and "removed" in str(got.value)
    assert json.loads((tmp_path / "run" / "damon.json").read_text())["nr_kdamonds"] == 0


def test_a_refused_start_leaves_nr_kdamonds_while_a_kdamond_is_not_its_stopped_own(
        tmp_path: Path, kernel: FakeDamon) -> None:
    # two of its own: slot 0 runs (its own, running) -> nothing removed
    d = _driver(tmp_path, DamonSettings(slots=2))
    assert d.claim() == [0, 1]
    d.watch(0, 1234)
    kernel.exclusive_errno = errno.EBUSY
    kernel.writes.clear()
    with pytest.raises(DamonUnavailable) as got:
        d.watch(1, 2000)
    assert got.value.reason == "busy" and "left untouched" in str(got.value)
    assert all(rel != "nr_kdamonds" for rel, _ in kernel.writes)
    assert kernel.kdamonds[0].running and d.slots == [0, 1]
    # slot 0 stopped and reconfigured by someone since: not provably its own -> untouched
    kernel.stop(0)
    (kernel.kd / "0/contexts/0/schemes/0/action").write_text("pageout\n")
    kernel.writes.clear()
    with pytest.raises(DamonUnavailable):
        d.watch(1, 2000)
    assert all(rel != "nr_kdamonds" for rel, _ in kernel.writes)
    assert (kernel.kd / "nr_kdamonds").read_text() == "2\n"
    assert (kernel.kd / "0/contexts/0/schemes/0/action").read_text() == "pageout\n"


def test_a_paddr_kdamond_removed_after_a_refused_restart_is_made_anew_not_restarted(
        tmp_path: Path, kernel: FakeDamon) -> None:
    # stopped from outside, then its restart refused (a module's exclusive kdamond began
    # meanwhile): the kdamond is removed; once DAMON is free the retry creates a new one
    # and points it at the nodes, which is no "stopped from outside" restart
    from numa_exporter.model.hot_memory import NodeRange
    from numa_exporter.scan.damon import HotMemoryMonitor

    m = HotMemoryMonitor(_driver(tmp_path, DamonSettings(mode="paddr")), None, 0.05,
                         node_ranges=lambda: [NodeRange(0, 0, 128 * MiB)])
    kernel.set_regions(0, [(0, 64 * MiB, 19, 3)])
    m.step()
    assert m.status().state == "monitoring" and kernel.kdamonds[0].running
    kernel.stop(0)
    kernel.exclusive_errno = errno.EBUSY
    assert m.step() > 1
    assert m.status().state == "busy" and kernel.kdamonds == []
    assert not m.status().events  # the restart was refused: nothing restarted
    kernel.exclusive_errno = None
    kernel.set_regions(0, [(0, 64 * MiB, 19, 3)])
    m.step()
    st = m.status()
    assert st.state == "monitoring" and kernel.kdamonds[0].running
    assert not st.events  # a new kdamond started, not one "stopped from outside" restarted
