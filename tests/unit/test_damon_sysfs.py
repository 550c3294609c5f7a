"""The DAMON sysfs driver against a fake sysfs tree laid out as 6.12's
``/sys/kernel/mm/damon/admin`` (regular files stand in for the kernel's attributes; what the
kernel does on a write - creating a kdamond's folders, starting its thread - the fixture does
before, as the kernel would have). Never the host's own DAMON: this host runs a kdamond."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from numa_exporter.sources import damon as damon_mod
from numa_exporter.sources.damon import DamonSettings, DamonSysfs, DamonUnavailable, Region
from numa_exporter.sources.errors import SourceError

BOOT = "0b5c1a2e-1111-4222-8333-944455556666"
CTX_FILES = {
    "operations": "vaddr", "monitoring_attrs/intervals/sample_us": "5000",
    "monitoring_attrs/intervals/aggr_us": "100000",
    "monitoring_attrs/intervals/update_us": "1000000",
    "monitoring_attrs/nr_regions/min": "10", "monitoring_attrs/nr_regions/max": "1000",
    "targets/nr_targets": "0", "targets/0/pid_target": "0", "schemes/nr_schemes": "0",
    "schemes/0/action": "pageout",
}


def _kdamond(admin: Path, slot: int, state: str = "off", pid: int = -1,
             **ctx: str) -> Path:
    """Write kdamonds/<slot> as the kernel shows a kdamond with one context."""
    kd = admin / "kdamonds" / str(slot)
    files = {"state": state, "pid": str(pid), "contexts/nr_contexts": "1"}
    files |= {f"contexts/0/{k}": v for k, v in (CTX_FILES | ctx).items()}
    for scheme in ("sz", "nr_accesses", "age"):
        for end in ("min", "max"):
            files[f"contexts/0/schemes/0/access_pattern/{scheme}/{end}"] = "0"
    for rel, text in files.items():
        p = kd / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return kd


def _tree(tmp: Path, nr: int) -> Path:
    admin = tmp / "sys" / "kernel" / "mm" / "damon" / "admin"
    (admin / "kdamonds").mkdir(parents=True)
    (admin / "kdamonds" / "nr_kdamonds").write_text(f"{nr}\n")
    return admin


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _driver(tmp: Path, boot: str = BOOT) -> DamonSysfs:
    return DamonSysfs(tmp / "sys", tmp / "run", DamonSettings(), boot, sleep=lambda _: None)


def test_absent_without_the_sysfs_interface(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel" / "mm").mkdir(parents=True)  # CONFIG_DAMON_SYSFS off
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "absent"


def test_creates_only_when_nobody_has_a_kdamond(tmp_path: Path) -> None:
    admin = _tree(tmp_path, 0)
    _kdamond(admin, 0)  # what the kernel creates when nr_kdamonds is written 1
    d = _driver(tmp_path)
    assert d.claim() == [0]
    kd = admin / "kdamonds" / "0" / "contexts"
    assert (admin / "kdamonds" / "nr_kdamonds").read_text() == "1"
    assert (kd / "0" / "operations").read_text() == "vaddr"
    assert (kd / "0" / "schemes" / "nr_schemes").read_text() == "1"
    assert (kd / "0" / "schemes" / "0" / "action").read_text() == "stat"
    assert (kd / "0" / "schemes/0/access_pattern/sz/max").read_text() == str((1 << 64) - 1)
    state = json.loads((tmp_path / "run" / "damon.json").read_text())
    assert state["boot_id"] == BOOT and state["nr_kdamonds"] == 1 and state["slots"] == [0]


def test_a_running_foreign_kdamond_is_left_untouched(tmp_path: Path) -> None:
    admin = _tree(tmp_path, 1)
    _kdamond(admin, 0, state="on", pid=77, operations="paddr")
    before = _snapshot(tmp_path / "sys")
    d = _driver(tmp_path)
    with pytest.raises(DamonUnavailable) as got:
        d.claim()
    assert got.value.reason == "foreign"
    for call in (lambda: d.watch(0, 1), lambda: d.stop(0), lambda: d.regions(0)):
        with pytest.raises(DamonUnavailable):
            call()
    d.release()
    assert _snapshot(tmp_path / "sys") == before  # not one byte written
    assert not (tmp_path / "run" / "damon.json").exists()


def test_a_spare_foreign_slot_is_not_taken(tmp_path: Path) -> None:
    # someone prepared a stopped kdamond (nr_kdamonds 1, state off): rewriting nr_kdamonds
    # would wipe it, and configuring it would take it: stand aside
    admin = _tree(tmp_path, 1)
    _kdamond(admin, 0)
    before = _snapshot(tmp_path / "sys")
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "foreign"
    assert _snapshot(tmp_path / "sys") == before


def test_busy_when_another_damon_user_holds_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _tree(tmp_path, 0)
    real = os.write

    def busy(fd: int, data: bytes) -> int:  # DAMON_RECLAIM on: the kernel answers EBUSY
        if os.readlink(f"/proc/self/fd/{fd}").endswith("nr_kdamonds"):
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(fd, data)

    monkeypatch.setattr(damon_mod.os, "write", busy)
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "busy"
    # (a regular file is truncated by the open; the kernel keeps 0) nothing else was tried
    assert (admin / "kdamonds" / "nr_kdamonds").read_text() in ("", "0\n")
    assert not (tmp_path / "run" / "damon.json").exists()
    assert not (admin / "kdamonds" / "0").exists()


def _owned_and_running(tmp_path: Path) -> tuple[Path, DamonSysfs]:
    admin = _tree(tmp_path, 0)
    kd = _kdamond(admin, 0)
    d = _driver(tmp_path)
    d.claim()
    (kd / "pid").write_text("4242\n")  # the kernel starts kdamond.0 as pid 4242 on "on"
    d.watch(0, 1234)
    return admin, d


def test_watch_starts_its_own_kdamond_on_the_pid(tmp_path: Path) -> None:
    admin, _ = _owned_and_running(tmp_path)
    kd = admin / "kdamonds" / "0"
    assert (kd / "state").read_text() == "on"
    assert (kd / "contexts/0/targets/nr_targets").read_text() == "1"
    assert (kd / "contexts/0/targets/0/pid_target").read_text() == "1234"
    assert json.loads((tmp_path / "run" / "damon.json").read_text())["pids"] == {"0": 4242}


def test_recognises_its_own_after_a_restart(tmp_path: Path) -> None:
    admin, _ = _owned_and_running(tmp_path)
    nr_before = (admin / "kdamonds" / "nr_kdamonds").read_bytes()
    again = _driver(tmp_path)  # a new exporter process, same boot
    assert again.claim() == [0]
    assert (admin / "kdamonds" / "nr_kdamonds").read_bytes() == nr_before  # not rewritten
    again.release()  # stops its own on exit
    assert (admin / "kdamonds" / "0" / "state").read_text() == "off"
    # stopped but configured as the exporter left it: still recognised
    assert _driver(tmp_path).claim() == [0]


def test_a_slot_someone_restarted_is_foreign(tmp_path: Path) -> None:
    admin, _ = _owned_and_running(tmp_path)
    (admin / "kdamonds" / "0" / "pid").write_text("5555\n")  # another kdamond thread now
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "foreign"


def test_a_slot_someone_reconfigured_is_foreign(tmp_path: Path) -> None:
    admin, d = _owned_and_running(tmp_path)
    d.release()
    (admin / "kdamonds/0/contexts/0/operations").write_text("paddr\n")
    before = _snapshot(tmp_path / "sys")
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path).claim()
    assert got.value.reason == "foreign"
    assert _snapshot(tmp_path / "sys") == before


def test_state_of_another_boot_proves_nothing(tmp_path: Path) -> None:
    _owned_and_running(tmp_path)
    with pytest.raises(DamonUnavailable) as got:
        _driver(tmp_path, boot="another-boot").claim()
    assert got.value.reason == "foreign"


def test_regions_read_after_the_update_request(tmp_path: Path) -> None:
    admin, d = _owned_and_running(tmp_path)
    tried = admin / "kdamonds/0/contexts/0/schemes/0/tried_regions"
    for i, (start, end, acc, age) in enumerate([(0x1000, 0x5000, 19, 3), (0x5000, 0x9000, 0, 40)]):
        for name, v in (("start", start), ("end", end), ("nr_accesses", acc), ("age", age)):
            (tried / str(i)).mkdir(parents=True, exist_ok=True)
            (tried / str(i) / name).write_text(f"{v}\n")
    (tried / "total_bytes").write_text("32768\n")
    # age is not read (unused): the worker reads start, end and nr_accesses only
    assert d.regions(0) == [Region(0x1000, 0x5000, 19), Region(0x5000, 0x9000, 0)]
    # the request was written to the kdamond's state file
    assert (admin / "kdamonds/0/state").read_text() == "update_schemes_tried_regions"


# --- the worker, on the same fake tree, with move_pages answered by a fake ------------------

def test_worker_watches_the_largest_and_places_hot_regions(tmp_path: Path) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor, Watched

    admin, d = _owned_and_running(tmp_path)
    tried = admin / "kdamonds/0/contexts/0/schemes/0/tried_regions"
    # hot 64 KiB (19 of 20) and cold 256 KiB (0 of 20), as DAMON reports them
    for i, (start, end, acc) in enumerate([(0x10000, 0x20000, 19), (0x20000, 0x60000, 0)]):
        (tried / str(i)).mkdir(parents=True)
        for name, v in (("start", start), ("end", end), ("nr_accesses", acc), ("age", 5)):
            (tried / str(i) / name).write_text(f"{v}\n")
    asked: list[list[int]] = []

    def query(pid: int) -> object:
        def q(addrs: list[int]) -> list[int]:
            asked.append(addrs)
            return [1] * (len(addrs) - 4) + [-14] * 4  # 4 pages not present (-EFAULT)
        return q

    m = HotMemoryMonitor(d, query, threshold=0.05)  # type: ignore[arg-type]
    m.want([Watched(1234, 100.0), Watched(99, 1.0)])  # one kdamond: the first only
    m.round()
    st = m.status()
    assert st.state == "monitoring" and set(st.hot or {}) == {1234}
    hot = (st.hot or {})[1234]
    assert hot.hot_regions == 1 and hot.regions == 2
    # 16 pages in the hot region, all sampled; 12 on node 1: 12/16 of 64 KiB
    assert asked == [[0x10000 + i * 4096 for i in range(16)]]
    assert hot.bytes_by_node == {1: 0x10000 * 12 / 16}


def test_worker_says_foreign_once_and_counts(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor

    admin = _tree(tmp_path, 1)
    _kdamond(admin, 0, state="on", pid=77)
    before = _snapshot(tmp_path / "sys")
    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [], 0.05, period_s=0.01)
    import numa_exporter.scan.damon as worker

    worker.RETRY_S, saved = 0.01, worker.RETRY_S
    try:
        m.start()
        for _ in range(500):
            if (m.status().unavailable or {}).get("foreign", 0) >= 3:
                break
            m._stop.wait(0.01)
        m.stop()
    finally:
        worker.RETRY_S = saved
    st = m.status()
    assert st.state == "foreign" and (st.unavailable or {})["foreign"] >= 3
    assert _snapshot(tmp_path / "sys") == before  # tried again and again, never touched it


def test_worker_not_root_stands_aside(tmp_path: Path) -> None:
    from numa_exporter.scan.damon import HotMemoryMonitor

    _tree(tmp_path, 0)
    before = _snapshot(tmp_path / "sys")
    m = HotMemoryMonitor(_driver(tmp_path), lambda pid: lambda a: [], 0.05, is_root=False)
    m._run()
    assert m.status().state == "not_root" and m.status().unavailable == {"not_root": 1}
    assert _snapshot(tmp_path / "sys") == before


def _busy_reads(monkeypatch: pytest.MonkeyPatch, name: str, times: int) -> list[int]:
    """Make the next ``times`` reads of attributes called ``name`` answer EBUSY, as the
    kernel does while another writer holds the DAMON sysfs lock; return the count left."""
    left = [times]
    real = damon_mod.read_small

    def read(path: Path | str, source: str) -> bytes:
        if str(path).endswith("/" + name) and left[0] > 0:
            left[0] -= 1
            err = OSError(errno.EBUSY, "Device or resource busy")
            raise SourceError(source, str(path), err) from err
        return real(path, source)

    monkeypatch.setattr(damon_mod, "read_small", read)
    return left


def test_a_busy_read_is_retried_and_the_own_kdamond_still_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the real-kernel guest's reader saw "state" answer EBUSY while the exporter waited in
    # update_schemes_tried_regions; a reader of the exporter's own meets the same from others
    admin, d = _owned_and_running(tmp_path)
    (admin / "kdamonds" / "0" / "state").write_text("on\n")
    left = _busy_reads(monkeypatch, "state", 3)
    assert d.state(0) == "on"
    assert left[0] == 0


def test_a_read_busy_past_its_bound_is_busy(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, d = _owned_and_running(tmp_path)
    _busy_reads(monkeypatch, "state", 10_000)
    with pytest.raises(DamonUnavailable) as got:
        d.state(0)
    assert got.value.reason == "busy"
