"""Web settings: the ``--web.*`` flags and the ``--web.config.file`` (exporter-toolkit format).

The file is read once at start. Keys follow prometheus/exporter-toolkit's web configuration:
``tls_server_config``, ``http_server_config`` and ``basic_auth_users``. Anything this exporter
cannot honour is an error at start, never silently ignored.
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .address import check_telemetry_path, parse_listen_address


class WebConfigError(ValueError):
    """A bad ``--web.*`` flag or web configuration file; the message is one line."""


TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# exporter-toolkit's client_auth_type -> Python's verify mode. RequestClientCert and
# RequireAnyClientCert (ask for a certificate but do not verify it) have no equivalent in
# Python's ssl module, and exporter-toolkit itself calls them insecure: refused.
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
# http_server_config.headers: the names exporter-toolkit accepts, with their allowed values.
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None, "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}", re.ASCII)
_TLS_KEYS = {"cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
             "client_auth_type", "client_allowed_sans", "min_version", "max_version",
             "cipher_suites", "curve_preferences", "prefer_server_cipher_suites"}


@dataclass(frozen=True, slots=True)
class WebConfig:
    """What the web configuration file says (empty when there is none)."""

    tls: ssl.SSLContext | None = None
    client_allowed_sans: frozenset[str] = frozenset()
    users: Mapping[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class WebSettings:
    """Everything the HTTP server needs besides what to serve."""

    host: str = ""
    port: int = 10061
    telemetry_path: str = "/metrics"
    max_requests: int = 40
    read_header_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    disable_exporter_metrics: bool = False
    config: WebConfig = field(default_factory=WebConfig)


def _seconds(text: str) -> float:
    from numa_exporter.flags import parse_duration

    try:
        v = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _count(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", text, re.ASCII):
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {text!r}")
    return int(text)


def add_web_flags(parser: argparse.ArgumentParser) -> None:
    """Add the HTTP server's flags (besides listen address and telemetry path) to parser."""
    a = parser.add_argument
    a("--web.config.file", dest="web_config_file", default=None,
      help="web configuration file (exporter-toolkit format: TLS, basic auth, headers)")
    a("--web.max-requests", dest="web_max_requests", type=_count, default=40,
      help="maximum concurrent scrapes; beyond it answer 503; 0 = no limit (default 40)")
    a("--web.disable-exporter-metrics", dest="web_disable_exporter_metrics",
      action="store_true", help="leave out the exporter's own process_* and python_* metrics")
    a("--web.read-header-timeout", dest="web_read_header_timeout", type=_seconds,
      default=10.0, help="time a client has to send a request's headers (default 10s)")
    a("--web.idle-timeout", dest="web_idle_timeout", type=_seconds, default=120.0,
      help="time a keep-alive connection may wait for its next request (default 2m)")
    a("--web.write-timeout", dest="web_write_timeout", type=_seconds, default=30.0,
      help="time a client has to read a whole response (default 30s)")


def settings_from_args(ns: argparse.Namespace) -> WebSettings:
    """Return the WebSettings the parsed flags describe; raise WebConfigError when bad."""
    try:
        host, port = parse_listen_address(ns.listen)
    except ValueError as exc:
        raise WebConfigError(f"--web.listen-address: {exc}") from None
    try:
        path = check_telemetry_path(ns.telemetry_path)
    except ValueError as exc:
        raise WebConfigError(f"--web.telemetry-path: {exc}") from None
    cfg = WebConfig()
    if ns.web_config_file:
        try:
            cfg = load_web_config(Path(ns.web_config_file))
        except WebConfigError as exc:
            raise WebConfigError(f"--web.config.file={ns.web_config_file}: {exc}") from None
    return WebSettings(host=host, port=port, telemetry_path=path,
                       max_requests=ns.web_max_requests,
                       read_header_timeout=ns.web_read_header_timeout,
                       idle_timeout=ns.web_idle_timeout, write_timeout=ns.web_write_timeout,
                       disable_exporter_metrics=ns.web_disable_exporter_metrics, config=cfg)


