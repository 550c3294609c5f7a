"""Tiers, CPU-less nodes and hinting faults on a real kernel: the ``tiers`` guest layout.

One boot of ``TierLayout`` (two CPU nodes, CPU-less nodes 2 and 3, an HMAT; see guest.py)
runs the exporter (every collector on, tiers included) and two workloads:

* ``far``: ``numactl --cpunodebind=0 --membind=2 rkwork -m anon -s 64`` - its bytes sit on
  the CPU-less node 2 and must read as far;
* ``fault``: ``numactl --cpunodebind=1 rkwork -m migrate -s 64 -c 0`` - memory first
  touched on node 1, then the thread moves to node 0 (SIGUSR1) with
  ``kernel.numa_balancing=1`` and keeps touching it; scraped every few seconds, with the
  workload stopped (SIGSTOP) around each scrape so that its decayed counts hold still while
  the kernel's per-thread ``sched`` files and the exporter read them.

What the kernel does (docs/tiers.md, the phase A capture): a hinting fault that migrates its
page is counted on the page's *new* node, so the fault share reads local while the bytes are
still remote; it never reads more remote than the bytes do. The tests assert that, and that
the exporter's per-node faults equal the kernel's sums over the threads.

It runs on every kernel with memory tiers (not 5.10); the default run takes it on 6.1 only
(scenarios.EDGE_ONLY_ON_612: the CI budget), ``NUMA_REALKERNEL_KERNELS=6.12`` or ``=7.3`` on
those. 6.12 and 7.3 place CPU-less nodes in memory tiers from the HMAT's performance figures
(abstract distance, 6.7+); the assertions here hold there too (measured: all three passed on
6.12.118, 358 s with boot, where the first decayed fault counts took the wait's whole 2
minutes to show, and on 7.3.4, 140 s).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import guest as harness
from .conftest import guest_assets
from .results import Exposition, MiB, numa_maps_node_bytes

pytestmark = pytest.mark.realkernel

PORT = 19131
SCRAPES = 4
SIZE_MIB = 64
TIMEOUT_S = 900.0


def _script(python: str) -> str:
    """Return the in-guest job (sh): exporter, the two workloads, scrapes, kernel files."""
    exporter = (f"{python} -m numa_exporter --web.listen-address=127.0.0.1:{PORT} "
                "--scan.interval=1s --process.include=^rkwork --process.min-resident=0 "
                "--process.detail-above=0 "
                "--log.level=debug")
    fetch = (f"{python} -c \"import sys,urllib.request;sys.stdout.write(urllib.request."
             f"urlopen('http://127.0.0.1:{PORT}/metrics',timeout=30).read().decode())\"")
    return f"""set -u
