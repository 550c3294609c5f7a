"""One error reporter for a scan's sources: counts malformed and unreadable input, logs once."""

from __future__ import annotations

import structlog

from numa_exporter.sources.errors import Denied, Gone, SourceError

log = structlog.get_logger("numa_exporter.errors")

MAX_LOGGED = 10_000  # distinct "log once" keys remembered before the memory is cleared


class ErrorReporter:
    """Counts parse and read errors by source; each distinct problem is logged once."""

    def __init__(self) -> None:
        self.parse_errors: dict[str, int] = {}
        self.read_errors: dict[tuple[str, str], int] = {}
        self._logged: set[tuple[object, ...]] = set()

    def once(self, *key: object) -> bool:
        """Return True the first time ``key`` is seen (for log-once messages)."""
        if key in self._logged:
            return False
        if len(self._logged) >= MAX_LOGGED:  # "log once" memory stays bounded
            self._logged.clear()
        self._logged.add(key)
        return True

    def parse(self, source: str, detail: str, count: int = 1, **fields: object) -> None:
        """Count ``count`` malformed lines or files of ``source``; log once per detail."""
        self.parse_errors[source] = self.parse_errors.get(source, 0) + count
        if self.once("parse", source, detail):
            log.warning("malformed input", source=source, file=detail, **fields)

    def read(self, err: SourceError) -> None:
        """Count an unreadable file; gone logs at debug, denied and other errors log once."""
        k = (err.source, err.reason)
        self.read_errors[k] = self.read_errors.get(k, 0) + 1
        if isinstance(err, Gone):
            log.debug("file vanished", source=err.source, file=err.path)
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
        k = (source, "error")
        self.read_errors[k] = self.read_errors.get(k, 0) + 1
        if self.once("bug", source, type(exc).__name__, str(exc)[:200]):
            log.error("unexpected error; input skipped, scan goes on", source=source,
                      file=where, error=f"{type(exc).__name__}: {exc}"[:500], exc_info=exc)
