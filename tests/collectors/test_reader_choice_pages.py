"""The reader chosen for a process whose big mapping is backed by huge pages, on a fixture
root with pagemap and kpageflags (issue 14): a THP-backed 4 GiB mapping is walked in 2,048
steps, so its full read is kept; the same mapping of 4 KiB pages stays sampled."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.collectors.test_reader_choice import FakeSampled, _methods, _scanner, big_root

GiB = 1 << 30
PAGE = 4096
START = 1 << 32  # the mapping's first address
PFN = 0x1000
__all__ = ["big_root"]  # the fixture, used by name


def _pages(root: Path, flags: int) -> None:
    """Give process 300 one 4 GiB mapping whose pages all map frame PFN of ``flags``."""
    d = root / "proc" / "300"
    (d / "maps").write_text(f"{START:x}-{START + 4 * GiB:x} rw-p 00000000 00:00 0\n"
                            "7ffd0000-7ffd1000 rw-p 00000000 00:00 0    [stack]\n")
    with open(d / "pagemap", "wb") as fh:
        fh.seek(START // PAGE * 8)
        fh.write(struct.pack("<Q", (1 << 63) | PFN) * (4 * GiB // PAGE))
    with open(root / "proc" / "kpageflags", "wb") as fh:
        fh.seek(PFN * 8)
        fh.write(struct.pack("<Q", flags))


def test_a_thp_mapping_keeps_the_full_read_from_the_first_scan(big_root: Path) -> None:
    _pages(big_root, (1 << 22) | (1 << 16))  # KPF_THP | KPF_COMPOUND_TAIL
    sampled = FakeSampled(largest=4 * GiB)
    scanner = _scanner(big_root, sampled)
    # before the probe the 4 GiB counted as 4 KiB pages (32 ms) and was sampled for good
    assert _methods(scanner, 3) == ["full"] * 3
    assert sampled.calls == 0
    (p,) = scanner.scan().processes
    assert p.placement_reason == "cheaper"


def test_the_same_mapping_of_small_pages_stays_sampled(big_root: Path) -> None:
    _pages(big_root, 1 << 5)  # KPF_LRU: a 4 KiB page
    sampled = FakeSampled(largest=4 * GiB)
    scanner = _scanner(big_root, sampled)
    assert _methods(scanner, 3) == ["sampled"] * 3
    (p,) = scanner.scan().processes
    assert p.placement_reason == "hold"
    assert p.hold_seconds is not None and p.hold_seconds > 0.005
