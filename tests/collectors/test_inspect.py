"""``numa-exporter inspect`` on fixture roots and on a live process here."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from tests.conftest import ROOTS

from numa_exporter.cli import main as cli_main


def main(argv: list[str]) -> int:
    return cli_main(["inspect", *argv])


def _run(capsys: pytest.CaptureFixture[str], root: str, pid: int, *extra: str) -> dict[str, Any]:
    base = ROOTS / root
    args = [str(pid), "--json", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]
    if (base / "udev.json").exists():
        args.append(f"--accelerator.records={base / 'udev.json'}")
    if (base / "config.toml").exists():
        args.append(f"--config.file={base / 'config.toml'}")
    assert main([*args, *extra]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_remote_bound_gpu_process(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "inference", 500)
    assert r["verdict"] == "remote"
    assert r["home"] == {"nodes": "0", "source": "accelerator"}
    assert r["unit"] == "vllm.service"
    text = "\n".join(r["remedies"])
    assert "numactl --cpunodebind=0 --membind=0" in text
    assert "/etc/systemd/system/vllm.service.d/numa.conf" in text
    assert "NUMAPolicy=bind" in text and "NUMAMask=0" in text and "CPUAffinity=0" in text
    assert "AllowedMemoryNodes=0" in text  # its cgroup confines memory to node 1
    assert "migratepages 500 1 0" in text
    assert len(r["problems"]) == 3


def test_local_process_needs_no_remedy(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "inference", 501)
    assert r["verdict"] == "local" and r["remedies"] == [] and r["problems"] == []


def test_membind_capture(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "two_node", 159)
    assert r["verdict"] == "remote"
    assert r["memory_bytes"]["1"]["anon"] == 268488704
    assert r["numa_balancing"] == 1
    assert "memory is bound to nodes where none of its threads run" in r["problems"]


def test_split_threads_are_local(capsys: pytest.CaptureFixture[str]) -> None:
    r = _run(capsys, "two_node", 300)
    assert r["verdict"] == "local" and r["home"]["nodes"] == "0-1"


def test_text_output_and_missing_process(capsys: pytest.CaptureFixture[str]) -> None:
    base = ROOTS / "two_node"
    assert main(["159", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]) == 0
    out = capsys.readouterr().out
    assert "Verdict: REMOTE" in out and "numactl --cpunodebind=0 --membind=0" in out
    assert main(["302", f"--path.procfs={base / 'proc'}", f"--path.sysfs={base / 'sys'}"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_live_process_here() -> None:
    r = subprocess.run([sys.executable, "-m", "numa_exporter", "inspect", str(_self_pid()),
                        "--json"], capture_output=True, text=True, timeout=60, check=True)
    rep = json.loads(r.stdout)
    total = sum(sum(k.values()) for k in rep["memory_bytes"].values())
    assert total > 0
    assert rep["verdict"] in ("local", "remote", "mixed")


def _self_pid() -> int:
    import os

    return os.getpid()
