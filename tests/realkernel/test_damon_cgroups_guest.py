"""Hot memory per cgroup and node from one paddr kdamond (``--collector.damon.cgroups``) on a
real kernel, and a foreign kdamond left alone. One boot of the 2-node guest per kernel
generation with DAMON's sysfs interface; the job first asks the kernel, on a kdamond of its
own made for the purpose and removed again, whether a scheme's ``stats`` has
``sz_ops_filter_passed`` (per-filter passed bytes, 6.14+: Debian's 7.3 has them, 6.12 not):
where it does not, the test skips naming that feature. ``numa_balancing`` off throughout;
DAMON_STAT (on from boot on 7.3, it excludes every sysfs kdamond) switched off first, as an
admin would.

Two cgroups of the cgroup2 root, both allowed only CPU 0 (node 0's):

* ``/hotA``: ``hotcold 64 1 0 0``: 64 MiB on node 1 read in a loop (with its 1 ms companion,
  see workloads/hotcold.c), nothing cold;
* ``/coldB``: ``hotcold 0 0 256 0``: 256 MiB on node 0 written once, then it sleeps.

1. **foreign**: someone else's kdamond (vaddr, on a sleeper) runs when the exporter starts;
   it stands aside (``numa_exporter_damon_up`` 0, reason ``foreign``) and leaves that
   kdamond exactly as it was (state, thread pid, configuration read before and after).
2. **per cgroup**: the foreign kdamond gone, the exporter (its memory bound to node 1, so
   that its own hot heap shares no region with the cold cgroup's pages on node 0) runs one
   paddr kdamond with a memcg-filtered scheme for each cgroup. Five scrapes 2 s apart, ten
   seconds after the first per-cgroup series: ``/hotA``'s hot bytes on node 1 are within 20 %
   of its 64 MiB hot set, on node 0 under 20 % of it, its hot remote ratio (home: the node of
   its CPU) at least 0.8; ``/coldB``'s hot bytes are under 10 % of its 256 MiB, each in at
   least 4 of the 5 scrapes (one aggregation interval in which the hot loop was off the
   CPU under TCG may read low, as test_damon_guest.py found).
3. **a cgroup vanishes**: the cold cgroup's process ends and its cgroup is removed (the
   kdamond keeps running with a filter on a memcg that is gone, measured on 7.3): the
   exporter counts ``cgroup_gone``, carries on with one cgroup scheme, and ``/coldB``'s
   series are gone while ``/hotA``'s stay. On exit the exporter stops its kdamond.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import guest as harness
from .conftest import guest_assets
from .results import Exposition
from .test_damon_guest import _build

pytestmark = pytest.mark.realkernel

PORT = 19142
TIMEOUT_S = 900.0
MIB = 1 << 20
HOT_SET = 64 * MIB
COLD_SET = 256 * MIB
FEATURE = ("no DAMON per-filter passed bytes (schemes/<n>/stats/sz_ops_filter_passed and "
           "tried_regions/<r>/sz_filter_passed, 6.14+)")


def _script(python: str, hotcold: Path) -> str:
    exporter = (f"{python} -m numa_exporter --web.listen-address=127.0.0.1:{PORT} "
                "--scan.interval=1s --process.include=^hotcold --process.min-resident=0 "
                "--collector.damon --collector.damon.cgroups=2 --log.level=debug")
    fetch = (f"{python} -c \"import sys,urllib.request;sys.stdout.write(urllib.request."
             f"urlopen('http://127.0.0.1:{PORT}/metrics',timeout=30).read().decode())\"")
    return f"""set -u
O=/tmp/rkio/out
mkdir -p $O
exec 2>$O/job.err
echo 0 > /proc/sys/kernel/numa_balancing
A=/sys/kernel/mm/damon/admin/kdamonds
snap() {{ for f in nr_kdamonds 0/state 0/pid 0/contexts/nr_contexts 0/contexts/0/operations \\
  0/contexts/0/targets/nr_targets 0/contexts/0/targets/0/pid_target \\
  0/contexts/0/schemes/nr_schemes 0/contexts/0/schemes/1/ops_filters/0/memcg_path \\
  0/contexts/0/schemes/2/ops_filters/0/memcg_path; do
  v=; for t in $(seq 1 50); do v=$(cat $A/$f 2>/dev/null) && [ -n "$v" ] && break; sleep 0.1; done
  echo "$f $v"; done; }}
poll() {{ for i in $(seq 1 180); do {fetch} > $O/$1.prom 2>/dev/null && \\
  grep -qE "$2" $O/$1.prom && return 0; sleep 1; done; return 1; }}
