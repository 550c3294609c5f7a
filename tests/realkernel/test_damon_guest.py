"""Hot memory from DAMON on a real kernel (``--collector.damon``), and a foreign kdamond
left alone. One boot of the 2-node guest per kernel generation whose kernel has DAMON's
sysfs interface (detected in the guest: Debian's 6.12 and 7.3; 5.10 has no DAMON and 6.1's
build has it off, so those skip saying so), ``numa_balancing`` off throughout. On 7.3,
DAMON_STAT's own kdamond runs from boot and excludes every sysfs kdamond (``state on``
fails: EBUSY, EIO from a shell): the job switches the module off first, as an admin would.

1. **foreign**: a kdamond of someone else's (vaddr, on a sleeper) runs before the exporter
   starts; the exporter must stand aside (``numa_exporter_damon_up 0``, reason ``foreign``)
   and leave it exactly as it was (its state, thread pid and configuration, read from sysfs
   before and after).
2. **hot remote**: ``hotcold 64 1 256 0``: threads on node 0 (CPU 0), 256 MiB on node 0
   touched once and never again, 64 MiB on node 1 read in a loop. The byte ratio is about
   0.2; the hot remote ratio must be near 1. A companion process of the workload wakes every
   1 ms on the same CPU: under TCG a reading loop that stays inside QEMU's software TLB never
   sets the Accessed bits DAMON clears, and the hot set reads cold (measured 2 of 30 runs;
   0 of 35 with the companion). The assertions are relative (hot against cold), not counts.
   On exit (SIGTERM) the exporter stops its own kdamond.
3. **restart, reverse layout**: the exporter restarts on the same run directory (it must
   recognise its own kdamond, not call it foreign) and watches ``hotcold 64 0 256 1``: the
   hot set is local, so the hot remote ratio must be near 0.
   Then, with the exporter still running: ``echo Y`` to DAMON_RECLAIM's ``enabled`` (it
   must fail, and ``numa_exporter_damon_module_blocked{module="damon_reclaim"}`` read 1); an
   outside ``echo off`` to the exporter's kdamond (started again:
   ``numa_exporter_damon_events_total{event="kdamond_restarted"}``); a second, smaller
   hotcold started and the watched one killed (the smaller one watched with
   ``numa_exporter_damon_up`` 1, without the 300 s retry wait that an exit during the region
   update used to cost). Measured in the guest: ``echo Y`` to damon_reclaim's ``enabled``
   fails with EIO and the parameter reads ``N`` afterwards (``kdamond_pid`` -1).
4. **paddr, per node**: the exporter restarts on the same run directory with
   ``--collector.damon.mode=paddr`` (as on a kernel with DAMON_PADDR but not DAMON_VADDR):
   its own stopped vaddr kdamond is redone as one paddr kdamond over both nodes' memory
   blocks. ``hotcold 64 1 256 0`` (with the same companion) → node 1's hot bytes hold at
   least half of the 64 MiB hot set in 4 of 5 scrapes, node 0's idle bytes most of the 256
   MiB cold set in every scrape, and a node's hot plus idle bytes never exceed its memory.
   The exporter's own memory is bound to node 0 (``numactl --membind=0``), so that its hot
   heap is not what makes node 1 read hot. Node 0's hot bytes are not compared with node 1's:
   DAMON's regions are still ~200 MiB wide in the ten seconds the scenario reads, and a
   region counts whole once a sample in it is accessed, so the region holding the exporter's
   heap reads 0-315 MiB hot (measured on an idle host: node 0 above node 1 in 3 of 5 scrapes
   of one run; node 1 read 61-228 MiB over two runs). An earlier version of this test
   asserted node 1 above node 0 in 4 of 5 scrapes and failed in CI with 2 of 5.
   The guest's node memory blocks, their states and the block size are kept as a capture
   (tests/fixtures/memory_blocks).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import guest as harness
from .conftest import guest_assets
from .results import Exposition

pytestmark = pytest.mark.realkernel

HERE = Path(__file__).resolve().parent
PORT = 19141
TIMEOUT_S = 900.0


def _build(cache: Path) -> Path:
    src = HERE / "workloads" / "hotcold.c"
    out = cache / "bin" / "hotcold"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(src)],
                       check=True, capture_output=True, timeout=120)
    return out


def _script(python: str, hotcold: Path) -> str:
    exporter = (f"{python} -m numa_exporter --web.listen-address=127.0.0.1:{PORT} "
                "--scan.interval=1s --process.include=^hotcold --process.min-resident=0 "
                "--process.detail-above=0 "
                "--collector.damon --log.level=debug")
    fetch = (f"{python} -c \"import sys,urllib.request;sys.stdout.write(urllib.request."
             f"urlopen('http://127.0.0.1:{PORT}/metrics',timeout=30).read().decode())\"")
    hc = shlex.quote(str(hotcold))
    return f"""set -u