O=/tmp/rkio/out
mkdir -p $O
exec 2>$O/job.err
W=$(cat /tmp/rkio/workload_path)
echo 0 > /proc/sys/kernel/numa_balancing
{exporter} > $O/exporter.log 2>&1 &
EXP=$!
for i in $(seq 1 300); do {fetch} > /dev/null 2>&1 && break; sleep 0.5; done
scrape() {{ sleep 3; {fetch} > $O/$1.prom; }}
ksched() {{ # ksched NAME PID: every thread's sched, one file per thread
  mkdir -p $O/$1
  for t in /proc/$2/task/*; do cat $t/sched > $O/$1/$(basename $t).sched; done
}}
# far: thread on node 0, memory bound to the CPU-less node 2
numactl --cpunodebind=0 --membind=2 $W -m anon -s {SIZE_MIB} -r /tmp/rkio/readyA -T 200 \
  > $O/far.out 2>&1 &
for i in $(seq 1 300); do [ -e /tmp/rkio/readyA ] && break; sleep 0.2; done
PA=$(sed -n 's/^pid=//p' /tmp/rkio/readyA)
echo $PA > $O/far.pid
scrape far
cat /proc/$PA/numa_maps > $O/far.numa_maps
kill $PA
# the balancer's scan period is counted in the task's CPU time and grows while faults are
# local: a workload that mostly sleeps would wait minutes for its next pass (and its decayed
# counts are only updated when a pass ends). Scan often, in this test bed only.
D=/sys/kernel/debug/sched/numa_balancing
[ -d $D ] || mount -t debugfs none /sys/kernel/debug 2>/dev/null
if [ -d $D ]; then
  echo 0 > $D/scan_delay_ms; echo 100 > $D/scan_period_min_ms; echo 400 > $D/scan_period_max_ms
  cat $D/scan_delay_ms $D/scan_period_min_ms $D/scan_period_max_ms $D/scan_size_mb > $O/scan_ms
fi
# fault: touched on node 1, then the thread moves to node 0 with balancing on
numactl --cpunodebind=1 $W -m migrate -s {SIZE_MIB} -c 0 -r /tmp/rkio/readyB -T 900 \
  > $O/fault.out 2>&1 &
for i in $(seq 1 300); do [ -e /tmp/rkio/readyB ] && break; sleep 0.2; done
PB=$(sed -n 's/^pid=//p' /tmp/rkio/readyB)
echo $PB > $O/fault.pid
scrape fault-before
echo 1 > /proc/sys/kernel/numa_balancing
kill -USR1 $PB
for i in $(seq 1 100); do [ -e /tmp/rkio/readyB.moved ] && break; sleep 0.2; done
scrape fault-moving
# the decayed counts are updated when the task's scan sequence moves on (a full pass of the
# balancer over its memory): wait for the first, up to 2 minutes
T0=$(date +%s)
for i in $(seq 1 240); do
  grep -qE "^numa_faults node=[0-9]+ task_private=([1-9]|0 task_shared=[1-9])" \\
    /proc/$PB/task/*/sched 2>/dev/null && break
  sleep 0.5
done
echo $(( $(date +%s) - T0 )) > $O/first_fault_s
for i in $(seq 1 {SCRAPES}); do
  sleep 4
  # stopped, its threads run no task_numa_placement(): the decayed counts hold still while
  # the kernel's files and the exporter (a scan every second) read them
  kill -STOP $PB
  ksched k$i $PB
  scrape fault-$i
  cat /proc/$PB/numa_maps > $O/fault-$i.numa_maps
  kill -CONT $PB
done
echo 0 > /proc/sys/kernel/numa_balancing
kill $PB
cat /proc/vmstat > $O/vmstat
kill $EXP
echo done > $O/DONE
"""


@dataclass
class TierRun:
    """What the tiers guest left: scrapes (``NAME.prom``) and kernel files."""

    out: Path

    def scrape(self, name: str) -> Exposition:
        """Return the parsed scrape ``name``."""
        return Exposition((self.out / f"{name}.prom").read_text())

    def pid(self, name: str) -> str:
        """Return the pid of workload ``name`` as the exporter labels it."""
        return (self.out / f"{name}.pid").read_text().strip()

    def kernel_faults(self, folder: str) -> dict[int, int]:
        """Return the task faults per node summed over the threads' sched files, read with a
        regex written from the kernel's format string (not the exporter's parser)."""
        out: dict[int, int] = {}
        line = re.compile(r"^numa_faults node=(\d+) task_private=(\d+) task_shared=(\d+) ",
                          re.M)
        for f in sorted((self.out / folder).glob("*.sched")):
            for node, a, b in line.findall(f.read_text()):
                out[int(node)] = out.get(int(node), 0) + int(a) + int(b)
        return out


@pytest.fixture(scope="module", params=list(harness.GENERATIONS))
def tiers_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[TierRun]:
    """Boot the tiers guest once per kernel generation with memory tiers and run the job;
    skip (saying why) where the kernel lacks them, loudly when QEMU cannot run it."""
    kernel = str(request.param)
    assets = guest_assets("tiers_guest", kernel, "memory_tiers")
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    name = "tiers-guest" if kernel == harness.DEFAULT_GENERATION else f"tiers-guest-{kernel}"
    results = (Path(keep).resolve() / name if keep else tmp_path_factory.mktemp(name))
    results.mkdir(parents=True, exist_ok=True)
    boot = harness.boot("tiers", _script(sys.executable), timeout=TIMEOUT_S, results=results,
                        assets=assets, files={"workload_path": str(assets.workload)})
    if boot.userland_s is None:
        pytest.skip(f"REAL-KERNEL TESTS SKIPPED: the tiers guest never reached userland "
                    f"({'; '.join(boot.attempts)})")
    out = results / "out"
    if not (out / "DONE").exists():
        err = (out / "job.err").read_text() if (out / "job.err").exists() else ""
        log = (out / "exporter.log").read_text()[-3000:] if (out / "exporter.log").exists() else ""
        pytest.fail(f"tiers job did not finish (rc={boot.rc}): {err[-2000:]}\n{log}")
    yield TierRun(out)


def test_tiers_node_classes_and_hmat_as_qemu_was_told(tiers_run: TierRun) -> None:
    lay = harness.LAYOUTS["tiers"]
    assert isinstance(lay, harness.TierLayout)
    e = tiers_run.scrape("far")
    cpu_nodes = set(range(lay.nodes))
    every = range(lay.nodes + len(lay.memory_nodes))
    for node in every:
        n = str(node)
        assert e.value("numa_node_has_cpu", node=n) == (node in cpu_nodes), n
        assert e.value("numa_node_has_memory", node=n) == 1.0, n
    told = {(i, t): (lat, bw) for i, t, lat, bw in lay.hmat}
    initiator = {t: t for t in cpu_nodes} | {
        k: ini for k, (_mib, ini) in enumerate(lay.memory_nodes, start=lay.nodes)}
    for node in every:
        ini = initiator[node]
        lat_ns, bw_mib = told[(ini, node)]
        for cls in ("0", "1"):
            for op in ("read", "write"):
                labels = {"node": str(node), "access_class": cls, "op": op}
                got = e.select("numa_node_access_latency_seconds", **labels)
                # the kernel keeps the best initiator of each target only
                assert [lab["initiator"] for lab, _ in got] == [str(ini)], (node, got)
                assert got[0][1] == pytest.approx(lat_ns * 1e-9), (node, cls, op)
                assert e.value("numa_node_access_bandwidth_bytes_per_second",
                               initiator=str(ini), **labels) == bw_mib * MiB


def test_tiers_process_bound_to_a_cpu_less_node_is_far(tiers_run: TierRun) -> None:
    e = tiers_run.scrape("far")
    pid = tiers_run.pid("far")
    kernel = numa_maps_node_bytes((tiers_run.out / "far.numa_maps").read_text())
    assert kernel.get(2, 0) >= 0.99 * SIZE_MIB * MiB, kernel
    far = e.value("numa_process_memory_locality_bytes", pid=pid, locality="far")
    assert far is not None and far >= 0.99 * SIZE_MIB * MiB, far
    # (remote: a little page cache of the libraries, on node 1)
    ratio = e.value("numa_process_memory_locality_ratio", pid=pid, accessor="cpu",
                    locality="far")
    assert ratio is not None and ratio >= 0.95, ratio
    # the thread's node is home; the CPU-less node never is
    homes = e.select("numa_process_home_nodes_info", pid=pid)
    assert [lab["nodes"] for lab, _ in homes] == ["0"], homes
    # spans come from the cpuset (Cpus_allowed_list, Mems_allowed_list), not the policy:
    # --cpunodebind narrows the CPUs, --membind leaves Mems_allowed at every memory node
    assert e.value("numa_process_allowed_cpu_nodes", pid=pid) == 1.0
    assert e.value("numa_process_allowed_memory_nodes", pid=pid) == 4.0
    # membind without MPOL_F_MOF: the balancer skips it, so no hinting fault (balancing off
    # here anyway): the fault share is absent, not 0
    assert e.value("numa_process_fault_remote_ratio", pid=pid) is None


def test_tiers_hinting_faults_follow_the_kernel(tiers_run: TierRun) -> None:
    """Faults appear once balancing runs; with the workload stopped around each scrape its
    per-node faults equal the kernel's sums over its threads; the share is never more remote
    than the bytes (a migrating fault counts on the page's new node)."""
    pid = tiers_run.pid("fault")
    # balancing off, no fault yet: absent, not 0
    before = tiers_run.scrape("fault-before")
    assert not before.select("numa_process_hint_faults", pid=pid)
    assert before.value("numa_process_fault_remote_ratio", pid=pid) is None
    first = (tiers_run.out / "first_fault_s").read_text().strip()
    print(f"first decayed fault counts {first} s after the thread moved")
    seen_faults = False
    shares: list[tuple[float | None, float | None]] = []
    for i in range(1, SCRAPES + 1):
        e = tiers_run.scrape(f"fault-{i}")
        got = {int(lab["node"]): v for lab, v in e.select("numa_process_hint_faults", pid=pid)}
        kernel = tiers_run.kernel_faults(f"k{i}")
        if any(kernel.values()):
            # nodes with no fault are left out (series budget: zero per-node faults dropped)
            assert got == {n: float(v) for n, v in kernel.items() if v}, (i, got, kernel)
        else:
            assert got == {}, (i, got)  # absent, not 0, before the first fault
        seen_faults = seen_faults or any(got.values())
        share = e.value("numa_process_fault_remote_ratio", pid=pid)
        local = e.value("numa_process_memory_locality_ratio", pid=pid, accessor="cpu",
                        locality="local")
        bytes_off = None if local is None else 1 - local
        shares.append((share, bytes_off))
        if share is not None:
            assert bytes_off is not None and share <= bytes_off + 0.05, (i, shares)
    assert seen_faults, f"no hinting fault in {SCRAPES} scrapes: {shares}"
    print(f"fault share vs bytes off home per scrape: {shares}")
