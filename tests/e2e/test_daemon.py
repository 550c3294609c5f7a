"""End-to-end: the installed daemon, started for real, scraped over HTTP."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import ROOTS, Daemon, exporter_command, free_port, scrape
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
    if (base / "rootfs").is_dir():
        config.append(f"--path.rootfs={base / 'rootfs'}")
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


@pytest.mark.parametrize("root", ["two_node", "four_node", "inference", "kubernetes"])
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
        # RE2 refuses what Python's re would accept and backtrack on, and says why
        ("--process.include=(a)\\1", "backreferences are not supported"),
        ("--process.exclude=x(?=y)", "lookahead is not supported"),
        # inf killed the sampler thread after one scan; nan and ns-scale values busy-looped
        ("--scan.interval=inf", "not a finite duration"),
        ("--scan.interval=1e309", "not a finite duration"),
        ("--scan.interval=nan", "not a finite duration"),
        ("--scan.interval=0.000000001", "between 100ms and 24h"),
        ("--scan.interval=50ms", "between 100ms and 24h"),
        ("--scan.budget=nan", "not a finite duration"),
        ("--scan.budget=0", "must be positive"),
        ("--scan.budget=20s", "longer than --scan.interval"),
        ("--drift.warmup-age=inf", "not a finite duration"),
        ("--drift.rss-tolerance=nan", "not a fraction"),
        ("--process.top=" + "9" * 5000, "not an integer"),
        ("--process.min-resident=" + "9" * 5000, "not a size"),
        ("--path.rootfs=/nonexistent-root", "--path.rootfs=/nonexistent-root: not a directory"),
        ("--kubelet.root-dir=var/lib/kubelet", "not an absolute host path"),
    ],
)
def test_bad_flag_exits_2_with_one_line(flag: str, fragment: str) -> None:
    r = subprocess.run([*exporter_command(), "--web.listen-address=127.0.0.1:0", flag],
                       capture_output=True, text=True, timeout=30, check=False)
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
        d = start_daemon("--process.min-resident=0", "--process.detail-above=0",
                         "--scan.interval=1s", "--log.format=json")
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
        # every scanned process: per-node bytes within a few percent of its RSS. Other
        # processes on the host may grow or shrink between a scan and a read of their
        # status, so only processes whose RSS stayed put across one whole later scan count.
        before = {lab["pid"]: _rss(lab["pid"])
                  for lab, _ in values(text, "numa_process_local_memory_bytes")}
        done = next(v for _, v in values(text, "numa_exporter_scans_total"))
        text = d.wait_scans(int(done) + 2, timeout=90.0)
        checked = 0
        for lab, _ in values(text, "numa_process_local_memory_bytes"):
            rss, rss_before = _rss(lab["pid"]), before.get(lab["pid"])
            if rss is None or rss_before is None or rss < 16 << 20:
                continue
            if abs(rss - rss_before) > 0.02 * rss:
                continue  # changed while being scanned: no fixed value to compare with
            got = sum(v for _, v in values(text, "numa_process_memory_bytes", pid=lab["pid"]))
            assert abs(got - rss) <= 0.1 * rss, (lab, got, rss)
            checked += 1
        assert checked >= 1
    finally:
        child.kill()
        child.wait()


def _rss(pid: str) -> int | None:
    """Return the VmRSS of ``pid`` in bytes, or None when it is gone or has none."""
    try:
        st = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next((int(ln.split()[1]) * 1024 for ln in st.splitlines()
                 if ln.startswith("VmRSS:")), None)


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



_TWO_NODE = [f"--path.procfs={ROOTS / 'two_node' / 'proc'}",
             f"--path.sysfs={ROOTS / 'two_node' / 'sys'}",
             f"--accelerator.records={ROOTS.parent / 'udev' / 'none.json'}"]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"home = 5\n", "home: must be an array of tables"),
        (b"[[home]]\nmatch = '\xff'\nnodes = '0'\n", "not UTF-8 text"),
        (b"[[home]]\nmatch = 'a'\nnodes = '" + b"9" * 5000 + b"'\n", "home[0].nodes"),
        (b"[[home]]\nmatch = 'a'\nnodes = '" + b",".join([b"0-65535"] * 3000) + b"'\n",
         "home[0].nodes"),
        (b"[[home]]\nmatch = 'a'\nnodes = '0'\nnode = '1'\n", "home[0]: unknown key 'node'"),
        (b"[[home]]\nmatch = 'a'\nnodes = '0'\n[[pins]]\n", "unknown sections: pins"),
        (b"[[home]]\nmatch = '(a+)+$'\nnodes = '5'\n",
         "home[0].nodes: node 5 does not exist on this host (nodes: 0,1)"),
        (b"[[home]]\nmatch = '(?<=x)y'\nnodes = '0'\n", "lookbehind is not supported"),
    ],
    ids=["home-is-int", "not-utf8", "5000-digits", "3000-ranges", "unknown-key",
         "unknown-section", "absent-node", "lookbehind"],
)
def test_bad_config_file_exits_2_with_one_line(content: bytes, fragment: str,
                                               tmp_path: Path) -> None:
    """Each of these gave a traceback, hung start-up or was silently accepted."""
    f = tmp_path / "numa.toml"
    f.write_bytes(content)
    r = subprocess.run([*exporter_command(), f"--web.listen-address=127.0.0.1:{free_port()}",
                        *_TWO_NODE, f"--config.file={f}"],
                       capture_output=True, text=True, timeout=30, check=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert "--config.file" in lines[0] and str(f) in lines[0]
    assert fragment in lines[0], lines[0]


def _wait_log(d: Daemon, needle: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = d.log_path.read_text(errors="replace")
        if needle in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} not logged within {timeout}s: "
                         f"{d.log_path.read_text(errors='replace')[-2000:]}")


def _home(d: Daemon, pid: str, timeout: float = 20.0, want: str | None = None
          ) -> dict[str, str]:
    """Return the labels of numa_process_home_nodes_info for pid (waiting for ``want``)."""
    deadline = time.monotonic() + timeout
    got: dict[str, str] = {}
    while time.monotonic() < deadline:
        assert d.proc.poll() is None, f"daemon exited {d.proc.returncode}"
        found = values(d.metrics(), "numa_process_home_nodes_info", pid=pid)
        if found:
            got = found[0][0]
            if want is None or got["nodes"] == want:
                return got
        time.sleep(0.2)
    raise AssertionError(f"home of {pid} is {got}, not nodes={want} within {timeout}s")


def test_sighup_reloads_the_config_file_and_keeps_a_bad_one_out(
        start_daemon: StartDaemon, tmp_path: Path) -> None:
    """SIGHUP used to kill the daemon: now it rereads --config.file between scans."""
    f = tmp_path / "numa.toml"
    f.write_text('[[home]]\nmatch = "^splitter"\nnodes = "1"\n')
    d = start_daemon(*_TWO_NODE, "--process.min-resident=0", "--scan.interval=200ms",
                     "--log.format=json", f"--config.file={f}")
    d.wait_scans(1)
    assert _home(d, "300") == {"nodes": "1", "pid": "300",
                               "source": "config"}
    scans = values(d.metrics(), "numa_exporter_scans_total")[0][1]

    f.write_text('[[home]]\nmatch = "^splitter"\nnodes = "0"\n')
    d.proc.send_signal(signal.SIGHUP)
    assert _home(d, "300", want="0")["source"] == "config"
    _wait_log(d, "config reloaded")
    # the scanner kept its state: the scan counter did not start again
    assert values(d.metrics(), "numa_exporter_scans_total")[0][1] > scans

    f.write_text('[[home]]\nmatch = "^splitter"\nnodes = "7"\n')
    d.proc.send_signal(signal.SIGHUP)
    log = _wait_log(d, "config reload failed")
    d.wait_scans(int(values(d.metrics(), "numa_exporter_scans_total")[0][1]) + 2)
    assert _home(d, "300")["nodes"] == "0"  # the running config stayed
    failed = [json.loads(ln) for ln in log.splitlines() if "config reload failed" in ln]
    assert len(failed) == 1 and failed[0]["level"] == "error"
    assert "home[0].nodes: node 7 does not exist" in failed[0]["error"]
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(20) == 0


def test_backtracking_regex_does_not_freeze_the_daemon(start_daemon: StartDaemon) -> None:
    """``(a+)+$`` against ``'a' * 40 + '!'`` pinned a core under Python's re, stopping scans,
    /metrics and /-/healthy, and SIGTERM went unanswered. RE2 answers in linear time."""
    code = "import sys,time\nprint('ready',flush=True)\ntime.sleep(120)"
    evil = subprocess.Popen([sys.executable, "-c", code, "a" * 40 + "!"],
                            stdout=subprocess.PIPE)
    good = subprocess.Popen([sys.executable, "-c", code, "b" + "a" * 40],
                            stdout=subprocess.PIPE)
    try:
        for child in (evil, good):
            assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        d = start_daemon("--process.include=(a+)+$", "--process.min-resident=0",
                         "--scan.interval=1s", "--log.format=json")
        text = d.wait_scans(2, timeout=20)
        pids = {lab["pid"] for lab, _ in values(text, "numa_process_local_memory_bytes")}
        assert str(good.pid) in pids and str(evil.pid) not in pids
        assert scrape(d.url + "/-/healthy", timeout=20) == "OK\n"
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(20) == 0
    finally:
        for child in (evil, good):
            child.kill()
            child.wait()


def test_sysfs_without_node_folder_warns(start_daemon: StartDaemon, tmp_path: Path) -> None:
    d = start_daemon(f"--path.procfs={ROOTS / 'two_node' / 'proc'}", f"--path.sysfs={tmp_path}",
                     f"--accelerator.records={ROOTS.parent / 'udev' / 'none.json'}",
                     "--process.min-resident=0", "--scan.interval=1s", "--log.format=json")
    d.wait_scans(1)
    line = next(json.loads(ln) for ln in _wait_log(d, "devices/system/node").splitlines()
                if "devices/system/node" in ln)
    assert line["level"] == "warn"
    assert f"--path.sysfs={tmp_path} has no devices/system/node" in line["msg"]
    assert "no numa_node_* metrics" in line["msg"]


_RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z$")


@pytest.mark.parametrize("fmt", ["default", "logfmt", "json"])
def test_log_keys(fmt: str, start_daemon: StartDaemon) -> None:
    """msg, level, ts (RFC 3339 UTC) and caller in both formats; logfmt without a terminal."""
    flag = [] if fmt == "default" else [f"--log.format={fmt}"]
    d = start_daemon(*_TWO_NODE, "--process.min-resident=0", "--scan.interval=1s", *flag)
    d.wait_scans(1)
    # the start may log other lines first (the kernel features found absent)
    first = next(ln for ln in _wait_log(d, "listening").splitlines() if "listening" in ln)
    if fmt == "json":
        rec = json.loads(first)
        assert list(rec)[:4] == ["ts", "level", "caller", "msg"]
    else:
        assert first.startswith("ts="), first
        rec = dict(re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)', first))
        rec = {k: v.strip('"') for k, v in rec.items()}
    assert "event" not in rec
    assert rec["msg"] == "listening" and rec["level"] == "info"
    assert _RFC3339_UTC.match(rec["ts"]), rec["ts"]
    assert re.fullmatch(r"[\w.]+\.py:\d+", rec["caller"]), rec["caller"]


def test_help_names_the_commands_and_every_flag_has_help() -> None:
    from numa_exporter.cli import build_parser

    r = subprocess.run([*exporter_command(), "--help"], capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 0
    for word in ("inspect", "udev-dump", "--scan.interval DURATION", "--process.include REGEX",
                 "--process.min-resident SIZE", "--path.procfs PATH", "--config.file PATH"):
        assert word in r.stdout, word
    parser = build_parser()
    subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    assert len(subs) == 1
    parsers = [parser, *subs[0].choices.values()]  # type: ignore[attr-defined]
    for p in parsers:
        for action in p._actions:
            assert action.help, (p.prog, action.option_strings or action.dest)


def test_udev_dump_help_and_bad_flag() -> None:
    """``udev-dump --help`` and ``udev-dump --bogus`` used to print a dump and exit 0."""
    r = subprocess.run([*exporter_command(), "udev-dump", "--help"], capture_output=True,
                       text=True, timeout=30, check=False)
    assert r.returncode == 0 and r.stdout.startswith("usage: numa-exporter udev-dump")
    assert '"devices"' not in r.stdout
    r = subprocess.run([*exporter_command(), "udev-dump", "--bogus"], capture_output=True,
                       text=True, timeout=30, check=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "--bogus" in lines[0], r.stderr
    assert not r.stdout


def test_inspect_shares_the_daemon_flags() -> None:
    """Path flags work on either side of the command; daemon-only flags are refused."""
    root = ROOTS / "two_node"
    for args in (["inspect", "300", "--json", f"--path.procfs={root / 'proc'}",
                  f"--path.sysfs={root / 'sys'}"],
                 [f"--path.procfs={root / 'proc'}", "inspect", "300", "--json",
                  f"--path.sysfs={root / 'sys'}"]):
        r = subprocess.run([*exporter_command(), *args], capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["comm"] == "splitter"
    r = subprocess.run([*exporter_command(), "inspect", "300", "--scan.interval=1s"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "unrecognized arguments: --scan.interval=1s" in r.stderr
    r = subprocess.run([*exporter_command(), "inspect", "--help"], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0 and "PID" in r.stdout and "--path.procfs PATH" in r.stdout


def test_version_names_python_client_and_kernel() -> None:
    from importlib.metadata import version

    r = subprocess.run([*exporter_command(), "--version"], capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 0
    out = r.stdout
    assert out.startswith(f"numa-exporter, version {version('numa-exporter')}\n"), out
    assert platform.python_version() in out
    assert version("prometheus-client") in out
    assert os.uname().release in out


def test_conditions_that_make_every_value_alike_are_said_once(start_daemon: StartDaemon
                                                             ) -> None:
    """Nothing above --process.min-resident, and a host with one node: one line each."""
    d = start_daemon("--path.procfs=/proc", "--process.min-resident=1PiB",
                     "--scan.interval=200ms", "--log.format=json")
    d.wait_scans(5)
    lines = [json.loads(ln) for ln in d.log_path.read_text().splitlines() if ln.startswith("{")]
    msgs = [r["msg"] for r in lines]
    assert sum(m.startswith("no process passes --process.min-resident") for m in msgs) == 1
    nodes = [p for p in Path("/sys/devices/system/node").glob("node[0-9]*")]
    one_node = [m for m in msgs if m.startswith("one NUMA node")]
    assert len(one_node) == (1 if len(nodes) <= 1 else 0), (len(nodes), one_node)
    assert sum(m == "scan" for m in msgs) >= 5
