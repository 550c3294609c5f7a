"""structlog set-up: logfmt (the default) or JSON lines on stderr.

Both formats use the keys log pipelines expect (the same as Prometheus' own exporters):
``ts`` (RFC 3339, UTC), ``level`` (``debug``, ``info``, ``warn``, ``error``), ``caller``
(``file.py:line``) and ``msg``, then the event's own keys.
"""

from __future__ import annotations

import logging
import os
import sys
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


def configure(level: str, fmt: str) -> None:
    """Configure structlog for the given level and format (``logfmt`` or ``json``)."""
    structlog.configure(
        processors=processors(fmt),
        wrapper_class=structlog.make_filtering_bound_logger(_NUMERIC[level]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def default_format() -> str:
    """Return the format used without --log.format: ``logfmt``, terminal or not."""
    return DEFAULT_FORMAT
