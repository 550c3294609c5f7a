"""Names a process or a cgroup can choose itself never break the exposition.

A process may call itself any 15 bytes (``prctl(PR_SET_NAME)``) and a delegated cgroup may
have any name; the label values that carry them must be valid UTF-8, without control
characters. On a copy of a fixture root, then for real on this machine's /proc.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import ROOTS, Daemon, fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.inspect.command import systemd_unit
from numa_exporter.inspect.diagnosis import render, report
from numa_exporter.logs import configure
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.scan.scanner import Scanner

StartDaemon = Callable[..., Daemon]


def marked(shown: str, raw: bytes) -> str:
    """The label a changed name gets: its escaped text, "~#" and 80 bits of BLAKE2b."""
    return shown + "~#" + hashlib.blake2b(raw, digest_size=10).hexdigest()


COMM = marked("bad\\xff\\xfe\\x1b", b"bad\xff\xfe\x1b")
CG_LABEL = marked("/bad\\xff\\x01.scope", b"/bad\xff\x01.scope")
UNIT_LABEL = marked("bad\\xff\\x01.scope", b"bad\xff\x01.scope")
PID = "130"  # a scanned process of the two_node root, comm "numatouch", cgroup "/"
CGROUP = b"/bad\xff\x01.scope"


def _hostile_root(tmp: Path) -> Path:
    root = tmp / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    proc = root / "proc" / PID
    for f in (proc / "stat", proc / "task" / PID / "stat"):
        f.write_bytes(f.read_bytes().replace(b"(numatouch)", b"(bad\xff\xfe\x1b)"))
    for f in (proc / "status", proc / "task" / PID / "status"):
        f.write_bytes(f.read_bytes().replace(b"Name:\tnumatouch", b"Name:\tbad\xff\xfe"))
    (proc / "cgroup").write_bytes(b"0::" + CGROUP + b"\n")
    cg = root / "sys" / "fs" / "cgroup"
    d = Path(os.fsdecode(os.fsencode(cg) + CGROUP))  # the name is not UTF-8
    d.mkdir()
    (d / "memory.numa_stat").write_bytes(b"anon N0=4096 N1=8192\nfile N0=0 N1=0\n")
    (d / "memory.stat").write_bytes(b"anon 12288\nnuma_pages_migrated 3\n")
    return root


def test_hostile_comm_and_cgroup_name_give_valid_utf8_labels(tmp_path: Path) -> None:
    root = _hostile_root(tmp_path)
    config = fixture_config(root, detail_above=0)
    snap = Scanner(config).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, config))
    text = generate_latest(reg).decode("utf-8")  # old code: UnicodeEncodeError here
    info = values(text, "numa_process_info", pid=PID)
    assert [lab["comm"] for lab, _ in info] == [COMM]
    mem = values(text, "numa_cgroup_memory_bytes", cgroup=CG_LABEL)
    assert {(lab["node"], lab["kind"], v) for lab, v in mem} >= {
        ("0", "anon", 4096.0), ("1", "anon", 8192.0)}
    unit = values(text, "numa_cgroup_systemd_unit_info", cgroup=CG_LABEL)
    assert {lab["unit"] for lab, _ in unit} == {UNIT_LABEL}


def _named_child(name: bytes, mib: int) -> subprocess.Popen[bytes]:
    """Start a process that names itself ``name`` and touches ``mib`` MiB of anonymous memory."""
    code = (
        "import ctypes, mmap, sys, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"assert libc.prctl(15, ctypes.c_char_p({name!r}), 0, 0, 0) == 0\n"  # PR_SET_NAME
        f"m = mmap.mmap(-1, {mib} << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
        "for i in range(0, len(m), 4096): m[i] = 1\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


@pytest.mark.e2e
def test_real_process_with_non_utf8_name_is_scraped(start_daemon: StartDaemon) -> None:
    child = _named_child(b"bad\xff\xfe", 80)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        assert Path(f"/proc/{child.pid}/comm").read_bytes() == b"bad\xff\xfe\n"
        d = start_daemon("--process.min-resident=64MiB", "--process.detail-above=0",
                         "--path.procfs=/proc", "--scan.interval=1s", "--log.format=json")
        d.wait_scans(0)  # the server answers (scans_total is exported before any scan)
        text = ""
        for _ in range(3):  # three scans' worth of scrapes: every one must succeed
            with urllib.request.urlopen(d.url + "/metrics", timeout=10) as resp:
                assert resp.status == 200
                text = resp.read().decode("utf-8")  # strict: raises on invalid UTF-8
            d.wait_scans(1)
        found = []
        for _ in range(50):
            with urllib.request.urlopen(d.url + "/metrics", timeout=10) as resp:
                assert resp.status == 200
                text = resp.read().decode("utf-8")
            found = values(text, "numa_process_memory_bytes", pid=str(child.pid))
            if found:
                break
            d.wait_scans(1)
        assert found, "the process with a non-UTF-8 name is not exported"
        info = values(text, "numa_process_info", pid=str(child.pid))
        assert {lab["comm"] for lab, _ in info} == {marked("bad\\xff\\xfe", b"bad\xff\xfe")}
        assert sum(v for _, v in found) >= 80 << 20
    finally:
        child.kill()
        child.wait()


def test_hostile_accelerator_names_give_valid_utf8_labels(tmp_path: Path) -> None:
    """udev (and sysfs) hand over names as surrogateescape text: labels escape them."""
    base = ROOTS / "inference"
    records = json.loads((base / "udev.json").read_text())
    for dev in records["devices"]:
        if dev["driver"] == "ast":
            dev["driver"] = "ast\udcff\x01"
            dev["properties"]["ID_VENDOR_FROM_DATABASE"] = "ASPEED\udcfe\n"
    path = tmp_path / "udev.json"
    path.write_text(json.dumps(records))  # lone surrogates travel as \udcff escapes
    cfg = fixture_config(base, detail_above=0,
                         accelerator_records=path)
    snap = Scanner(cfg, accelerators=accelerator_source(cfg)).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    text = generate_latest(reg).decode("utf-8")  # old code: UnicodeEncodeError here
    got = values(text, "numa_accelerator_info", pci_address="0000:03:00.0")
    assert [(lab["driver"], lab["vendor"]) for lab, _ in got] == [
        (marked("ast\\xff\\x01", b"ast\xff\x01"), marked("ASPEED\\xfe\\x0a", b"ASPEED\xfe\n"))]


def test_inspect_report_of_a_hostile_process_is_valid_utf8(tmp_path: Path) -> None:
    root = _hostile_root(tmp_path)
    config = fixture_config(root, detail_above=0)
    sample, system = Scanner(config).sample_one(int(PID))
    assert sample is not None
    rep = report(sample, system, *systemd_unit(config, int(PID)))
    assert (rep["comm"], rep["cgroup"], rep["unit"]) == (COMM, CG_LABEL, UNIT_LABEL)
    json.dumps(rep, ensure_ascii=False).encode("utf-8")
    render(rep).encode("utf-8")


@pytest.mark.parametrize("fmt", ["json", "logfmt"])
def test_log_values_are_safe_text(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", fmt)
    structlog.get_logger().warning("malformed input", file="/sys/fs/cgroup/bad\udcff\x1b[2J")
    err = capsys.readouterr().err
    err.encode("utf-8")
    assert "bad\\xff\\x1b[2J" in err.replace("\\\\", "\\")
    assert "\x1b" not in err and "\\u001b" not in err


# Names that cleaning used to merge: controls dropped, long paths cut at the same length, a
# literal "\x01" typed as text against the byte itself.
COLLIDING_CGROUPS = [b"/rt\x01dup", b"/rt\x02dup", b"/rt\x7fdup", b"/rt\\x01dup", b"/rtdup",
                     b"/p" + b"/p" * 300 + b"1", b"/p" + b"/p" * 300 + b"2"]
COLLIDING_COMMS = {"130": b"rt\x01dup", "139": b"rt\x02dup", "159": b"rt\x7fdup",
                   "161": b"rt\\x01dup"}


def _colliding_root(tmp: Path) -> Path:
    """Return two_node with processes named alike after cleaning, in cgroups named alike."""
    root = tmp / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    cg = root / "sys" / "fs" / "cgroup"
    for i, name in enumerate(COLLIDING_CGROUPS):
        d = Path(os.fsdecode(os.fsencode(cg) + name))
        d.mkdir(parents=True)
        (d / "memory.numa_stat").write_bytes(b"anon N0=%d N1=0\nfile N0=0 N1=0\n"
                                             % ((i + 1) * 4096))
        (d / "memory.stat").write_bytes(b"anon 4096\nnuma_pages_migrated %d\n" % (i + 1))
    procs = ["130", "139", "159", "161", "168", "300", "301"]  # scanned in two_node
    for pid, cgroup in zip(procs, COLLIDING_CGROUPS, strict=True):
        (root / "proc" / pid / "cgroup").write_bytes(b"0::" + cgroup + b"\n")
    for pid, comm in COLLIDING_COMMS.items():
        proc = root / "proc" / pid
        stat = proc / "stat"
        data = stat.read_bytes()
        new = data[:data.index(b"(") + 1] + comm + data[data.rindex(b")"):]
        for f in (stat, proc / "task" / pid / "stat"):
            if f.exists():
                f.write_bytes(new)
    return root


def test_names_merged_by_cleaning_stay_apart_and_openmetrics_parses(tmp_path: Path) -> None:
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    root = _colliding_root(tmp_path)
    config = fixture_config(root, detail_above=0)
    snap = Scanner(config).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, config))
    om = om_latest(reg).decode("utf-8")
    # old code: "Invalid metric grouping" (the same labels twice in one family)
    families = {f.name: f for f in text_string_to_metric_families(om)}
    mem = {s.labels["cgroup"]: s.value for s in families["numa_cgroup_memory_bytes"].samples
           if s.labels["node"] == "0" and s.labels["kind"] == "anon"}
    assert len(mem) == len(COLLIDING_CGROUPS)  # one series per cgroup
    assert sorted(mem.values()) == [(i + 1) * 4096.0 for i in range(len(COLLIDING_CGROUPS))]
    assert "/rt\\x01dup" in mem and "/rtdup" in mem  # names without escapes are themselves
    comms = {s.labels["pid"]: s.labels["comm"]
             for s in families["numa_process_info"].samples}
    assert len({comms[pid] for pid in COLLIDING_COMMS}) == len(COLLIDING_COMMS)
    assert comms["161"] == "rt\\x01dup"
    text = generate_latest(reg).decode("utf-8")
    from prometheus_client.parser import text_string_to_metric_families as text_families
    list(text_families(text))
