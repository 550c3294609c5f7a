"""Text taken from the kernel (comm, cgroup paths, device names) made safe to show.

Everything under /proc and /sys is attacker-controlled: a process can name itself with any
bytes (``prctl(PR_SET_NAME)``), a delegated cgroup can have any name. Such text ends up in
label values, log lines and ``inspect`` output, which must be valid UTF-8 with no control
characters and of bounded length. :func:`label_text` is the one place that makes it so:

* bytes that are not UTF-8 become ``\\xNN`` (as Python's ``backslashreplace`` writes them);
  a ``str`` decoded with ``surrogateescape`` gets the same treatment for its escaped bytes,
  so the bytes and the decoded string of the same name give the same text;
* control characters (C0, DEL, C1) are dropped;
* the result is cut to :data:`MAX_LABEL_CHARS` characters, never inside an escape.

The function is idempotent: text it returned comes back unchanged.
"""

from __future__ import annotations

MAX_LABEL_CHARS = 512  # longest real cgroup paths (Kubernetes pods) are ~200 characters
MAX_INPUT_BYTES = 64 * 1024  # work is bounded by this much input, whatever the caller passes


def _is_control(cp: int) -> bool:
    return cp < 0x20 or 0x7F <= cp < 0xA0


def _escape_char(ch: str) -> str:
    """Return ``ch`` as it appears in safe text: itself, an escape, or '' for a control."""
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:  # an undecodable byte carried by surrogateescape
        return f"\\x{cp - 0xDC00:02x}"
    if 0xD800 <= cp <= 0xDFFF:  # any other lone surrogate cannot be encoded as UTF-8
        return f"\\u{cp:04x}"
    if _is_control(cp):
        return ""
    return ch


def label_text(raw: bytes | str, limit: int = MAX_LABEL_CHARS) -> str:
    """Return ``raw`` as valid UTF-8 text without control characters, at most ``limit`` long.

    Undecodable bytes (or their surrogateescape stand-ins in a ``str``) become ``\\xNN``.
    """
    if isinstance(raw, bytes):
        text = raw[:MAX_INPUT_BYTES].decode("utf-8", "surrogateescape")
    else:
        text = raw[:MAX_INPUT_BYTES]
    if text.isascii() and text.isprintable():  # the common case: nothing to escape
        return text[:limit]
    out: list[str] = []
    size = 0
    for ch in text:
        piece = _escape_char(ch)
        if size + len(piece) > limit:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def safe_text(text: str) -> str:
    """Return ``text`` with undecodable bytes escaped and control characters dropped.

    The same escaping as :func:`label_text` without the length bound (for log values).
    """
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape_char(ch) for ch in text)
