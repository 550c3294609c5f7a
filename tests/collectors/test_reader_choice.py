"""The reader each process gets, on a fixture root: sampled only while one read() of its
numa_maps would hold the mmap lock past --placement.hold-budget (issue 14)."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from tests.conftest import ROOTS, fixture_config

from numa_exporter.model.process_state import ProcessKey
from numa_exporter.model.sampling import PlacementEstimate
from numa_exporter.parsers.numa_maps import Kind
from numa_exporter.parsers.pid_status import PidStatus
from numa_exporter.readers.sampled.reader import SampledRequest
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.procfs import ProcessFiles

GiB = 1 << 30


class FakeSampled:
    """A sampled reader that counts its calls and says how big the largest mapping is."""

    def __init__(self, largest: int, burn: float = 0.0) -> None:
        self.largest = largest
        self.burn = burn  # CPU seconds each call spends, as a real sampled read does
        self.calls = 0
        self.max_queries: list[int | None] = []

    def __call__(self, files: ProcessFiles, status: PidStatus,
                 request: SampledRequest | None = None) -> PlacementEstimate:
        self.calls += 1
        self.max_queries.append(request.max_queries if request is not None else None)
        end = time.thread_time() + self.burn
        while time.thread_time() < end:
            pass
        return PlacementEstimate(bytes={(0, Kind.ANON): 4 * GiB}, samples=100,
                                 resident_samples=100, largest_mapping=self.largest,
                                 mappings=2)

    def retain(self, keys: Iterable[ProcessKey]) -> None:
        """Keep nothing: a fake has no state."""


@pytest.fixture
def big_root(tmp_path: Path) -> Path:
    """Return a copy of two_node whose process 300 has 4 GiB resident."""
    root = tmp_path / "root"
    shutil.copytree(ROOTS / "two_node", root, symlinks=True)
    status = root / "proc" / "300" / "status"
    text = status.read_text()
    text = re.sub(r"VmRSS:\s+\d+ kB", f"VmRSS:\t{4 * GiB // 1024} kB", text)
    text = re.sub(r"RssAnon:\s+\d+ kB", f"RssAnon:\t{4 * GiB // 1024} kB", text)
    status.unlink()
    status.write_text(text)
    return root


def _scanner(root: Path, sampled: FakeSampled, **kw: object) -> Scanner:
    # the reader chosen by lock hold and cost alone: no full reads for memory policies
    # (test_sampled_policies.py covers those)
    kw.setdefault("policy_interval", 0.0)
    cfg = fixture_config(root,
                         include=re.compile("^splitter$"), **kw)
    return Scanner(cfg, sampled=sampled)


def _methods(scanner: Scanner, scans: int) -> list[str]:
    out = []
    for _ in range(scans):
        (p,) = scanner.scan().processes
        out.append(p.method)
    return out


def test_small_mappings_are_read_in_full_after_maps_shows_them(big_root: Path) -> None:
    # nothing known at first: all 4 GiB might be one mapping, so it is sampled once; maps
    # shows no mapping above 1 MiB, so every read after that is full, and the measured
    # longest read() keeps it so (the old rule sampled it every scan: 32 ms estimated)
    sampled = FakeSampled(largest=1 << 20, burn=0.02)
    scanner = _scanner(big_root, sampled)
    assert _methods(scanner, 5) == ["sampled", "full", "full", "full", "full"]
    assert sampled.calls == 1
    (p,) = scanner.scan().processes
    assert p.placement_reason == "cheaper"
    assert p.full_read_cpu is not None and p.sampled_read_cpu is not None
    assert p.hold_seconds is not None and p.hold_seconds < 0.005


def test_one_big_mapping_stays_sampled_with_a_bounded_query_count(big_root: Path) -> None:
    sampled = FakeSampled(largest=4 * GiB)
    scanner = _scanner(big_root, sampled)
    assert _methods(scanner, 4) == ["sampled"] * 4
    (p,) = scanner.scan().processes
    assert p.placement_reason == "hold"
    # sized to what the full read is estimated to cost (32 ms), at no less than 0.1875 us
    # a query (a quarter of the unmeasured 0.75 us) however cheap this fake measures; never
    # the 615,000 of the old fixed budget
    assert all(q is not None and 256 <= q <= 0.032 / 0.1875e-6 for q in sampled.max_queries)


def test_sampling_off_reads_in_full(big_root: Path) -> None:
    sampled = FakeSampled(largest=4 * GiB)
    scanner = _scanner(big_root, sampled, sampling=False)
    assert _methods(scanner, 2) == ["full", "full"]
    assert sampled.calls == 0
