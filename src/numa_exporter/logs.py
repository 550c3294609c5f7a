"""structlog set-up: logfmt (the default) or JSON lines on stderr.

The daemon logs through a ``LogSink``: a bounded queue drained by its own thread, which
writes each line to the descriptor with ``os.write``. A line that cannot be written (EPIPE
from a pipe whose reader exited, ENOSPC, a closed descriptor, ...) or that finds the queue
full (a sink that stopped reading) is dropped and counted; logging never raises into the
caller and never blocks it, so a failing log sink cannot stop the scan loop.

Both formats use the keys log pipelines expect (the same as Prometheus' own exporters):
``ts`` (RFC 3339, UTC), ``level`` (``debug``, ``info``, ``warn``, ``error``), ``caller``
(``file.py:line``) and ``msg``, then the event's own keys.
"""

from __future__ import annotations

import io
import logging
import os
import queue
import sys
import threading
from collections.abc import MutableMapping
from typing import Any

import structlog

from numa_exporter.parsers.text import safe_text


def _safe_values(_: object, __: str, event: structlog.types.EventDict) -> structlog.types.EventDict:
    """Return the event with text values made safe (undecodable bytes as \\xNN, no controls)."""
    return {k: safe_text(v) if isinstance(v, str) and k != "exception" else v
            for k, v in event.items()}


LEVELS = ("debug", "info", "warn", "error")
FORMATS = ("logfmt", "json")
DEFAULT_FORMAT = "logfmt"
FIRST_KEYS = ("ts", "level", "caller", "msg")

_NUMERIC = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
            "error": logging.ERROR}
_LEVEL_NAMES = {"warning": "warn", "critical": "error", "exception": "error"}


def _level_name(_logger: Any, _name: str, event: MutableMapping[str, Any]
                ) -> MutableMapping[str, Any]:
    """Return the event with ``level`` spelled as in --log.level (``warn``, not ``warning``)."""
    level = event.get("level")
    if isinstance(level, str):
        event["level"] = _LEVEL_NAMES.get(level, level)
    return event


def _caller(_logger: Any, _name: str, event: MutableMapping[str, Any]
            ) -> MutableMapping[str, Any]:
    """Return the event with ``filename``/``lineno`` folded into ``caller=file.py:line``."""
    filename = event.pop("filename", None)
    lineno = event.pop("lineno", None)
    if filename is not None:
        event["caller"] = f"{os.path.basename(str(filename))}:{lineno}"
    return event


def _first_keys(_logger: Any, _name: str, event: MutableMapping[str, Any]
                ) -> MutableMapping[str, Any]:
    """Return the event reordered so that ts, level, caller and msg come first."""
    head = {k: event.pop(k) for k in FIRST_KEYS if k in event}
    return {**head, **event}


def processors(fmt: str) -> list[structlog.types.Processor]:
    """Return the processor chain for ``logfmt`` or ``json`` (renderer last)."""
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json"
        else structlog.processors.LogfmtRenderer(key_order=list(FIRST_KEYS))
    )
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _level_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.CallsiteParameterAdder(
            {structlog.processors.CallsiteParameter.FILENAME,
             structlog.processors.CallsiteParameter.LINENO}),
        _caller,
        structlog.processors.format_exc_info,
        _safe_values,
        structlog.processors.EventRenamer("msg"),
        _first_keys,
        renderer,
    ]


QUEUE_LINES = 10_000  # lines the sink holds while its descriptor does not take them
_STOP = b""  # the writer thread's end marker (a real line always ends with a newline)


class LogSink:
    """Log lines to a file descriptor from a writer thread; ``put`` never raises or blocks.

    ``write_errors`` counts lines a write failed for (the descriptor's error, e.g. EPIPE or
    ENOSPC); ``backlog_drops`` counts lines dropped because ``QUEUE_LINES`` were waiting
    (the descriptor blocks: a reader that stopped reading).
    """

    def __init__(self, fd: int, capacity: int = QUEUE_LINES) -> None:
        self.fd = fd
        self.write_errors = 0
        self.backlog_drops = 0
        self.last_error = ""
        self._queue: queue.Queue[bytes] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._drain, name="numa-log", daemon=True)
        self._thread.start()

    def put(self, data: bytes) -> None:
        """Queue ``data`` (one or more whole lines) for writing; drop and count it when full."""
        if not data:
            return
        try:
            self._queue.put_nowait(data)
        except queue.Full:
            self.backlog_drops += 1

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued, waiting at most ``timeout`` seconds (a blocked descriptor
        keeps the rest), and stop the writer."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _drain(self) -> None:
        while True:
            data = self._queue.get()
            if data == _STOP:
                return
            self._write(data)

    def _write(self, data: bytes) -> None:
        """Write all of ``data``; on an error count the line as lost (never raises)."""
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as exc:
            self.write_errors += 1
            self.last_error = exc.strerror or type(exc).__name__
        except Exception as exc:  # a closed or odd descriptor: still only a lost line
            self.write_errors += 1
            self.last_error = type(exc).__name__


class _SinkRaw(io.RawIOBase):
    """A writable raw stream whose writes go to a ``LogSink`` (for ``sys.stderr``)."""

    def __init__(self, sink: LogSink) -> None:
        super().__init__()
        self.sink = sink

    def writable(self) -> bool:
        """Return True: this stream takes writes."""
        return True

    def write(self, b: Any) -> int:
        """Queue the bytes and return their length (they are never refused)."""
        data = bytes(b)
        self.sink.put(data)
        return len(data)


def sink_stream(sink: LogSink) -> io.TextIOWrapper:
    """Return a line-buffered text stream over ``sink``: Python's own writes to stderr
    (uncaught exceptions in threads, warnings) then fail no more than log lines do."""
    return io.TextIOWrapper(io.BufferedWriter(_SinkRaw(sink)), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True)


class SinkLogger:
    """structlog's final logger: each rendered event becomes one line in a ``LogSink``."""

    def __init__(self, sink: LogSink) -> None:
        self._sink = sink

    def msg(self, message: str) -> None:
        """Queue ``message`` as one line."""
        self._sink.put(message.encode("utf-8", "backslashreplace") + b"\n")

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = msg


def configure(level: str, fmt: str, sink: LogSink | None = None) -> None:
    """Configure structlog for the given level and format (``logfmt`` or ``json``), to
    ``sink`` when given (the daemon), else straight to stderr (one-shot commands)."""
    factory: Any = (structlog.PrintLoggerFactory(sys.stderr) if sink is None
                    else (lambda *_args: SinkLogger(sink)))
    structlog.configure(
        processors=processors(fmt),
        wrapper_class=structlog.make_filtering_bound_logger(_NUMERIC[level]),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )


def default_format() -> str:
    """Return the format used without --log.format: ``logfmt``, terminal or not."""
    return DEFAULT_FORMAT
