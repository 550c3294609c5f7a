"""The real daemon with FIFOs under ``--path.rootfs`` (issue 23 #4): where the CPU Manager
checkpoint and a container's ``config.json`` belong, a local user put FIFOs. The daemon keeps
scanning, counts each refused file, names the pod from its log directory, and SIGTERM stops
its scan thread (a thread blocked in ``open()`` never ends)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import REPO, ROOTS, exporter_command, free_port, scrape
from tests.e2e.exposition import values

pytestmark = pytest.mark.e2e

BASE = ROOTS / "kubernetes"
SPEC_A = Path("run/containerd/io.containerd.runtime.v2.task/k8s.io") / ("c0a1" * 16)
CPU_STATE = Path("var/lib/kubelet/cpu_manager_state")
WAIT = 60.0  # hang detector for each poll below


def _metric(text: str, name: str, **labels: str) -> float:
    got = values(text, name, **labels)
    return got[0][1] if got else 0.0


def _poll(proc: subprocess.Popen[bytes], port: int, log: Path, ok: object) -> str:
    """Return the first scrape for which ``ok(text)`` holds; fail after ``WAIT`` seconds."""
    deadline = time.monotonic() + WAIT
    text = ""
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"daemon exited: {log.read_text()[-2000:]}"
        with contextlib.suppress(OSError):
            text = scrape(f"http://127.0.0.1:{port}/metrics")
            if ok(text):  # type: ignore[operator]
                return text
        time.sleep(0.1)
    found = re.findall(r"^numa_exporter_scans_total .*$", text, re.M)
    raise AssertionError(f"not reached in {WAIT:g} s ({found}): {log.read_text()[-2000:]}")


def test_fifos_under_the_root_leave_the_daemon_scanning(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    shutil.copytree(BASE / "rootfs", rootfs)
    for at in (rootfs / CPU_STATE, rootfs / SPEC_A / "config.json"):
        at.unlink()
        os.mkfifo(at)
    port, log = free_port(), tmp_path / "daemon.log"
    cmd = [*exporter_command(), f"--web.listen-address=127.0.0.1:{port}",
           f"--path.procfs={BASE / 'proc'}", f"--path.sysfs={BASE / 'sys'}",
           f"--path.rootfs={rootfs}", "--process.min-resident=0", "--scan.interval=200ms",
           "--log.format=json"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, cwd=REPO)
    try:
        text = _poll(proc, port, log,
                     lambda t: _metric(t, "numa_exporter_scans_total") >= 3)
        first = _metric(text, "numa_exporter_read_errors_total",
                        source="cpu_manager_state", reason="error")
        assert first >= 1
        # scans go on, and each one counts the refused checkpoint again
        text = _poll(proc, port, log, lambda t: _metric(
            t, "numa_exporter_read_errors_total", source="cpu_manager_state",
            reason="error") >= first + 3)
        assert _metric(text, "numa_exporter_read_errors_total", source="containerd_spec",
                       reason="error") >= 1
        (info,) = [s for s, _ in values(text, "numa_process_kubernetes_info", pid="600")]
        assert (info["namespace"], info["pod"], info["container"]) == (
            "default", "gpu-infer-0", "")  # named from /var/log/pods, the spec refused
        assert scrape(f"http://127.0.0.1:{port}/-/healthy")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("SIGTERM did not stop the daemon") from None
    assert rc == 0
    out = log.read_text()
    assert '"stopping"' in out or "stopping" in out
    assert "the scan thread did not stop" not in out