# ready FILE: the pid a workload wrote there (waits for the line, not just the file)
ready() {{ for i in $(seq 1 300); do grep -q '^pid=' $1 2>/dev/null && break; sleep 0.2; done
  sed -n 's/^pid=//p' $1; }}
DS=/sys/module/damon_stat/parameters/enabled
if [ -e $DS ] && [ "$(cat $DS)" = Y ]; then echo N > $DS && echo off > $O/damon_stat; fi
# does a scheme offer per-filter passed bytes? (a kdamond of the job's own, removed again)
echo 1 > $A/nr_kdamonds
echo 1 > $A/0/contexts/nr_contexts
echo 1 > $A/0/contexts/0/schemes/nr_schemes
if [ -e $A/0/contexts/0/schemes/0/stats/sz_ops_filter_passed ]; then echo yes > $O/filter_bytes
else echo no > $O/filter_bytes; fi
echo 0 > $A/nr_kdamonds
if [ "$(cat $O/filter_bytes)" = no ]; then echo done > $O/DONE; exit 0; fi
CG=/sys/fs/cgroup
echo "+cpuset +memory" > $CG/cgroup.subtree_control
for g in hotA coldB; do mkdir $CG/$g; echo 0 > $CG/$g/cpuset.cpus; done
sh -c "echo \\$\\$ > $CG/hotA/cgroup.procs; exec {hotcold} 64 1 0 0 0 /tmp/rkio/readyA" \\
  > $O/hotA.out 2>&1 &
sh -c "echo \\$\\$ > $CG/coldB/cgroup.procs; exec {hotcold} 0 0 256 0 0 /tmp/rkio/readyB" \\
  > $O/coldB.out 2>&1 &
ready /tmp/rkio/readyA > $O/hotA.pid; ready /tmp/rkio/readyB > $O/coldB.pid
for g in hotA coldB; do cat $CG/$g/memory.numa_stat > $O/$g.numa_stat; done
# 1. someone else's kdamond runs
sleep 900 & S=$!
echo 1 > $A/nr_kdamonds
echo 1 > $A/0/contexts/nr_contexts
echo vaddr > $A/0/contexts/0/operations
echo 1 > $A/0/contexts/0/targets/nr_targets
echo $S > $A/0/contexts/0/targets/0/pid_target
echo on > $A/0/state
snap > $O/foreign.before
{exporter} --collector.damon.run-dir=/tmp/rkdamon-a > $O/exporter-foreign.log 2>&1 &
E=$!
poll foreign 'numa_exporter_damon_unavailable_total.reason="foreign". [1-9]' \\
  || echo "no foreign" >> $O/problems
kill $E; wait $E
snap > $O/foreign.after
echo off > $A/0/state
for i in $(seq 1 100); do [ "$(cat $A/0/state)" = off ] && break; sleep 0.1; done
echo 0 > $A/nr_kdamonds
kill $S
# 2. the exporter's own paddr kdamond, one scheme per cgroup
numactl --membind=1 {exporter} --collector.damon.run-dir=/tmp/rkdamon > $O/exporter.log 2>&1 &
E=$!
poll first 'numa_cgroup_hot_memory_bytes.cgroup="/hotA",node="1"' || echo "no cgroup" >> $O/problems
sleep 10
for i in 1 2 3 4 5; do sleep 2; {fetch} > $O/cg-$i.prom; done
snap > $O/own.running
# 3. the cold cgroup's pod goes: its process ends, its cgroup is removed
kill $(cat $O/coldB.pid)
for i in $(seq 1 100); do [ -z "$(cat $CG/coldB/cgroup.procs)" ] && break; sleep 0.1; done
rmdir $CG/coldB || echo "rmdir failed" >> $O/problems
poll gone 'numa_exporter_damon_events_total.event="cgroup_gone". [1-9]' \
  || echo "no gone" >> $O/problems
