"""End-to-end: the installed daemon, started for real, scraped over HTTP."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import ROOTS, Daemon, exporter_command, scrape
from tests.e2e.exposition import normalise, values

GOLDEN = Path(__file__).parent / "golden"
pytestmark = pytest.mark.e2e

StartDaemon = Callable[..., Daemon]


def _root_args(root: str) -> list[str]:
    base = ROOTS / root
    records = base / "udev.json"
    if not records.exists():
        records = ROOTS.parent / "udev" / "none.json"
    config = [f"--config.file={base / 'config.toml'}"] if (base / "config.toml").exists() else []
    return [f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}",
            f"--accelerator.records={records}", "--process.min-resident=0",
            "--scan.interval=1s", "--log.format=json", *config]


def promtool_check(text: str, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: the README test command installs Debian's prometheus")
    f = tmp_path / "scrape.prom"
    f.write_text(text)
    with open(f, "rb") as fh:
        r = subprocess.run([promtool, "check", "metrics"], stdin=fh, capture_output=True,
                           text=True, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (
        r.stdout + r.stderr)


@pytest.mark.parametrize("root", ["two_node", "four_node", "inference"])
def test_fixture_root_matches_golden(root: str, start_daemon: StartDaemon,
                                     update_golden: bool, tmp_path: Path) -> None:
    d = start_daemon(*_root_args(root))
    text = d.wait_scans(2)
    got = normalise(text)
    golden = GOLDEN / f"{root}.prom"
    if update_golden or not golden.exists():
        if not update_golden:
            pytest.fail(f"{golden} is missing: run pytest --update-golden once and review it")
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(got)
    assert got == golden.read_text()
    promtool_check(text, tmp_path)


def test_landing_page_and_paths(start_daemon: StartDaemon) -> None:
    d = start_daemon(*_root_args("two_node"), "--web.telemetry-path=/numa")
    d_text = ""
    for _ in range(100):
        try:
            d_text = scrape(d.url + "/")
            break
        except OSError:
            import time

            time.sleep(0.1)
    assert 'href="/numa"' in d_text
    assert "numa_exporter_build_info" in scrape(d.url + "/numa")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(d.url + "/metrics", timeout=5)
    assert exc.value.code == 404


@pytest.mark.parametrize(
    ("flag", "fragment"),
    [
        ("--scan.interval=soon", "not a duration"),
        ("--process.min-resident=lots", "not a size"),
        ("--process.include=(", "bad regular expression"),
        ("--web.listen-address=nowhere", "listen address"),
        ("--path.procfs=/does/not/exist", "not a directory"),
        ("--log.format=xml", "invalid choice"),
        ("--no-such-flag", "unrecognized arguments"),
    ],
)
def test_bad_flag_exits_2_with_one_line(flag: str, fragment: str) -> None:
    r = subprocess.run([*exporter_command(), flag], capture_output=True, text=True, timeout=30,
                       check=False)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert fragment in lines[0]


def test_real_proc_bytes_match_rss(start_daemon: StartDaemon) -> None:
    """A real process here: its bytes on node 0 add up to its VmRSS within a few percent."""
    child = subprocess.Popen(
        ["python3", "-c",
         "import mmap,sys,time\n"
         "m=mmap.mmap(-1,96<<20)\n"
         "for i in range(0,len(m),4096): m[i]=1\n"
         "print('ready',flush=True)\ntime.sleep(120)"],
        stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        d = start_daemon("--process.min-resident=0", "--scan.interval=1s", "--log.format=json")
        text = d.wait_scans(2)
        pid = str(child.pid)
        mem = values(text, "numa_process_memory_bytes", pid=pid)
        assert mem, f"process {pid} not exported"
        total = sum(v for _, v in mem)
        rss_kb = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
                      .splitlines() if line.startswith("VmRSS:"))
        assert abs(total - rss_kb * 1024) <= 0.05 * rss_kb * 1024, (total, rss_kb * 1024)
        anon = sum(v for lab, v in mem if lab["kind"] == "shmem")
        assert anon >= 96 << 20  # the shared anonymous mmap counts as shmem
        nodes = {lab["node"] for lab, _ in mem}
        assert nodes <= {str(n) for n in _online_nodes()}
        ratio = values(text, "numa_process_remote_memory_ratio", pid=pid)
        assert len(ratio) == 1 and 0.0 <= ratio[0][1] <= 1.0
        # every scanned process: per-node bytes within a few percent of its RSS
        checked = 0
        for lab, _ in values(text, "numa_process_local_memory_bytes"):
            p = Path(f"/proc/{lab['pid']}/status")
            try:
                st = p.read_text()
            except OSError:
                continue
            rss = next((int(ln.split()[1]) * 1024 for ln in st.splitlines()
                        if ln.startswith("VmRSS:")), 0)
            if rss < 16 << 20:
                continue
            got = sum(v for _, v in values(text, "numa_process_memory_bytes", pid=lab["pid"]))
            assert abs(got - rss) <= 0.1 * rss, (lab, got, rss)
            checked += 1
        assert checked >= 1
    finally:
        child.kill()
        child.wait()


def _online_nodes() -> list[int]:
    from numa_exporter.parsers.cpulist import parse_cpulist

    nodes = parse_cpulist(Path("/sys/devices/system/node/online").read_text())
    return sorted(nodes or {0})


def test_unprivileged_run_counts_denied_and_keeps_serving(start_daemon: StartDaemon) -> None:
    """As nobody, other users' numa_maps are unreadable: counted, logged once, served anyway."""
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is required")
    d = start_daemon("--process.min-resident=0", "--scan.interval=1s", "--log.format=json",
                     user="65534")
    text = d.wait_scans(3)
    denied = values(text, "numa_exporter_processes", state="denied")
    assert denied and denied[0][1] > 0
    errs = values(text, "numa_exporter_read_errors_total", reason="denied")
    assert errs and sum(v for _, v in errs) > 0
    log = d.log_path.read_text()
    # not one warning per denied process: one line per scan with the count and the remedy
    assert "permission denied" not in log
    scans = [json.loads(ln) for ln in log.splitlines() if '"scan"' in ln]
    assert scans and all(s["denied"] > 0 for s in scans)
    assert all("CAP_SYS_PTRACE" in s["hint"] and "CAP_DAC_READ_SEARCH" in s["hint"]
               for s in scans)
