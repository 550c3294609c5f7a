"""Process-matching regular expressions in linear time (RE2).

``--process.include``, ``--process.exclude`` and the config file's ``match =`` run against
command lines that any local user controls. Python's ``re`` backtracks: ``(a+)+$`` against
``'a' * 40 + '!'`` runs for hours while holding the GIL, which freezes scans, ``/metrics``
and signal handling. RE2 matches in time linear in the text, and its syntax is the one
Prometheus uses for relabelling; it has no backreferences and no lookaround.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import re2

MAX_TEXT = 4096  # characters of a comm/cmdline that a pattern sees
MAX_PATTERN = 4096  # characters of a pattern itself
_MAX_MEM = 8 << 20  # bytes RE2 may spend on one compiled program

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print to stderr; the error is reported by the caller
_OPTIONS.max_mem = _MAX_MEM

_UNSUPPORTED = (
    ("(?=", "lookahead is"), ("(?!", "lookahead is"), ("(?<=", "lookbehind is"),
    ("(?<!", "lookbehind is"), ("(?>", "atomic groups are"), ("(?P=", "backreferences are"),
)


class PatternError(ValueError):
    """A pattern RE2 cannot compile; the message says why (and what RE2 does not support)."""


MEMO_CHARS = 1 << 20  # characters of text a pattern remembers verdicts for, at most


class _Verdicts:
    """Remembered results of one pattern's searches, by text: a search is a pure function
    of the text, so a verdict never goes stale. The same names and command lines come back
    every scan; forgotten all at once when the texts held pass ``MEMO_CHARS``."""

    __slots__ = ("chars", "found", "lock")

    def __init__(self) -> None:
        self.found: dict[str, bool] = {}
        self.chars = 0
        self.lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled RE2 pattern; ``search`` looks at the first ``MAX_TEXT`` characters only."""

    pattern: str
    _compiled: Any = field(repr=False, compare=False)
    _verdicts: _Verdicts = field(default_factory=_Verdicts, repr=False, compare=False)

    def search(self, text: str) -> bool:
        """Return True when the pattern matches somewhere in the first MAX_TEXT characters."""
        text = text[:MAX_TEXT]
        memo = self._verdicts
        found = memo.found.get(text)
        if found is None:
            found = self._compiled.search(text) is not None
            with memo.lock:
                if memo.chars + len(text) > MEMO_CHARS:
                    memo.found.clear()
                    memo.chars = 0
                memo.found[text] = found
                memo.chars += len(text)
        return found


def _why(text: str, detail: str) -> str:
    for token, what in _UNSUPPORTED:
        if token in text:
            return f"{detail} (RE2 syntax: {what} not supported)"
    if "invalid escape sequence: \\" in detail and any(
            f"\\{d}" in text for d in "123456789"):
        return f"{detail} (RE2 syntax: backreferences are not supported)"
    return f"{detail} (RE2 syntax, as in Prometheus relabelling)"


def compile_pattern(text: str) -> Pattern:
    """Return the compiled pattern; raise PatternError for syntax RE2 rejects."""
    if len(text) > MAX_PATTERN:
        raise PatternError(f"pattern longer than {MAX_PATTERN} characters")
    try:
        compiled = re2.compile(text, options=_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise PatternError(_why(text, str(detail))) from None
    return Pattern(text, compiled)
