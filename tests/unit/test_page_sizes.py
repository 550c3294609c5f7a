"""Page-size probe (issue 14): pagemap and kpageflags entries, the hold a probe estimates,
the probe on a fixture root, and the planner's choice for huge-page-backed mappings."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from numa_exporter.model.cadence import CadencePolicy, ReadCosts, estimate_hold, plan, record_hold
from numa_exporter.model.page_sizes import MappingPages, PageShape, walk_hold
from numa_exporter.parsers.kpageflags import parse_kpageflags
from numa_exporter.parsers.pid_maps import parse_maps_range
from numa_exporter.parsers.pid_pagemap import parse_pid_pagemap
from numa_exporter.parsers.pid_pagemap_scan import parse_pagemap_scan
from numa_exporter.readers.page_sizes import probe_page_sizes
from numa_exporter.sources.deadline import Deadline, Expired
from numa_exporter.sources.errors import Gone
from numa_exporter.sources.procfs import ProcessFiles, ProcFS

GiB = 1 << 30
MiB = 1 << 20
PAGE = 4096
POLICY = CadencePolicy(full_interval=0.0, process_budget=0.5,
                       interval=1.0, hold_budget=0.005)
RATE_4K = 8.0e-3 / GiB  # the planner's default walk rate of 4 KiB pages, written out


# --- parsers --------------------------------------------------------------------------

def test_pagemap_entries_present_pfn_and_hidden_frames() -> None:
    present = (1 << 63) | 0x12345
    hidden = 1 << 63  # present, PFN zeroed for a reader without CAP_SYS_ADMIN
    swapped = (1 << 62) | 0x77
    got = parse_pid_pagemap(struct.pack("<3Q", present, hidden, swapped))
    assert got.error_count == 0
    a, b, c = got.entries
    assert (a.present, a.pfn) == (True, 0x12345)
    assert (b.present, b.pfn) == (True, None)
    assert (c.present, c.swapped, c.pfn) == (False, True, None)


def test_pagemap_partial_entry_is_counted_not_raised() -> None:
    got = parse_pid_pagemap(struct.pack("<Q", 1 << 63 | 5) + b"\x01\x02\x03")
    assert len(got.entries) == 1 and got.error_count == 1
    assert parse_pid_pagemap(b"").entries == ()


def test_kpageflags_tells_thp_and_hugetlb_from_small_pages() -> None:
    thp_head = (1 << 22) | (1 << 15)
    thp_tail = (1 << 22) | (1 << 16)
    hugetlb = (1 << 17) | (1 << 15)
    small = (1 << 5)  # KPF_LRU only
    got = parse_kpageflags(struct.pack("<4Q", thp_head, thp_tail, hugetlb, small) + b"\x00")
    assert [f.huge for f in got.entries] == [True, True, True, False]
    assert [f.thp for f in got.entries] == [True, True, False, False]
    assert got.entries[2].hugetlb and got.error_count == 1


def test_pagemap_scan_regions_tell_huge_present_pages() -> None:
    thp = struct.pack("<3Q", 0x40000000, 0x40001000, (1 << 6) | (1 << 3))  # HUGE|PRESENT
    small = struct.pack("<3Q", 0x50000000, 0x50001000, 1 << 3)
    empty = struct.pack("<3Q", 0x60001000, 0x60001000, 1 << 6)  # end <= start
    got = parse_pagemap_scan(thp + small + empty + b"\x00" * 5)
    assert [(r.start, r.present, r.huge) for r in got.regions] == [
        (0x40000000, True, True), (0x50000000, True, False)]
    assert got.error_count == 2


CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "page_sizes"


@pytest.mark.parametrize(("name", "huge"), [("thp", True), ("small", False)])
def test_real_captures_tell_thp_from_small_pages(name: str, huge: bool) -> None:
    entries = parse_pid_pagemap((CAPTURES / f"{name}.pagemap").read_bytes())
    assert entries.error_count == 0 and len(entries.entries) == 16
    assert all(e.present and e.pfn is not None for e in entries.entries)
    flags = parse_kpageflags((CAPTURES / f"{name}.kpageflags").read_bytes())
    assert [f.huge for f in flags.entries] == [huge] * 16
    assert [f.thp for f in flags.entries] == [huge] * 16
    regions = parse_pagemap_scan((CAPTURES / f"{name}.pagemap_scan").read_bytes())
    assert regions.error_count == 0
    assert [(r.present, r.huge, r.end - r.start) for r in regions.regions] == [
        (True, huge, PAGE)] * 16


def test_maps_range_is_total() -> None:
    assert parse_maps_range(b"7f00-7f10 rw-p 0 00:00 0\n") == (0x7F00, 0x7F10)
    for bad in (b"", b"zz-7f rw-p", b"7f10-7f00 rw-p 0 00:00 0", b"7f00-7f10", b"\xff" * 40):
        assert parse_maps_range(bad) is None


# --- the model ------------------------------------------------------------------------

def test_a_probed_thp_mapping_is_walked_a_step_per_2mib() -> None:
    thp = PageShape((MappingPages(4 * GiB, 64, 64),), rest=0, resident=4 * GiB)
    # 1/65 of 4 GiB at 8 ms/GiB (0.492 ms) + 64/65 of 2,048 PMD steps at 0.25 us (0.504 ms)
    assert walk_hold(thp, 4 * GiB, RATE_4K) == pytest.approx(0.996e-3, rel=1e-3)
    small = PageShape((MappingPages(4 * GiB, 64, 0),), rest=0, resident=4 * GiB)
    assert walk_hold(small, 4 * GiB, RATE_4K) == pytest.approx(32e-3)
    # the largest mapping not probed counts at the 4 KiB rate, capped by resident bytes
    rest = PageShape((MappingPages(4 * GiB, 64, 64),), rest=2 * GiB, resident=4 * GiB)
    assert walk_hold(rest, 4 * GiB, RATE_4K) == pytest.approx(16e-3)
    assert walk_hold(rest, GiB // 2, RATE_4K) == pytest.approx(4e-3)


def test_hostile_probe_counts_stay_within_bounds() -> None:
    for m in (MappingPages(GiB, 0, 0), MappingPages(GiB, 3, 99), MappingPages(-5, -1, -1)):
        assert 0.0 <= m.small_share() <= 1.0
        hold = walk_hold(PageShape((m,)), GiB, RATE_4K)
        assert 0.0 <= hold <= 8e-3 + 1e-12


def test_a_probe_goes_stale_with_size_and_age() -> None:
    shape = PageShape(resident=4 * GiB, taken=100.0)
    assert shape.fresh(4 * GiB, 150.0)
    assert not shape.fresh(7 * GiB, 150.0)
    assert not shape.fresh(4 * GiB, 100.0 + 301.0)
    assert not shape.fresh(4 * GiB, 99.0)  # a clock that went back: probe again


# --- the planner ----------------------------------------------------------------------

def _plan(resident: int, costs: ReadCosts | None = None) -> tuple[str, str]:
    p = plan(POLICY, now=1000.0, resident_bytes=resident, seconds_per_byte=None,
             next_due=0.0, last_full=0.0, sampling=True, costs=costs)
    return p.method, p.reason


THP_4G = PageShape((MappingPages(4 * GiB, 64, 64),), rest=2 * MiB, resident=4 * GiB,
                   taken=999.0)
SMALL_4G = PageShape((MappingPages(4 * GiB, 64, 0),), rest=2 * MiB, resident=4 * GiB,
                     taken=999.0)


def test_a_thp_target_gets_the_full_read_and_4k_targets_stay_sampled() -> None:
    # before the probe: all of 4 GiB at the 4 KiB rate (32 ms) is over the 5 ms budget
    assert _plan(4 * GiB) == ("sampled", "hold")
    known = ReadCosts(largest_mapping=4 * GiB, maps_resident=4 * GiB)
    assert _plan(4 * GiB, known) == ("sampled", "hold")
    # with the probe: the THP mapping holds the lock ~1 ms, the 4 KiB one 32 ms
    assert _plan(4 * GiB, ReadCosts(pages=THP_4G)) == ("full", "cheaper")
    assert _plan(4 * GiB, ReadCosts(largest_mapping=4 * GiB, maps_resident=4 * GiB,
                                    pages=THP_4G)) == ("full", "cheaper")
    assert _plan(4 * GiB, ReadCosts(pages=SMALL_4G)) == ("sampled", "hold")
    sixteen = PageShape((MappingPages(16 * GiB, 64, 0),), resident=16 * GiB, taken=999.0)
    assert _plan(16 * GiB, ReadCosts(pages=sixteen)) == ("sampled", "hold")


def test_a_measured_hold_overrides_the_probe() -> None:
    # the probe said huge, but the walk measured 30 ms twice (say, PTE-mapped huge pages)
    costs = record_hold(record_hold(ReadCosts(pages=THP_4G, full_resident=4 * GiB), 0.030),
                        0.031)
    assert _plan(4 * GiB, costs) == ("sampled", "hold")
    # and a measured small hold stands for a process the probe could not see
    seen = record_hold(ReadCosts(pages=SMALL_4G, full_resident=4 * GiB), 0.001)
    assert estimate_hold(seen, 4 * GiB, None) == 0.001


def test_one_noisy_hold_does_not_flip_a_thp_target_to_sampling() -> None:
    base = ReadCosts(pages=THP_4G, full_resident=4 * GiB, full_cpu=0.002)
    # one full read measured at 6 ms (noise) against a probe that says ~1 ms: read in full
    # again to confirm, rather than sample for good
    once = record_hold(base, 0.006)
    assert once.hold == 0.006
    assert _plan(4 * GiB, once) == ("full", "cheaper")
    # the next read measured 0.8 ms: the lower median of the two stands under the budget
    twice = record_hold(once, 0.0008)
    assert twice.hold == 0.0008 and _plan(4 * GiB, twice) == ("full", "cheaper")
    # one outlier in three reads is outvoted; two of three over the budget decide
    steady = record_hold(record_hold(twice, 0.0009), 0.0061)
    assert steady.holds == (0.0008, 0.0009, 0.0061) and _plan(4 * GiB, steady)[0] == "full"
    over = record_hold(steady, 0.0062)
    assert over.holds == (0.0009, 0.0061, 0.0062)
    assert _plan(4 * GiB, over) == ("sampled", "hold")


# --- the probe on a fixture root ------------------------------------------------------

BIG = (0x40000000, 0x40000000 + 64 * MiB)
SMALLMAP = (0x10000000, 0x10000000 + 8 * MiB)


def _root(tmp_path: Path, *, huge_pfn: int = 0x1000, small_pfn: int = 0x9000,
          pfn_hidden: bool = False, kpageflags: bool = True, pagemap: bytes | None = None
          ) -> tuple[ProcFS, int]:
    """Return a procfs root with one process: a 64 MiB mapping whose every page is a THP
    frame and an 8 MiB mapping of small pages (pagemap and kpageflags as sparse files)."""
    pid = 4242
    d = tmp_path / str(pid)
    d.mkdir()
    (d / "maps").write_bytes(
        f"{SMALLMAP[0]:x}-{SMALLMAP[1]:x} rw-p 00000000 00:00 0\n".encode()
        + b"this line is not a mapping \xff\n"
        + f"{BIG[0]:x}-{BIG[1]:x} rw-p 00000000 00:00 0    [heap]\n".encode())
    with open(d / "pagemap", "wb") as fh:
        if pagemap is not None:
            fh.write(pagemap)
        else:
            for (start, end), pfn in ((BIG, huge_pfn), (SMALLMAP, small_pfn)):
                fh.seek(start // PAGE * 8)
                entry = (1 << 63) | (0 if pfn_hidden else pfn)
                fh.write(struct.pack("<Q", entry) * ((end - start) // PAGE))
    if kpageflags:
        with open(tmp_path / "kpageflags", "wb") as fh:
            fh.seek(huge_pfn * 8)
            fh.write(struct.pack("<Q", (1 << 22) | (1 << 16)))
            fh.seek(small_pfn * 8)
            fh.write(struct.pack("<Q", 1 << 5))
    return ProcFS(tmp_path), pid


def test_the_probe_finds_the_huge_mapping_and_the_small_one(tmp_path: Path) -> None:
    proc, pid = _root(tmp_path)
    shape, problem = probe_page_sizes(proc.process(pid), proc, 72 * MiB, 5.0,
                                      page_size=PAGE, rng=random.Random(1))
    assert problem is None
    assert shape.errors == 1  # the malformed maps line
    big, small = shape.mappings
    assert (big.size, big.huge) == (64 * MiB, big.probes) and big.probes >= 8
    assert (small.size, small.huge) == (8 * MiB, 0) and small.probes >= 8
    assert (shape.rest, shape.resident, shape.taken) == (0, 72 * MiB, 5.0)


def test_without_cap_sys_admin_every_page_counts_small(tmp_path: Path) -> None:
    proc, pid = _root(tmp_path, pfn_hidden=True)
    shape, problem = probe_page_sizes(proc.process(pid), proc, 72 * MiB, 5.0, page_size=PAGE)
    assert problem is not None and "CAP_SYS_ADMIN" in str(problem)
    assert all(m.huge == 0 for m in shape.mappings)


def test_a_missing_kpageflags_is_a_reason_not_a_gone_process(tmp_path: Path) -> None:
    proc, pid = _root(tmp_path, kpageflags=False)
    shape, problem = probe_page_sizes(proc.process(pid), proc, 72 * MiB, 5.0, page_size=PAGE)
    assert isinstance(problem, Gone) and all(m.huge == 0 for m in shape.mappings)


def test_a_short_or_hostile_pagemap_is_counted(tmp_path: Path) -> None:
    # pagemap ends before any probed page: every probe is a short read, counted small
    proc, pid = _root(tmp_path, pagemap=b"\xff" * 12)
    shape, problem = probe_page_sizes(proc.process(pid), proc, 72 * MiB, 5.0, page_size=PAGE)
    assert problem is None and all(m.huge == 0 for m in shape.mappings)
    assert shape.errors == 1 + sum(m.probes for m in shape.mappings)


def test_pagemap_scan_is_preferred_where_the_kernel_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # frames hidden (no CAP_SYS_ADMIN) and no kpageflags: the ioctl's categories still
    # tell the huge mapping from the small one
    proc, pid = _root(tmp_path, pfn_hidden=True, kpageflags=False)
    asked: list[int] = []

    def scan(self: object, pages: list[int], page_size: int) -> list[bytes]:
        asked.extend(pages)
        return [struct.pack("<3Q", p * page_size, (p + 1) * page_size,
                            (1 << 3) | (1 << 6 if BIG[0] <= p * page_size < BIG[1] else 0))
                for p in pages]

    monkeypatch.setattr(ProcessFiles, "pagemap_scan", scan)
    shape, problem = probe_page_sizes(proc.process(pid), proc, 72 * MiB, 5.0, page_size=PAGE)
    assert problem is None and shape.errors == 1  # the malformed maps line
    big, small = shape.mappings
    assert big.huge == big.probes and small.huge == 0
    assert len(asked) == big.probes + small.probes


def test_a_gone_process_raises_gone(tmp_path: Path) -> None:
    proc = ProcFS(tmp_path)
    with pytest.raises(Gone):
        probe_page_sizes(proc.process(999), proc, GiB, 0.0, page_size=PAGE)


def test_the_maps_walk_honours_its_deadline_and_its_line_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numa_exporter.readers.page_sizes as ps

    proc, pid = _root(tmp_path)
    lines = b"".join(f"{0x1000 * (2 * i + 1):x}-{0x1000 * (2 * i + 2):x} rw-p 0 00:00 0\n"
                     .encode() for i in range(300))
    (tmp_path / str(pid) / "maps").write_bytes(lines)
    monkeypatch.setattr(ps, "CHECK_EVERY", 100)
    calls: list[int] = []

    def clock() -> float:  # the deadline passes at the second look
        calls.append(1)
        return float(len(calls))

    with pytest.raises(Expired):  # given up at the second look: 200 lines read, not 300
        probe_page_sizes(proc.process(pid), proc, GiB, 0.0, page_size=PAGE,
                         deadline=Deadline(2.0, clock=clock))
    # past MAX_LINES the probe stops reading and what it did not see counts as one
    # mapping of all resident bytes (the estimate without a probe)
    monkeypatch.setattr(ps, "MAX_LINES", 50)
    shape, _ = probe_page_sizes(proc.process(pid), proc, GiB, 0.0, page_size=PAGE)
    assert shape.rest == GiB and len(shape.mappings) == ps.TOP_MAPPINGS
    assert walk_hold(shape, GiB, RATE_4K) == pytest.approx(8e-3)
