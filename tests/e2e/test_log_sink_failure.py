"""The real daemon keeps scanning when its log sink fails, and /-/healthy says when the scan
loop is stuck (issue 15 #1)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.conftest import REPO, ROOTS, exporter_command, free_port, scrape

pytestmark = pytest.mark.e2e


def _args(port: int, procfs: Path | None = None) -> list[str]:
    base = ROOTS / "two_node"
    return [*exporter_command(), f"--web.listen-address=127.0.0.1:{port}",
            f"--path.procfs={procfs or base / 'proc'}", f"--path.sysfs={base / 'sys'}",
            f"--accelerator.records={ROOTS.parent / 'udev' / 'none.json'}",
            "--process.min-resident=0", "--scan.interval=200ms", "--log.level=debug"]


def _value(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} missing"
    return float(m.group(1))


def _scans(port: int) -> float:
    return _value(scrape(f"http://127.0.0.1:{port}/metrics"), "numa_exporter_scans_total")


def _wait_scans(proc: subprocess.Popen[bytes], port: int, n: float,
                timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    got = -1.0
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"daemon exited {proc.returncode}"
        try:
            got = _scans(port)
        except OSError:
            got = -1.0
        if got >= n:
            return got
        time.sleep(0.1)
    raise AssertionError(f"scans_total stuck at {got}, wanted {n}")


def _health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/healthy", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("SIGTERM did not stop the daemon") from None


def test_pipe_whose_reader_exits_does_not_stop_scanning() -> None:
    """``numa-exporter ... 2>&1 | head -n 3``: the reader goes, writes fail with EPIPE."""
    port = free_port()
    r, w = os.pipe()
    proc = subprocess.Popen(_args(port), stdout=w, stderr=w, cwd=REPO)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as reader:
            for _ in range(3):  # head -n 3
                reader.readline()
        # the read end is closed: every later log line fails to be written
        before = _wait_scans(proc, port, 1)
        _wait_scans(proc, port, before + 10)
        text = scrape(f"http://127.0.0.1:{port}/metrics")
        assert _value(text, 'numa_exporter_log_write_errors_total{reason="write"}') > 0
        assert _value(text, "numa_exporter_scan_loop_up") == 1
        status, _ = _health(port)
        assert status == 200
    finally:
        rc = _stop(proc)
    assert rc == 0


def test_full_disk_log_does_not_stop_scanning() -> None:
    """The log file's filesystem is full: ENOSPC on every write."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    port = free_port()
    with open("/dev/full", "wb") as full:
        proc = subprocess.Popen(_args(port), stdout=full, stderr=full, cwd=REPO)
    try:
        before = _wait_scans(proc, port, 1)
        _wait_scans(proc, port, before + 10)
        text = scrape(f"http://127.0.0.1:{port}/metrics")
        assert _value(text, 'numa_exporter_log_write_errors_total{reason="write"}') > 10
    finally:
        rc = _stop(proc)
    assert rc == 0


def test_stuck_scan_makes_healthy_fail(tmp_path: Path) -> None:
    """A scan that never ends (here: a FIFO for a numa_maps nobody writes, so open() blocks)
    turns /-/healthy to 503 with the reason and numa_exporter_scan_loop_up to 0."""
    import shutil

    procfs = tmp_path / "proc"
    shutil.copytree(ROOTS / "two_node" / "proc", procfs, symlinks=True)
    pids = sorted(p for p in procfs.iterdir() if p.name.isdigit()
                  and (p / "numa_maps").exists())
    assert pids
    (pids[0] / "numa_maps").unlink()
    os.mkfifo(pids[0] / "numa_maps")
    port = free_port()
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(_args(port, procfs), stdout=out, stderr=out, cwd=REPO)
    try:
        deadline = time.monotonic() + 90
        status, body = 0, ""
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                status, body = _health(port)
            except OSError:
                status = 0
            if status == 503:
                break
            time.sleep(0.5)
        assert status == 503, (status, body)
        assert "no scan completed" in body
        text = scrape(f"http://127.0.0.1:{port}/metrics")
        assert _value(text, "numa_exporter_scan_loop_up") == 0
    finally:
        proc.kill()  # the scan is blocked in open(); SIGTERM is not what this test is about
        proc.wait()
