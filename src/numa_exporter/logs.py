"""structlog set-up: logfmt (console) or JSON lines on stderr."""

from __future__ import annotations

import logging
import sys

import structlog

from numa_exporter.parsers._text import safe_text


def _safe_values(_: object, __: str, event: structlog.types.EventDict) -> structlog.types.EventDict:
    """Return the event with text values made safe (undecodable bytes as \\xNN, no controls)."""
    return {k: safe_text(v) if isinstance(v, str) and k != "exception" else v
            for k, v in event.items()}

LEVELS = ("debug", "info", "warn", "error")


def configure(level: str, fmt: str) -> None:
    """Configure structlog for the given level and format (``logfmt`` or ``json``)."""
    lvl = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR}[level]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json"
        else structlog.processors.LogfmtRenderer(key_order=["ts", "level", "event"])
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.format_exc_info,
            _safe_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def default_format() -> str:
    """Return ``logfmt`` on a terminal and ``json`` otherwise."""
    return "logfmt" if sys.stderr.isatty() else "json"
