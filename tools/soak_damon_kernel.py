"""Run the exporter with DAMON's sysfs answered by the fake kernel of the unit tests
(tests/unit/damon_kernel.py), for the soak's DAMON rounds: ``python -m
tools.soak_damon_kernel SYSFS [exporter arguments...]`` (from the repository root).

The fake kernel lives in the exporter's own process: every write to a file under
``SYSFS/kernel/mm/damon/admin/kdamonds`` goes through its store functions, as the kernel's
mm/damon/sysfs.c would answer it. Never the host's DAMON. Its targets are this machine's
real processes: a pid is alive while ``/proc/<pid>`` is there and no zombie; a running
kdamond whose target exited stops (``kdamond_need_stop()``), noticed at the next write to
the tree (the state file still shows ``on`` until then, as right after the exit on a real
kernel: the exporter's region update then answers EINVAL); a region update waits one
aggregation interval, as the kernel's does (a target exiting meanwhile: ECANCELED), then writes the
target's writable private mappings (``/proc/<pid>/maps``) as regions, every one accessed in
every sample.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from tests.unit.damon_kernel import FakeDamon


class LivePids(set[int]):
    """The processes that exist on this machine (``in`` asks /proc; not a zombie)."""

    def __contains__(self, pid: object) -> bool:
        try:
            stat = Path(f"/proc/{int(pid)}/stat").read_text()  # type: ignore[call-overload]
        except (OSError, TypeError, ValueError):
            return False
        return stat.rpartition(")")[2].split()[:1] != ["Z"]


class LiveFakeDamon(FakeDamon):
    """The fake kernel with real processes as targets."""

    def __init__(self, sysfs: Path) -> None:
        super().__init__(sysfs)
        self.alive = LivePids()
        self.during_update = self._aggregate

    def _reap(self) -> None:
        """Stop the running kdamonds whose target exited."""
        for i, k in enumerate(self.kdamonds):
            if k.running and self._target(i) not in self.alive:
                self.stop(i)

    def _aggregate(self, i: int) -> None:
        """A region update waits one aggregation interval (the kdamond serves it then); a
        target that exits meanwhile stops the kdamond (the update: ECANCELED)."""
        aggr = self._dir(i) / "contexts/0/monitoring_attrs/intervals/aggr_us"
        time.sleep(min(int(aggr.read_text()), 1_000_000) / 1e6)
        self._reap()

    def store(self, rel: str, value: str) -> None:
        """Stop the kdamonds whose target exited, then handle the write."""
        self._reap()
        super().store(rel, value)

    def _tried(self, i: int) -> None:
        ctx = self._dir(i) / "contexts/0/monitoring_attrs"
        hits = (int((ctx / "intervals/aggr_us").read_text())
                // max(1, int((ctx / "intervals/sample_us").read_text())))
        regions: list[tuple[int | str, ...]] = []
        try:
            maps = Path(f"/proc/{self._target(i)}/maps").read_text()
        except OSError:
            maps = ""
        for line in maps.splitlines():
            f = line.split()
            if len(f) >= 2 and f[1].startswith("rw") and f[1].endswith("p"):
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                regions.append((lo, hi, hits, 0))
        self.regions[i] = regions[:1000]
        super()._tried(i)


def main(argv: list[str]) -> int:
    """Install the fake kernel over ``argv[0]`` and run the exporter with the rest; return
    its exit status."""
    kernel = LiveFakeDamon(Path(argv[0]))
    kernel.install(pytest.MonkeyPatch())
    from numa_exporter.cli import main as exporter

    return exporter(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