O=/tmp/rkio/out
mkdir -p $O
exec 2>$O/job.err
echo 0 > /proc/sys/kernel/numa_balancing
A=/sys/kernel/mm/damon/admin/kdamonds
# snap: a DAMON sysfs read answers EBUSY while another writer holds the sysfs lock (the
# exporter's update_schemes_tried_regions waits an aggregation interval under it): retry
snap() {{ for f in nr_kdamonds 0/state 0/pid 0/contexts/nr_contexts 0/contexts/0/operations \\
  0/contexts/0/targets/nr_targets 0/contexts/0/targets/0/pid_target \\
  0/contexts/0/schemes/nr_schemes 0/contexts/0/monitoring_attrs/intervals/sample_us; do
  v=; for t in $(seq 1 50); do v=$(cat $A/$f 2>/dev/null) && [ -n "$v" ] && break; sleep 0.1; done
  echo "$f $v"; done; }}
# poll NAME FILE-PREFIX REGEX: scrape each second until a line matches (at most 120 s)
poll() {{ for i in $(seq 1 120); do {fetch} > $O/$1.prom 2>/dev/null && \\
  grep -qE "$2" $O/$1.prom && return 0; sleep 1; done; return 1; }}
ready() {{ for i in $(seq 1 300); do [ -e $1 ] && break; sleep 0.2; done; sed -n 's/^pid=//p' $1; }}
# 0. DAMON_STAT (7.3: =y, on from boot) runs a kdamond outside sysfs that makes every sysfs
# "state on" fail (EBUSY; EIO from a shell, measured on 7.3): switch it off as an admin
# would, and say so
DS=/sys/module/damon_stat/parameters/enabled
if [ -e $DS ] && [ "$(cat $DS)" = Y ]; then echo N > $DS && echo off > $O/damon_stat; fi
# 1. someone else's kdamond runs
sleep 900 & S=$!
echo 1 > $A/nr_kdamonds
echo 1 > $A/0/contexts/nr_contexts
echo vaddr > $A/0/contexts/0/operations
echo 1 > $A/0/contexts/0/targets/nr_targets
echo $S > $A/0/contexts/0/targets/0/pid_target
echo on > $A/0/state
snap > $O/foreign.before
{hc} 64 1 256 0 0 /tmp/rkio/ready1 > $O/hot.out 2>&1 &
P1=$(ready /tmp/rkio/ready1); echo $P1 > $O/hot.pid
{exporter} --collector.damon.run-dir=/tmp/rkdamon-a > $O/exporter-foreign.log 2>&1 &
E=$!
poll foreign 'numa_exporter_damon_unavailable_total.reason="foreign". [1-9]' \\
  || echo "no foreign" >> $O/problems
