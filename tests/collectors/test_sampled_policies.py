"""Memory policies of a sampled process (issue 23 #1): read in full at discovery (and every
policy interval) where the hold allows, carried onto the sampled bytes between, and where
they are unknown no policy series and no verdict that rests on them.

A copy of the two_node root whose process 300 has 4 GiB resident, is CPU-bound to node 0
(Cpus_allowed_list 0, both threads last on CPU 0: node 0 holds CPU 0, node 1 CPU 1) and has
every mapping bound to node 0 (``bind:0`` where the capture says ``default``), with a fake
sampled reader; then a real process launched under ``numactl --membind=0`` on the real
/proc, sampled."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.collectors.test_reader_choice import FakeSampled
from tests.conftest import ROOTS, fixture_config

from numa_exporter.config import Config
from numa_exporter.model.snapshot import ProcessSample
from numa_exporter.readers.sampled.reader import SampledReader, sampling_available
from numa_exporter.roots import Roots
from numa_exporter.scan.scanner import Scanner

GiB, MiB = 1 << 30, 1 << 20
POLICY_REASONS = ("memory_not_on_thread_nodes", "threads_bound_memory_free",
                  "balancing_with_strict_binding", "memory_off_policy_nodes")


@pytest.fixture
def bound_root(tmp_path: Path) -> Path:
    """Return the copy of two_node described above."""
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    proc = root / "proc" / "300"
    text = (proc / "status").read_text()
    text = re.sub(r"VmRSS:\s+\d+ kB", f"VmRSS:\t{4 * GiB // 1024} kB", text)
    text = re.sub(r"RssAnon:\s+\d+ kB", f"RssAnon:\t{4 * GiB // 1024} kB", text)
    text = re.sub(r"Cpus_allowed:\s+\S+", "Cpus_allowed:\t1", text)
    text = re.sub(r"Cpus_allowed_list:\s+\S+", "Cpus_allowed_list:\t0", text)
    (proc / "status").unlink()
    (proc / "status").write_text(text)
    stat = proc / "task" / "310" / "stat"  # its second thread last ran on CPU 1: now CPU 0
    line = stat.read_text().replace(" 17 1 0 0 ", " 17 0 0 0 ")
    stat.unlink()
    stat.write_text(line)
    maps = (proc / "numa_maps").read_text().replace(" default ", " bind:0 ")
    (proc / "numa_maps").unlink()
    (proc / "numa_maps").write_text(maps)
    return root


def _scan(root: Path, scans: int, **kw: object) -> list[ProcessSample]:
    cfg = fixture_config(root,
                         include=re.compile("^splitter$"), **kw)
    scanner = Scanner(cfg, sampled=FakeSampled(largest=4 * GiB))
    out = []
    for _ in range(scans):
        (p,) = scanner.scan().processes
        out.append(p)
    return out


def test_unknown_policies_give_no_policy_series_and_no_verdict(bound_root: Path) -> None:
    # no policy read (policy interval 0): sampled from the first scan, policies never seen;
    # the old reader exported memory_bound 0 and threads_bound_memory_free 1 here
    for p in _scan(bound_root, 3, policy_interval=0.0):
        assert p.method == "sampled"
        assert p.policy_bytes == {} and p.policy_nodes == {}
        assert p.memory_bound is None  # unknown, not "no"
        assert p.cpus_bound is True
        assert not any(r in p.mismatches for r in POLICY_REASONS)
        assert p.mismatches.get("accelerator_node_not_allowed") is False  # none open


def test_a_policy_read_at_discovery_carries_onto_sampled_reads(bound_root: Path) -> None:
    # 4 GiB unmeasured: a 32 ms hold estimated, over the 5 ms hold budget but within the
    # 100 ms policy hold budget; a tiny hold budget keeps it sampled after that read
    first, *rest = _scan(bound_root, 4, hold_budget=1e-12)
    assert (first.method, first.placement_reason) == ("full", "policy")
    assert first.memory_bound is True
    for p in rest:
        assert (p.method, p.placement_reason) == ("sampled", "hold")
        # the read's shares on the sampled bytes (a mapping without pages stays at 0)
        assert p.policy_bytes["bind"] == 4 * GiB == sum(p.policy_bytes.values())
        assert p.memory_bound is True
        assert p.mismatches["threads_bound_memory_free"] is False
        # a read for policies leaves the reader choice and the sampled budget as planned
        assert p.full_read_cpu is None and p.hold_seconds is not None


def test_a_hold_over_the_policy_budget_leaves_policies_unknown(bound_root: Path) -> None:
    for p in _scan(bound_root, 3, policy_hold_budget=0.01):  # 32 ms estimated: over
        assert p.method == "sampled" and p.memory_bound is None
        assert "threads_bound_memory_free" not in p.mismatches


# it faults a fresh page every 2 ms: never quiet, so a full read is not kept for it
HOLDER = """
import mmap, sys, time
buf = b"\\x01" * ({size} << 20)
sys.stdout.write("ready\\n")
sys.stdout.flush()
end = time.monotonic() + 600
while time.monotonic() < end:
    m = mmap.mmap(-1, 4096)
    m[0] = 1
    m.close()
    time.sleep(0.002)
"""


@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl not installed")
def test_a_membind_process_forced_to_sampling_exports_its_bind_bytes() -> None:
    ok, why = sampling_available(Path("/proc"))
    if not ok:
        pytest.skip(f"sampled placement unavailable here: {why}")
    token = f"membindprobe-{uuid.uuid4().hex}"
    child = subprocess.Popen(["numactl", "--membind=0", sys.executable, "-c",
                              HOLDER.format(size=256), token], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        nodes = len(list(Path("/sys/devices/system/node").glob("node[0-9]*")))
        # a hold budget of 1 us: sampled whenever the hold allows nothing else
        cfg = Config(roots=Roots(Path("/proc"), Path("/sys")), min_resident=64 * MiB,
                     include=re.compile(re.escape(token)), hold_budget=1e-6)
        scanner = Scanner(cfg, sampled=SampledReader())
        seen = []
        for _ in range(4):
            (p,) = [p for p in scanner.scan().processes if p.pid == child.pid]
            seen.append(p)
        sampled = [p for p in seen if p.method == "sampled"]
        assert len(sampled) >= 2, [(p.method, p.placement_reason) for p in seen]
        for p in sampled:
            placed = sum(p.memory.values())
            assert placed >= 200 * MiB
            assert p.policy_bytes.get("bind", 0) >= 0.9 * placed, p.policy_bytes
            # binding to node 0 binds memory only where another node has memory
            assert p.memory_bound is (nodes > 1)
    finally:
        child.kill()
        child.wait()
