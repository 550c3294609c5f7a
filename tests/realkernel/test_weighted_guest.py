"""Weighted interleave on a real 6.12 kernel (6.9+; 6.1 has no weighted interleave, so this
runs on 6.12 only). One boot of the 2-node guest: the weights are set to 3:1 through
/sys/kernel/mm/mempolicy/weighted_interleave, then two workloads of 256 MiB
(weighted_inguest.py) run under MPOL_WEIGHTED_INTERLEAVE over nodes 0-1: ``after`` sets the
policy before touching its pages (the kernel splits them 3:1: the deviation is near 0),
``before`` touches them on node 0 first (all local, then the policy: deviation near
(|1 - 3/4| + |0 - 1/4|) / 2 = 0.25). The exporter's weights must be the ones written, and
its deviations must agree with a split computed here from the kernel's own numa_maps.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import guest as harness
from .conftest import guest_assets
from .results import Exposition

pytestmark = pytest.mark.realkernel

HERE = Path(__file__).resolve().parent
PORT = 19151
TIMEOUT_S = 900.0


def _script(python: str) -> str:
    exporter = (f"{python} -m numa_exporter --web.listen-address=127.0.0.1:{PORT} "
                "--scan.interval=1s --process.include=weighted_inguest --process.detail-above=0 "
                "--process.min-resident=0")
    fetch = (f"{python} -c \"import sys,urllib.request;sys.stdout.write(urllib.request."
             f"urlopen('http://127.0.0.1:{PORT}/metrics',timeout=30).read().decode())\"")
    work = f"{python} {HERE / 'weighted_inguest.py'}"
    return f"""set -u
O=/tmp/rkio/out
mkdir -p $O
exec 2>$O/job.err
echo 0 > /proc/sys/kernel/numa_balancing
W=/sys/kernel/mm/mempolicy/weighted_interleave
for f in $W/*; do echo "$(basename $f) $(cat $f)"; done > $O/weights.boot
echo 3 > $W/node0
echo 1 > $W/node1
ready() {{ for i in $(seq 1 600); do [ -e $1 ] && break; sleep 0.2; done; sed -n 's/^pid=//p' $1; }}
{work} after 256 /tmp/rkio/ready-after > $O/after.out 2>&1 &
PA=$(ready /tmp/rkio/ready-after); echo $PA > $O/after.pid
{work} before 256 /tmp/rkio/ready-before > $O/before.out 2>&1 &
PB=$(ready /tmp/rkio/ready-before); echo $PB > $O/before.pid
{exporter} > $O/exporter.log 2>&1 &
E=$!
for i in $(seq 1 120); do {fetch} > $O/m.prom 2>/dev/null && \\
  grep -q "weighted_interleave_deviation_ratio.pid=\\"$PB\\"" $O/m.prom && break; sleep 1; done
sleep 2; {fetch} > $O/m.prom
cat /proc/$PA/numa_maps > $O/after.numa_maps
cat /proc/$PB/numa_maps > $O/before.numa_maps
kill $E $PA $PB
echo done > $O/DONE
"""


@pytest.fixture(scope="module", params=list(harness.GENERATIONS))
def out(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Path]:
    """Boot the guest once per kernel generation with weighted interleave and run the job;
    skip (saying why) where the kernel lacks it, loudly when QEMU cannot run it."""
    kernel = str(request.param)
    assets = guest_assets("weighted_guest", kernel, "weighted_interleave")
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    results = (Path(keep).resolve() / f"weighted-guest-{kernel}" if keep
               else tmp_path_factory.mktemp(f"weighted-guest-{kernel}"))
    results.mkdir(parents=True, exist_ok=True)
    boot = harness.boot("2node", _script(sys.executable), timeout=TIMEOUT_S, results=results,
                        assets=assets)
    if boot.userland_s is None:
        pytest.skip(f"REAL-KERNEL TESTS SKIPPED: the {kernel} guest never reached userland "
                    f"({'; '.join(boot.attempts)})")
    o = results / "out"
    if not (o / "DONE").exists():
        err = (o / "job.err").read_text() if (o / "job.err").exists() else ""
        pytest.fail(f"weighted job did not finish (rc={boot.rc}): {err[-3000:]}")
    yield o


def _kernel_deviation(numa_maps: str) -> float:
    """Return half the L1 distance of the weighted lines' node shares from 3:1, summed with
    a regex written from show_numa_map's format (not the exporter's parser)."""
    by = {0: 0, 1: 0}
    for line in numa_maps.splitlines():
        size = re.search(r"kernelpagesize_kB=(\d+)", line)
        if " weighted interleave:0-1 " not in line or size is None:  # no page: no size
            continue
        kb = int(size.group(1))
        for node, pages in re.findall(r"\bN(\d)=(\d+)", line):
            by[int(node)] += int(pages) * kb
    total = by[0] + by[1]
    return (abs(by[0] / total - 0.75) + abs(by[1] / total - 0.25)) / 2


def test_weighted_boot_weights_and_the_written_ones(out: Path) -> None:
    """Boot weights 1:1 (QEMU gives no HMAT bandwidth here), 3:1 once written. A kernel with
    the ``auto`` file (6.16+, detected by its presence at boot: 7.3, not 6.12) starts with
    ``auto true`` and switches it off when a weight is written: auto then reads 0."""
    boot = dict(line.split(" ", 1) for line in (out / "weights.boot").read_text().splitlines())
    assert (boot["node0"], boot["node1"]) == ("1", "1"), boot
    e = Exposition((out / "m.prom").read_text())
    assert e.value("numa_node_weighted_interleave_weight", node="0") == 3
    assert e.value("numa_node_weighted_interleave_weight", node="1") == 1
    if "auto" in boot:
        assert boot["auto"] == "true", boot
        assert e.value("numa_weighted_interleave_auto") == 0  # off once a weight is written
    else:
        assert e.value("numa_weighted_interleave_auto") is None  # no auto file


def test_weighted_split_conforms_when_set_first(out: Path) -> None:
    e = Exposition((out / "m.prom").read_text())
    pid = (out / "after.pid").read_text().strip()
    got = e.value("numa_process_weighted_interleave_deviation_ratio", pid=pid)
    want = _kernel_deviation((out / "after.numa_maps").read_text())
    assert got is not None and got < 0.05, got
    assert abs(got - want) < 0.01, (got, want)


def test_weighted_pages_touched_before_the_policy_deviate(out: Path) -> None:
    e = Exposition((out / "m.prom").read_text())
    pid = (out / "before.pid").read_text().strip()
    got = e.value("numa_process_weighted_interleave_deviation_ratio", pid=pid)
    want = _kernel_deviation((out / "before.numa_maps").read_text())
    assert got is not None and 0.2 <= got <= 0.25, got  # all on node 0: 0.25
    assert abs(got - want) < 0.01, (got, want)
