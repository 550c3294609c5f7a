"""One error reporter for a scan's sources: counts malformed and unreadable input, logs once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import structlog

from numa_exporter.sources.error_sources import OTHER, bounded
from numa_exporter.sources.errors import Absent, Denied, Gone, SourceError

log = structlog.get_logger("numa_exporter.readers.error_report")

T = TypeVar("T")
MAX_LOGGED = 10_000  # distinct "log once" keys remembered before the memory is cleared


class ErrorReporter:
    """Counts parse and read errors by source; each distinct problem is logged once."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet  # count only (start-up checks that report their own way)
        self.parse_errors: dict[str, int] = {}
        self.read_errors: dict[tuple[str, str], int] = {}
        self._logged: set[tuple[object, ...]] = set()
        self.count = 0  # errors counted so far, of every kind (what a caller compares)

    def once(self, *key: object) -> bool:
        """Return True the first time ``key`` is seen (for log-once messages)."""
        if self.quiet or key in self._logged:
            return False
        if len(self._logged) >= MAX_LOGGED:  # "log once" memory stays bounded
            self._logged.clear()
        self._logged.add(key)
        return True

    def label(self, source: str) -> str:
        """Return the ``source`` label a count of ``source`` goes under (``other`` for a
        name not registered in ``sources/error_sources.py``, logged once)."""
        name = bounded(source)
        if name == OTHER and self.once("unregistered source", source[:100]):
            log.warning("error source not registered: counted as source=\"other\"",
                        source=source[:100])
        return name

    def parse(self, source: str, detail: str, count: int = 1, **fields: object) -> None:
        """Count ``count`` malformed lines or files of ``source``; log once per detail."""
        label = self.label(source)
        self.parse_errors[label] = self.parse_errors.get(label, 0) + count
        self.count += count
        if self.once("parse", source, detail):
            log.warning("malformed input", source=source, file=detail, **fields)

    def read(self, err: SourceError) -> None:
        """Count an unreadable file; gone logs at debug, denied and other errors log once
        per file, a file absent from live processes once per kind of file."""
        k = (self.label(err.source), err.reason)
        self.read_errors[k] = self.read_errors.get(k, 0) + 1
        self.count += 1
        if isinstance(err, Gone):
            log.debug("file vanished", source=err.source, file=err.path)
            return
        if isinstance(err, Absent):
            if self.once("absent", err.source):
                log.error("file absent while its process lives (a kernel without NUMA, a "
                          "partial tree or a masked path?); such processes are counted as "
                          "read errors, not as gone", source=err.source, file=err.path)
            return
        if not self.once(err.reason, err.source, err.path, err.errno):
            return
        if isinstance(err, Denied):
            log.debug("permission denied", source=err.source, file=err.path)
        else:
            log.error("read failed", source=err.source, file=err.path, errno=err.errno,
                      error=str(err))

    def bug(self, source: str, where: str, exc: BaseException) -> None:
        """Count an unexpected exception while handling ``source`` input; log it once."""
        k = (self.label(source), "error")
        self.read_errors[k] = self.read_errors.get(k, 0) + 1
        self.count += 1
        if self.once("bug", source, type(exc).__name__, str(exc)[:200]):
            log.error("unexpected error; input skipped, scan goes on", source=source,
                      file=where, error=f"{type(exc).__name__}: {exc}"[:500], exc_info=exc)

    def read_parsed(self, source: str, path: str, read: Callable[[], bytes | None],
                    parse: Callable[[bytes], T | None]) -> T | None:
        """Return ``parse(read())``: None (reported here) when unreadable, absent or broken.

        A result that is None or carries a non-zero ``error_count`` counts as one malformed
        file (the value is still returned: the parsers keep what they could read).
        """
        try:
            raw = read()
        except SourceError as err:
            self.read(err)
            return None
        if raw is None:
            return None
        try:
            value = parse(raw)
        except Exception as exc:  # a parser bug costs this file, never the scan
            self.bug(source, path, exc)
            return None
        errs = getattr(value, "error_count", 0) if value is not None else 1
        if errs:
            line = getattr(value, "first_error_line", None)
            self.parse(source, f"{path}:{line}" if line else path)
        return value