sleep 2; {fetch} > $O/foreign.prom
kill $E; wait $E
snap > $O/foreign.after
# the foreign user stops and removes its kdamond
echo off > $A/0/state
for i in $(seq 1 100); do [ "$(cat $A/0/state)" = off ] && break; sleep 0.1; done
echo 0 > $A/nr_kdamonds
kill $S
# 2. hot remote, the exporter's own kdamond
{exporter} --collector.damon.run-dir=/tmp/rkdamon > $O/exporter-hot.log 2>&1 &
E=$!
poll hot-first "numa_process_hot_remote_memory_ratio.pid=\\"$P1\\"" || echo "no hot" >> $O/problems
for i in 1 2 3 4 5; do sleep 2; {fetch} > $O/hot-$i.prom; done
snap > $O/own.running
kill -TERM $E; wait $E
snap > $O/own.after_exit
kill $P1
# 3. the exporter restarts on the same run dir; the hot set is local now
{hc} 64 0 256 1 0 /tmp/rkio/ready2 > $O/local.out 2>&1 &
P2=$(ready /tmp/rkio/ready2); echo $P2 > $O/local.pid
{exporter} --collector.damon.run-dir=/tmp/rkdamon > $O/exporter-local.log 2>&1 &
E=$!
poll local-first "numa_process_hot_remote_memory_ratio.pid=\\"$P2\\"" \\
  || echo "no local" >> $O/problems
for i in 1 2 3 4 5; do sleep 2; {fetch} > $O/local-$i.prom; done
# 3b. the kernel's DAMON_RECLAIM asked to start while the exporter's kdamond runs
M=/sys/module/damon_reclaim/parameters
if [ -e $M/enabled ]; then
  (echo Y > $M/enabled) 2> $O/reclaim.err; echo $? > $O/reclaim.rc
  cat $M/enabled > $O/reclaim.enabled; cat $M/kdamond_pid > $O/reclaim.kdamond_pid 2>&1
  sleep 3; {fetch} > $O/module.prom
fi
# 3c. an outside stop of the exporter's own kdamond while its process lives
for t in $(seq 1 50); do (echo off > $A/0/state) 2>/dev/null && break; sleep 0.1; done
poll outside 'numa_exporter_damon_events_total.event="kdamond_restarted". [1-9]' \
  || echo "no restart" >> $O/problems
snap > $O/outside.snap
# 3d. the watched process exits; a smaller one is there to watch next
{hc} 16 0 32 0 0 /tmp/rkio/ready4 > $O/next.out 2>&1 &
P4=$(ready /tmp/rkio/ready4); echo $P4 > $O/next.pid
sleep 2
kill $P2
poll next "numa_process_hot_memory_bytes.node=\\"[0-9]+\\",pid=\\"$P4\\"" \\
  || echo "no next" >> $O/problems
{fetch} > $O/next.prom
kill -TERM $E; wait $E
kill $P4
# 4. paddr: the host's hot and idle bytes per node
cat /sys/devices/system/memory/block_size_bytes > $O/block_size_bytes
for n in /sys/devices/system/node/node*; do echo "$(basename $n) $(ls $n | grep '^memory' \
  | tr '\n' ' ')"; done > $O/node_memory_blocks
for b in /sys/devices/system/memory/memory*; do echo "$(basename $b) $(cat $b/state)"; done \
  > $O/memory_block_states
{hc} 64 1 256 0 0 /tmp/rkio/ready3 > $O/paddr.out 2>&1 &
P3=$(ready /tmp/rkio/ready3); echo $P3 > $O/paddr.pid
numactl --membind=0 {exporter} --collector.damon.run-dir=/tmp/rkdamon --collector.damon.mode=paddr \
  > $O/exporter-paddr.log 2>&1 &
