"""``parse_pid_status`` finds the lines it uses by one regular expression (issue 34: its
per-line loop was most of a kept process's selection cost); it must read what a
line-by-line reading of the file reads, on every status file of the fixtures and on
hostile variants."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.pid_status import parse_pid_status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEYS = ("Tgid", "Uid", "Threads", "VmRSS", "RssAnon", "RssFile", "RssShmem", "HugetlbPages",
        "Cpus_allowed_list", "Mems_allowed_list", "Kthread")


def by_lines(data: bytes) -> dict[str, str]:
    """Return the used keys' values as a plain line-by-line reading gives them."""
    out: dict[str, str] = {}
    for raw in data.split(b"\n"):
        text = raw.decode("utf-8", "replace").strip(" \t\r\f\v")
        key, sep, val = text.partition(":")
        if sep and key in KEYS:
            out[key] = val.strip()
    return out


def rebuilt(fields: dict[str, str]) -> bytes:
    """Return a status file of just these fields."""
    return "".join(f"{k}:\t{v}\n" for k, v in fields.items()).encode()


def same(data: bytes) -> bool:
    """Return whether ``data`` parses as the file of its line-by-line fields does (the
    name is parsed on its own: not compared)."""
    return (replace(parse_pid_status(data), name="")
            == replace(parse_pid_status(rebuilt(by_lines(data))), name=""))


def test_every_fixture_status_reads_as_line_by_line() -> None:
    files = sorted(FIXTURES.rglob("status"))
    assert len(files) > 50
    for path in files:
        data = path.read_bytes()
        assert same(data), path


@settings(max_examples=300)
@given(lines=st.lists(st.tuples(st.sampled_from((*KEYS, "Name", "VmSize", "Rss", "x")),
                                st.sampled_from(("", " ", "\t", "\r")),
                                st.text(max_size=30)), max_size=20))
def test_hostile_status_reads_as_line_by_line(lines: list[tuple[str, str, str]]) -> None:
    data = "".join(f"{lead}{k}:{v}\n" for k, lead, v in lines).encode("utf-8", "replace")
    assert same(data)
