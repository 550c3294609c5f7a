"""label_text: any bytes become valid UTF-8 text without control characters, bounded, and
different names never become the same label value (issue 15 #6)."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.text import MAX_LABEL_CHARS, label_text, safe_text


def marked(shown: str, raw: bytes) -> str:
    """The label a changed name gets: its escaped text, "~#" and 80 bits of BLAKE2b."""
    return shown + "~#" + hashlib.blake2b(raw, digest_size=10).hexdigest()


def test_undecodable_bytes_become_escapes() -> None:
    assert label_text(b"bad\xff\xfe") == marked("bad\\xff\\xfe", b"bad\xff\xfe")


def test_surrogateescape_string_gives_the_same_text_as_its_bytes() -> None:
    s = b"bad\xff\xfe".decode("utf-8", "surrogateescape")
    assert label_text(s) == label_text(b"bad\xff\xfe")


def test_valid_utf8_is_kept() -> None:
    assert label_text("réplica-ü".encode()) == "réplica-ü"
    assert label_text(b"python3") == "python3"
    assert label_text(b"/system.slice/system-systemd\\x2dfsck.slice") == (
        "/system.slice/system-systemd\\x2dfsck.slice")  # systemd's own escapes are text


def test_control_characters_are_escaped_not_dropped() -> None:
    raw = b"a\nb\tc\x00d\x7fe\xc2\x85f"
    assert label_text(raw) == marked("a\\x0ab\\x09c\\x00d\\x7fe\\u0085f", raw)


def test_other_lone_surrogates_are_escaped() -> None:
    assert label_text("x\ud800y") == marked("x\\ud800y", "x\ud800y".encode("utf-8",
                                                                        "surrogatepass"))


def test_length_is_bounded_and_escapes_are_never_cut() -> None:
    assert len(label_text(b"a" * 5000)) == 512
    assert label_text(b"a" * 5000) == marked("a" * 490, b"a" * 5000)
    # 30 characters: 8 of text and the 22 of the mark; "\xff" is 4 characters, never cut
    assert label_text(b"abcdefg\xff", limit=30) == marked("abcdefg", b"abcdefg\xff")
    assert label_text(b"abcd\xff", limit=30) == marked("abcd\\xff", b"abcd\xff")


COLLIDING = [
    (b"/rt\x01dup", b"/rt\x02dup"),  # dropped controls made both "/rtdup"
    (b"/rt\x01dup", b"/rt\x7fdup"),
    (b"/rt\x01dup", b"/rtdup"),
    (b"/rt\\x01dup", b"/rt\x01dup"),  # the escape's text typed literally vs the byte
    (b"bad\\xff", b"bad\xff"),
    (b"x" * 600 + b"a", b"x" * 600 + b"b"),  # cut at the same length
    (b"x" * 489 + b"~#", b"x" * 489 + b"~#~"),
    (b"\xc2\x85", b"\x85"),  # C1 code point vs undecodable byte
]


def test_names_that_cleaning_merged_stay_apart() -> None:
    for a, b in COLLIDING:
        assert label_text(a) != label_text(b), (a, b)


def test_a_name_cannot_be_chosen_to_equal_a_marked_one() -> None:
    victim = b"/rt\x01dup"
    forged = label_text(victim).encode()  # the victim's label, typed as a name
    assert label_text(forged) != label_text(victim)


def test_safe_text_escapes_and_has_no_length_bound() -> None:
    long = "x" * 2000 + "\udcff\x1b"
    assert safe_text(long) == "x" * 2000 + "\\xff\\x1b"


@settings(deadline=None)  # a loaded host must not fail it on time
@given(st.binary(max_size=1200))
def test_any_bytes_encode_as_utf8(raw: bytes) -> None:
    out = label_text(raw)
    out.encode("utf-8")  # raises on a surrogate
    assert len(out) <= MAX_LABEL_CHARS
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in out)


@settings(deadline=None)  # a loaded host must not fail it on time
@given(st.binary(max_size=700), st.binary(max_size=700))
def test_different_bytes_give_different_labels(a: bytes, b: bytes) -> None:
    if a != b:
        assert label_text(a) != label_text(b)


@settings(deadline=None)  # a loaded host must not fail it on time
@given(st.text(max_size=300))
def test_any_text_encodes_as_utf8(text: str) -> None:
    label_text(text).encode("utf-8")
    safe_text(text).encode("utf-8")
