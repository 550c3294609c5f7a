"""Per-node reclaim counters (Linux 7.1+: pgscan_*, pgsteal_*, pgrefill in node<N>/vmstat)
next to the per-node memory families, on the captures of Debian's 7.3 and 5.10 (issue 35).

The expected values are read off the captured files with a regex written from the kernel's
``"%s %lu\\n"`` format, not through the exporter's parser.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from tests.conftest import fixture_config
from tests.e2e.exposition import values

from numa_exporter.collectors.snapshot import SnapshotCollector
from numa_exporter.scan.scanner import Scanner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _scrape(root: Path) -> str:
    cfg = fixture_config(root)
    snap = Scanner(cfg).scan()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: snap, cfg))
    return generate_latest(reg).decode()


def _file(root: Path, node: int) -> dict[str, int]:
    text = (root / f"sys/devices/system/node/node{node}/vmstat").read_text()
    return {k: int(v) for k, v in re.findall(r"^(\w+) (\d+)$", text, re.M)}


def _distinct(src: Path, dest: Path) -> Path:
    """Return a copy of the root ``src`` whose node vmstat reclaim lines (all 0 in an idle
    guest) carry distinct values, so that a field read in the wrong place shows."""
    shutil.copytree(src, dest)
    for node in (0, 1):
        path = dest / f"sys/devices/system/node/node{node}/vmstat"
        lines = path.read_text().splitlines()
        out = [f"{k} {1000 * (node + 1) + i}" if k.startswith(("pgscan_", "pgsteal_", "pgrefill"))
               else f"{k} {v}" for i, (k, v) in enumerate(line.split() for line in lines)]
        path.write_text("\n".join(out) + "\n")
    return dest


def test_73_exports_each_nodes_reclaim_counters_by_reclaimer(tmp_path: Path) -> None:
    root = _distinct(FIXTURES / "realkernel-7.3" / "balancing_on", tmp_path / "root")
    text = _scrape(root)
    for node in (0, 1):
        f = _file(root, node)
        for reclaimer in ("kswapd", "direct", "khugepaged", "proactive"):
            assert values(text, "numa_node_reclaim_scanned_pages_total", node=str(node),
                          reclaimer=reclaimer) == [({"node": str(node), "reclaimer": reclaimer},
                                                    float(f[f"pgscan_{reclaimer}"]))]
            assert values(text, "numa_node_reclaimed_pages_total", node=str(node),
                          reclaimer=reclaimer)[0][1] == float(f[f"pgsteal_{reclaimer}"])
        assert values(text, "numa_node_reclaim_refill_pages_total",
                      node=str(node))[0][1] == float(f["pgrefill"])
    # the anon/file split of the same scans is not a reclaimer: not exported
    assert not [lv for lv, _ in values(text, "numa_node_reclaim_scanned_pages_total")
                if lv["reclaimer"] not in ("kswapd", "direct", "khugepaged", "proactive")]


def test_510_has_no_node_reclaim_families() -> None:
    text = _scrape(FIXTURES / "realkernel-5.10" / "balancing_on")
    for name in ("numa_node_reclaim_scanned_pages_total", "numa_node_reclaimed_pages_total",
                 "numa_node_reclaim_refill_pages_total"):
        assert name not in text
    assert values(text, "numa_node_memory_bytes")  # the node families are there
