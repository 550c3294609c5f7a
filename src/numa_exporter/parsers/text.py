"""Text taken from the kernel (comm, cgroup paths, device names) made safe to show.

Everything under /proc and /sys is attacker-controlled: a process can name itself with any
bytes (``prctl(PR_SET_NAME)``), a delegated cgroup can have any name. Such text ends up in
label values, log lines and ``inspect`` output, which must be valid UTF-8 with no control
characters and of bounded length. :func:`label_text` is the one place that makes a label
value of it, for every label that identifies something (comm, cgroup paths, device names,
and any name to come); it is applied once, where the raw value becomes a label:

* bytes that are not UTF-8 become ``\\xNN`` (as Python's ``backslashreplace`` writes them);
  a ``str`` decoded with ``surrogateescape`` gets the same treatment for its escaped bytes,
  so the bytes and the decoded string of the same name give the same text;
* control characters are escaped, not dropped: C0 and DEL as ``\\xNN``, C1 as ``\\u00NN``;
* the result is at most :data:`MAX_LABEL_CHARS` characters, never cut inside an escape;
* it is **injective**: two different names never give the same label value, so a name that
  can be chosen cannot merge or hide another's series. Text that needed no change is
  returned as it is; text that was escaped or cut (or that contains :data:`HASH_MARK`, so
  that no name can be chosen to look like a marked one) gets ``HASH_MARK`` and 80 bits of a
  BLAKE2b hash of the raw bytes appended: ``rt\\x01dup~#0f1e...``. Forging a collision
  means finding a second preimage of that hash.

:func:`safe_text` is the same escaping without the mark or the bound, for log values.
"""

from __future__ import annotations

import hashlib

MAX_LABEL_CHARS = 512  # longest real cgroup paths (Kubernetes pods) are ~200 characters
MAX_INPUT_BYTES = 64 * 1024  # escaping looks at this much input at most (the hash at all)
HASH_MARK = "~#"  # precedes the hash of a value that was changed
HASH_BYTES = 10  # 80 bits


def _is_control(cp: int) -> bool:
    return cp < 0x20 or 0x7F <= cp < 0xA0


def _escape_char(ch: str) -> str:
    """Return ``ch`` as it appears in safe text: itself or an escape."""
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:  # an undecodable byte carried by surrogateescape
        return f"\\x{cp - 0xDC00:02x}"
    if 0xD800 <= cp <= 0xDFFF:  # any other lone surrogate cannot be encoded as UTF-8
        return f"\\u{cp:04x}"
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    if 0x80 <= cp < 0xA0:  # C1: a code point, told apart from an undecodable byte
        return f"\\u{cp:04x}"
    return ch


def _raw_bytes(raw: bytes | str) -> bytes:
    """Return the bytes a name was decoded from (``surrogateescape`` undone)."""
    if isinstance(raw, bytes):
        return raw
    try:
        return raw.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # lone surrogates that were not undecodable bytes
        return raw.encode("utf-8", "surrogatepass")


def label_text(raw: bytes | str, limit: int = MAX_LABEL_CHARS) -> str:
    """Return ``raw`` as a label value: valid UTF-8, no control characters, at most
    ``limit`` characters (``limit`` is at least the 22 characters of the hash mark), and
    different for every different ``raw`` (see the module).

    Undecodable bytes (or their surrogateescape stand-ins in a ``str``) become ``\\xNN``.
    """
    if isinstance(raw, bytes):
        text = raw[:MAX_INPUT_BYTES].decode("utf-8", "surrogateescape")
    else:
        text = raw[:MAX_INPUT_BYTES]
    if len(text) <= limit and HASH_MARK not in text and (
            (text.isascii() and text.isprintable())
            or all(_escape_char(ch) == ch for ch in text)):
        return text  # nothing to change: the name itself
    digest = hashlib.blake2b(_raw_bytes(raw), digest_size=HASH_BYTES).hexdigest()
    suffix = HASH_MARK + digest
    room = max(limit - len(suffix), 0)
    out: list[str] = []
    size = 0
    for ch in text:
        piece = _escape_char(ch)
        if size + len(piece) > room:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + suffix


def safe_text(text: str) -> str:
    """Return ``text`` with undecodable bytes and control characters escaped (for logs).

    The same escaping as :func:`label_text` without the hash mark or the length bound.
    """
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape_char(ch) for ch in text)
