"""label_text: any bytes become valid UTF-8 text without control characters, bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from numa_exporter.parsers.text import MAX_LABEL_CHARS, label_text, safe_text


def test_undecodable_bytes_become_escapes() -> None:
    assert label_text(b"bad\xff\xfe") == "bad\\xff\\xfe"


def test_surrogateescape_string_gives_the_same_text_as_its_bytes() -> None:
    s = b"bad\xff\xfe".decode("utf-8", "surrogateescape")
    assert label_text(s) == "bad\\xff\\xfe"


def test_valid_utf8_is_kept() -> None:
    assert label_text("réplica-ü".encode()) == "réplica-ü"
    assert label_text(b"python3") == "python3"


def test_control_characters_are_dropped() -> None:
    assert label_text(b"a\nb\tc\x00d\x7fe\xc2\x85f") == "abcdef"


def test_other_lone_surrogates_are_escaped() -> None:
    assert label_text("x\ud800y") == "x\\ud800y"


def test_length_is_bounded_and_escapes_are_never_cut() -> None:
    assert len(label_text(b"a" * 5000)) == 512
    assert label_text(b"ab\xff", limit=5) == "ab"  # "\xff" is 4 characters: not cut
    assert label_text(b"ab\xff", limit=6) == "ab\\xff"


def test_safe_text_has_no_length_bound() -> None:
    long = "x" * 2000 + "\udcff"
    assert safe_text(long) == "x" * 2000 + "\\xff"


@given(st.binary(max_size=1200))
def test_any_bytes_encode_as_utf8(raw: bytes) -> None:
    out = label_text(raw)
    out.encode("utf-8")  # raises on a surrogate
    assert len(out) <= MAX_LABEL_CHARS
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in out)
    assert label_text(out) == out


@given(st.text(max_size=300))
def test_any_text_encodes_as_utf8(text: str) -> None:
    label_text(text).encode("utf-8")
    safe_text(text).encode("utf-8")
