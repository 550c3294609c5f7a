"""The HTTP layer: listening, web configuration (TLS, basic auth), rendering and serving."""

from __future__ import annotations

from .address import check_telemetry_path, parse_listen_address
from .config import WebConfigError, WebSettings, add_web_flags, settings_from_args
from .server import WebServer, serve

__all__ = ["WebConfigError", "WebServer", "WebSettings", "add_web_flags",
           "check_telemetry_path", "parse_listen_address", "serve", "settings_from_args"]
