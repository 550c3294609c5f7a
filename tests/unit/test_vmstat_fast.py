"""vmstat-format files in the kernel's own format are read in two C calls (issue 14)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.vmstat import _parse_lines, parse_vmstat


@given(st.lists(st.sampled_from([b"numa_hit", b"pgmigrate_success", b"a", b"x-y", b" ", b"\t",
                                 b"\n", b"0", b"42", b"9" * 24, b"9" * 25, b"-1", b"\xff",
                                 b"\r"]), max_size=30).map(b"".join))
@settings(max_examples=3000)
def test_vmstat_fast_path_reads_as_the_line_loop(data: bytes) -> None:
    assert parse_vmstat(data) == _parse_lines(data)


def test_vmstat_fast_path_takes_the_kernel_format() -> None:
    raw = b"nr_free_pages 12\nnuma_hit 3\nnuma_hit 4\n"
    assert parse_vmstat(raw).values == {"nr_free_pages": 12, "numa_hit": 4}
    assert parse_vmstat(b"numa_hit 3\nnuma_miss x\n").error_count == 1