def load_web_config(path: Path) -> WebConfig:
    """Return the web configuration in the YAML file ``path``; raise WebConfigError if bad.

    Relative file names inside it are taken relative to the file's directory.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"cannot read: {exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WebConfigError("not YAML: " + " ".join(str(exc).split())) from None
    return parse_web_config(doc, path.parent)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(f"{where} must be a mapping")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{where} must be a string")
    return value


def _unknown(doc: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(doc) - known)
    if extra:
        raise WebConfigError(f"unknown field {extra[0]!r} in {where}")


def parse_web_config(doc: Any, base: Path) -> WebConfig:
    """Return the WebConfig a parsed YAML document describes; raise WebConfigError if bad."""
    top = _mapping(doc, "the file")
    if "rate_limit" in top:
        raise WebConfigError("rate_limit is not supported by numa-exporter")
    _unknown(top, {"tls_server_config", "http_server_config", "basic_auth_users"}, "the file")
    users: dict[str, bytes] = {}
    for user, hashed in _mapping(top.get("basic_auth_users"), "basic_auth_users").items():
        h = _string(hashed, f"basic_auth_users.{user}")
        if not _BCRYPT.fullmatch(h):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash "
                                 "(htpasswd -nBC 10 \"\" | tr -d ':\\n')")
        if ":" in user or not user:
            raise WebConfigError(f"basic_auth_users: bad user name {user!r}")
        users[user] = h.encode()
    headers: list[tuple[str, str]] = []
    http_cfg = _mapping(top.get("http_server_config"), "http_server_config")
    _unknown(http_cfg, {"http2", "headers"}, "http_server_config")
    if not isinstance(http_cfg.get("http2", True), bool):
        raise WebConfigError("http_server_config.http2 must be true or false")
    for name, value in _mapping(http_cfg.get("headers"), "http_server_config.headers").items():
        if name not in HEADERS:
            raise WebConfigError(f"http_server_config.headers: header {name!r} is not allowed "
                                 f"(allowed: {', '.join(HEADERS)})")
        v = _string(value, f"http_server_config.headers.{name}")
        allowed = HEADERS[name]
        if allowed is not None and v.lower() not in allowed:
            raise WebConfigError(f"http_server_config.headers.{name}: {v!r} is not one of "
                                 f"{', '.join(allowed)}")
        if any(not 0x20 <= ord(c) < 0x7f for c in v):
            raise WebConfigError(f"http_server_config.headers.{name}: control or non-ASCII "
                                 "characters")
        if v:
            headers.append((name, v))
    tls_doc = top.get("tls_server_config")
    tls, sans = (None, frozenset[str]()) if tls_doc is None else _tls(
        _mapping(tls_doc, "tls_server_config"), base)
    return WebConfig(tls=tls, client_allowed_sans=sans, users=users, headers=tuple(headers))


def _file(doc: Mapping[str, Any], key: str, base: Path) -> Path | None:
    if doc.get(key) in (None, ""):
        return None
    p = Path(_string(doc[key], f"tls_server_config.{key}"))
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise WebConfigError(f"tls_server_config.{key}: {p} is not a file")
    return p


def _tls(doc: dict[str, Any], base: Path) -> tuple[ssl.SSLContext, frozenset[str]]:
    _unknown(doc, _TLS_KEYS, "tls_server_config")
    for name in ("cipher_suites", "curve_preferences"):
        if doc.get(name):
            raise WebConfigError(f"tls_server_config.{name} is not supported by numa-exporter "
                                 "(OpenSSL's defaults apply)")
    cert_file, key_file = _file(doc, "cert_file", base), _file(doc, "key_file", base)
    cert: Any = doc.get("cert")
    key: Any = doc.get("key")
    if (cert_file and cert) or (key_file and key):
        raise WebConfigError("tls_server_config: give cert_file or cert (key_file or key), "
                             "not both")
    if not (cert_file or cert):
        raise WebConfigError("tls_server_config: missing cert_file")
    if not (key_file or key):
        raise WebConfigError("tls_server_config: missing key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        lo = TLS_VERSIONS[str(doc.get("min_version", "TLS12"))]
        hi = TLS_VERSIONS[str(doc.get("max_version", "TLS13"))]
    except KeyError as exc:
        raise WebConfigError(f"tls_server_config: unknown TLS version {exc.args[0]!r} "
                             f"(one of {', '.join(TLS_VERSIONS)})") from None
    if lo > hi:
        raise WebConfigError("tls_server_config: min_version is above max_version")
    try:
        ctx.minimum_version, ctx.maximum_version = lo, hi
    except (ValueError, ssl.SSLError) as exc:
        raise WebConfigError(f"tls_server_config: TLS versions: {exc}") from None
    if doc.get("prefer_server_cipher_suites", True):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        _load_chain(ctx, cert_file, key_file, cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise WebConfigError(f"tls_server_config: cannot load the certificate and key: "
                             f"{exc}") from None
    mode_name = str(doc.get("client_auth_type") or "NoClientCert")
    if mode_name not in CLIENT_AUTH:
        raise WebConfigError(f"tls_server_config.client_auth_type: {mode_name!r} is not "
                             f"supported (one of {', '.join(CLIENT_AUTH)})")
    ca_file, ca = _file(doc, "client_ca_file", base), doc.get("client_ca")
    if ca_file and ca:
        raise WebConfigError("tls_server_config: give client_ca_file or client_ca, not both")
    if mode_name == "NoClientCert" and (ca_file or ca):
        raise WebConfigError("tls_server_config: client CA configured without a "
                             "client_auth_type that verifies client certificates")
    if mode_name != "NoClientCert":
        if not (ca_file or ca):
            raise WebConfigError(f"tls_server_config: client_auth_type {mode_name} needs "
                                 "client_ca_file")
        try:
            if ca_file:
                ctx.load_verify_locations(cafile=str(ca_file))
            else:
                ctx.load_verify_locations(cadata=_string(ca, "tls_server_config.client_ca"))
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise WebConfigError(f"tls_server_config: cannot load the client CA: {exc}") from None
    ctx.verify_mode = CLIENT_AUTH[mode_name]
    sans_doc = doc.get("client_allowed_sans") or []
    if not isinstance(sans_doc, list) or not all(isinstance(s, str) for s in sans_doc):
        raise WebConfigError("tls_server_config.client_allowed_sans must be a list of strings")
    if sans_doc and mode_name != "RequireAndVerifyClientCert":
        raise WebConfigError("tls_server_config.client_allowed_sans needs client_auth_type "
                             "RequireAndVerifyClientCert")
    return ctx, frozenset(sans_doc)


def _load_chain(ctx: ssl.SSLContext, cert_file: Path | None, key_file: Path | None,
                cert: Any, key: Any) -> None:
    """Load the server certificate and key, from files or inline PEM strings."""
    with tempfile.TemporaryDirectory(prefix="numa-exporter-tls-") as tmp:
        if cert_file is None:
            cert_file = Path(tmp) / "cert.pem"
            cert_file.write_text(_string(cert, "tls_server_config.cert"))
        if key_file is None:
            key_file = Path(tmp) / "key.pem"
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(_string(key, "tls_server_config.key"))
        ctx.load_cert_chain(str(cert_file), str(key_file))