sleep 3; {fetch} > $O/after-gone.prom
snap > $O/gone.running
kill -TERM $E; wait $E
snap > $O/own.after_exit
for g in hotA coldB; do cat $CG/$g/memory.numa_stat > $O/$g.numa_stat.end; done
echo done > $O/DONE
"""


@pytest.fixture(scope="module", params=list(harness.GENERATIONS))
def out(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Path]:
    """Boot the guest once per kernel generation with DAMON's sysfs and run the job; skip
    (naming the feature) where the kernel lacks DAMON's sysfs or per-filter passed bytes."""
    kernel = str(request.param)
    assets = guest_assets("damon_cgroups_guest", kernel, "damon_sysfs")
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    results = (Path(keep).resolve() / f"damon-cgroups-guest-{kernel}" if keep
               else tmp_path_factory.mktemp(f"damon-cgroups-guest-{kernel}"))
    results.mkdir(parents=True, exist_ok=True)
    boot = harness.boot("2node", _script(sys.executable, _build(assets.cache)),
                        timeout=TIMEOUT_S, results=results, assets=assets)
    if boot.userland_s is None:
        pytest.skip(f"REAL-KERNEL TESTS SKIPPED: the {kernel} guest never reached userland "
                    f"({'; '.join(boot.attempts)})")
    o = results / "out"
    if not (o / "DONE").exists():
        err = (o / "job.err").read_text() if (o / "job.err").exists() else ""
        pytest.fail(f"damon cgroups job did not finish (rc={boot.rc}): {err[-3000:]}")
    if (o / "filter_bytes").read_text().strip() != "yes":
        pytest.skip(f"damon_cgroups_guest cannot run: kernel {assets.kernel_release}: "
                    f"{FEATURE}")
    yield o


def _problems(out: Path) -> str:
    return (out / "problems").read_text() if (out / "problems").exists() else ""


def _scrapes(out: Path) -> list[Exposition]:
    return [Exposition((out / f"cg-{i}.prom").read_text()) for i in range(1, 6)]


def _hot(e: Exposition, cgroup: str, node: str) -> float:
    return e.value("numa_cgroup_hot_memory_bytes", cgroup=cgroup, node=node) or 0.0


def test_damon_cgroups_foreign_kdamond_left_untouched(out: Path) -> None:
    assert "no foreign" not in _problems(out)
    before, after = (out / "foreign.before").read_text(), (out / "foreign.after").read_text()
    assert "0/state on" in before and "0/contexts/0/operations vaddr" in before
    assert after == before  # same state, same kdamond thread, same configuration
    e = Exposition((out / "foreign.prom").read_text())
    assert e.value("numa_exporter_damon_up") == 0
    assert e.value("numa_cgroup_hot_memory_bytes", cgroup="/hotA", node="1") is None


def test_damon_cgroups_one_paddr_kdamond_with_a_scheme_per_cgroup(out: Path) -> None:
    assert "no cgroup" not in _problems(out)
    running = (out / "own.running").read_text()
    assert "nr_kdamonds 1" in running and "0/state on" in running
    assert "0/contexts/0/operations paddr" in running
    assert "0/contexts/0/schemes/nr_schemes 3" in running
    paths = {line.split()[1] for line in running.splitlines() if "memcg_path" in line}
    assert paths == {"/hotA", "/coldB"}
    assert "0/state off" in (out / "own.after_exit").read_text()


def test_damon_cgroups_hot_bytes_per_node_against_the_truth(out: Path) -> None:
    hot_ok = cold_ok = ratio_ok = 0
    for e in _scrapes(out):
        assert e.value("numa_exporter_damon_up") == 1
        a1, a0 = _hot(e, "/hotA", "1"), _hot(e, "/hotA", "0")
        assert e.value("numa_cgroup_hot_memory_bytes", cgroup="/coldB", node="0") is not None
        cold = _hot(e, "/coldB", "0") + _hot(e, "/coldB", "1")
        hot_ok += abs(a1 - HOT_SET) <= 0.2 * HOT_SET and a0 <= 0.2 * HOT_SET
        cold_ok += cold < 0.1 * COLD_SET
        ratio = e.value("numa_cgroup_hot_remote_memory_ratio", cgroup="/hotA")
        ratio_ok += ratio is not None and ratio >= 0.8
    assert hot_ok >= 4, hot_ok
    assert cold_ok >= 4, cold_ok
    assert ratio_ok >= 4, ratio_ok


def test_damon_cgroups_a_cgroup_that_vanishes_is_dropped(out: Path) -> None:
    assert "no gone" not in _problems(out) and "rmdir failed" not in _problems(out)
    e = Exposition((out / "after-gone.prom").read_text())
    assert e.value("numa_exporter_damon_up") == 1
    assert (e.value("numa_exporter_damon_events_total", event="cgroup_gone") or 0) >= 1
    assert e.value("numa_cgroup_hot_memory_bytes", cgroup="/coldB", node="0") is None
    assert e.value("numa_cgroup_hot_memory_bytes", cgroup="/hotA", node="1") is not None
    running = (out / "gone.running").read_text()
    assert "0/state on" in running and "0/contexts/0/schemes/nr_schemes 2" in running