E=$!
poll paddr-first 'numa_node_hot_memory_bytes.node="1"' || echo "no paddr" >> $O/problems
for i in 1 2 3 4 5; do sleep 2; {fetch} > $O/paddr-$i.prom; done
snap > $O/paddr.running
cat $A/0/contexts/0/targets/0/regions/nr_regions > $O/paddr.nr_regions
kill -TERM $E; wait $E
snap > $O/paddr.after_exit
kill $P3
echo done > $O/DONE
"""


@pytest.fixture(scope="module", params=list(harness.GENERATIONS))
def out(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Path]:
    """Boot the guest once per kernel generation with DAMON's sysfs and run the job; skip
    (saying why) where the kernel lacks it, loudly when QEMU cannot run it."""
    kernel = str(request.param)
    assets = guest_assets("damon_guest", kernel, "damon_sysfs")
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    results = (Path(keep).resolve() / f"damon-guest-{kernel}" if keep
               else tmp_path_factory.mktemp(f"damon-guest-{kernel}"))
    results.mkdir(parents=True, exist_ok=True)
    boot = harness.boot("2node", _script(sys.executable, _build(assets.cache)),
                        timeout=TIMEOUT_S, results=results, assets=assets)
    if boot.userland_s is None:
        pytest.skip(f"REAL-KERNEL TESTS SKIPPED: the {kernel} guest never reached userland "
                    f"({'; '.join(boot.attempts)})")
    o = results / "out"
    if not (o / "DONE").exists():
        err = (o / "job.err").read_text() if (o / "job.err").exists() else ""
        pytest.fail(f"damon job did not finish (rc={boot.rc}): {err[-3000:]}")
    yield o


GUEST_NODE_BYTES = 1024 << 20  # the 2node layout: 1 GiB a node
HOT_SET_SEEN_BYTES = 32 << 20  # half of hotcold's 64 MiB hot set (measured 61-228 MiB)
COLD_SET_IDLE_BYTES = 192 << 20  # most of hotcold's 256 MiB cold set


def _scrapes(o: Path, prefix: str) -> list[Exposition]:
    return [Exposition((o / f"{prefix}-{i}.prom").read_text()) for i in range(1, 6)]


def _pid(o: Path, name: str) -> str:
    return (o / f"{name}.pid").read_text().strip()


def test_damon_foreign_kdamond_left_untouched(out: Path) -> None:
    assert "no foreign" not in ((out / "problems").read_text() if (out / "problems").exists()
                                else "")
    before, after = (out / "foreign.before").read_text(), (out / "foreign.after").read_text()
    assert "0/state on" in before and "0/contexts/0/operations vaddr" in before
    assert after == before  # same state, same kdamond thread, same configuration
    e = Exposition((out / "foreign.prom").read_text())
    assert e.value("numa_exporter_damon_up") == 0
    assert (e.value("numa_exporter_damon_unavailable_total", reason="foreign") or 0) >= 1
    # everything else kept serving
    assert e.value("numa_process_remote_memory_ratio", pid=_pid(out, "hot")) is not None


def test_damon_hot_remote_near_one_while_bytes_near_a_fifth(out: Path) -> None:
    pid = _pid(out, "hot")
    for e in _scrapes(out, "hot"):
        assert e.value("numa_exporter_damon_up") == 1
        byte_ratio = e.value("numa_process_remote_memory_ratio", pid=pid)
        hot_ratio = e.value("numa_process_hot_remote_memory_ratio", pid=pid)
        assert byte_ratio is not None and 0.15 <= byte_ratio <= 0.3, byte_ratio
        assert hot_ratio is not None and hot_ratio >= 0.9, hot_ratio
        remote_hot = e.value("numa_process_hot_memory_bytes", pid=pid, node="1") or 0.0
        local_hot = e.value("numa_process_hot_memory_bytes", pid=pid, node="0") or 0.0
        assert remote_hot > 10 * local_hot, (remote_hot, local_hot)  # hot against cold


def test_damon_own_kdamond_stopped_on_exit(out: Path) -> None:
    assert "0/state on" in (out / "own.running").read_text()
    assert "0/state off" in (out / "own.after_exit").read_text()


def test_damon_restart_recognises_its_own_and_reads_local_hot(out: Path) -> None:
    pid = _pid(out, "local")
    for e in _scrapes(out, "local"):
        assert e.value("numa_exporter_damon_up") == 1  # not "foreign": its own kdamond
        assert e.value("numa_exporter_damon_unavailable_total", reason="foreign") is None
        hot_ratio = e.value("numa_process_hot_remote_memory_ratio", pid=pid)
        assert hot_ratio is not None and hot_ratio <= 0.1, hot_ratio


def test_damon_paddr_hot_bytes_by_node(out: Path) -> None:
    assert "no paddr" not in ((out / "problems").read_text() if (out / "problems").exists()
                              else "")
    running = (out / "paddr.running").read_text()
    assert "0/state on" in running and "0/contexts/0/operations paddr" in running
    assert "nr_kdamonds 1" in running  # one kdamond, host-wide
    assert int((out / "paddr.nr_regions").read_text()) >= 2  # both nodes' ranges
    assert "0/state off" in (out / "paddr.after_exit").read_text()
    hot_set_seen = 0
    for e in _scrapes(out, "paddr"):
        assert e.value("numa_exporter_damon_up") == 1
        assert e.value("numa_exporter_damon_unavailable_total", reason="foreign") is None
        hot = {n: e.value("numa_node_hot_memory_bytes", node=n) or 0.0 for n in ("0", "1")}
        idle = {n: e.value("numa_node_idle_memory_bytes", node=n) for n in ("0", "1")}
        for n in ("0", "1"):
            i = idle[n]
            assert i is not None and hot[n] + i <= GUEST_NODE_BYTES, (n, hot, idle)
        # the 256 MiB written once on node 0 and never touched again reads idle
        assert (idle["0"] or 0.0) >= COLD_SET_IDLE_BYTES, (hot, idle)
        hot_set_seen += hot["1"] >= HOT_SET_SEEN_BYTES
    # the 64 MiB read in a loop on node 1 reads hot; one interval where the loop was off the
    # CPU may read low: 4 of 5. Node 0's hot bytes are not compared with node 1's: a region
    # of node 0 that holds the exporter's heap and the guest's programs counts whole once a
    # sample in it is accessed (measured 0-315 MiB of node 0 hot while node 1 read 61-228
    # MiB; DAMON's regions are still ~200 MiB wide ten seconds after the kdamond starts)
    assert hot_set_seen >= 4, hot_set_seen


def _problems(out: Path) -> str:
    return (out / "problems").read_text() if (out / "problems").exists() else ""


def test_damon_module_refused_while_the_exporters_kdamond_runs(out: Path) -> None:
    if not (out / "reclaim.rc").exists():
        pytest.skip("the guest kernel has no damon_reclaim")
    assert (out / "reclaim.rc").read_text().strip() != "0"  # the kernel refused it
    e = Exposition((out / "module.prom").read_text())
    assert e.value("numa_exporter_damon_module_blocked", module="damon_reclaim") == 1
    assert e.value("numa_exporter_damon_up") == 1


def test_damon_outside_stop_is_restarted(out: Path) -> None:
    assert "no restart" not in _problems(out)
    snap = (out / "outside.snap").read_text()
    assert "0/state on" in snap
    assert f"0/contexts/0/targets/0/pid_target {_pid(out, 'local')}" in snap


def test_damon_target_exit_moves_on_to_the_next_process(out: Path) -> None:
    assert "no next" not in _problems(out)
    e = Exposition((out / "next.prom").read_text())
    assert e.value("numa_exporter_damon_up") == 1
    # the worker counts target_exited when it meets the exit first; when the scan drops the
    # exited process first (measured once in the guest) it moves on without meeting it
    assert e.value("numa_exporter_damon_unavailable_total", reason="error") is None
    assert e.value("numa_exporter_damon_unavailable_total", reason="stopped") is None
    assert (e.value("numa_process_hot_memory_bytes", pid=_pid(out, "next"), node="0")
            or 0) > 0
