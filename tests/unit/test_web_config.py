"""Listen addresses, telemetry paths and the web configuration file (exporter-toolkit)."""

from __future__ import annotations

import ssl
from pathlib import Path

import bcrypt
import pytest

from numa_exporter.web.address import check_telemetry_path, parse_listen_address
from numa_exporter.web.config import WebConfigError, load_web_config, parse_web_config

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)


@pytest.mark.parametrize(("text", "want"), [
    (":10061", ("", 10061)), ("127.0.0.1:10061", ("127.0.0.1", 10061)),
    ("[::1]:10061", ("::1", 10061)), ("[::]:1", ("::", 1)), ("localhost:0", ("localhost", 0)),
    (":65535", ("", 65535)),
])
def test_listen_addresses(text: str, want: tuple[str, int]) -> None:
    assert parse_listen_address(text) == want


@pytest.mark.parametrize("text", [
    ":\uff11\uff10\uff10\uff16\uff11", ":\uff11", ":10061\u0663",  # non-ASCII digits
    "localhost", ":", ":65536", ":-1", ":+1", "::1:10061",
    "[::1:10061", "[nothost]:1", "ho st:1", ": 1", ":1 ", "[::1]:", "::10061",
])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="not a listen address"):
        parse_listen_address(text)


@pytest.mark.parametrize("path", ["/metrics", "/numa", "/a/b-c_d.e~f", "/x%20y", "/m:1@x"])
def test_telemetry_paths(path: str) -> None:
    assert check_telemetry_path(path) == path


@pytest.mark.parametrize("path", ["/", "", "metrics", "/metrics?x", "/metrics#x", "/met rics",
                                  "/metrics\t", "/métrics", "/m%zz", "/metrics\n", "/a\"b"])
def test_bad_telemetry_paths(path: str) -> None:
    with pytest.raises(ValueError, match="not a URL path"):
        check_telemetry_path(path)


def _pem(tmp: Path) -> tuple[Path, Path]:
    """Return a self-signed certificate and key made with openssl."""
    import subprocess

    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(tmp / "k.pem"),
                    "-out", str(tmp / "c.pem"), "-days", "1", "-subj", "/CN=t"],
                   check=True, capture_output=True, timeout=60)
    return tmp / "c.pem", tmp / "k.pem"


def test_full_config_with_relative_files(tmp_path: Path) -> None:
    _pem(tmp_path)
    f = tmp_path / "web.yml"
    f.write_text(f"""
tls_server_config:
  cert_file: c.pem
  key_file: k.pem
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: c.pem
  client_allowed_sans: [scraper]
  min_version: TLS13
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: '{HASH}'
""")
    cfg = load_web_config(f)
    assert cfg.tls is not None
    assert cfg.tls.verify_mode == ssl.CERT_REQUIRED
    assert cfg.tls.minimum_version == ssl.TLSVersion.TLSv1_3
    assert cfg.client_allowed_sans == {"scraper"}
    assert cfg.users == {"prometheus": HASH.encode()}
    assert cfg.headers == (("X-Frame-Options", "deny"),
                           ("Strict-Transport-Security", "max-age=31536000"))


def test_inline_cert_and_key(tmp_path: Path) -> None:
    c, k = _pem(tmp_path)
    cfg = parse_web_config({"tls_server_config": {"cert": c.read_text(), "key": k.read_text()}},
                           tmp_path)
    assert cfg.tls is not None and cfg.tls.verify_mode == ssl.CERT_NONE


def test_empty_file_means_plain_http(tmp_path: Path) -> None:
    f = tmp_path / "web.yml"
    f.write_text("")
    cfg = load_web_config(f)
    assert cfg.tls is None and not cfg.users and not cfg.headers


@pytest.mark.parametrize(("doc", "fragment"), [
    ("[1, 2]", "must be a mapping"),
    ("tls_server_config: {cert_file: c.pem}", "missing key_file"),
    ("tls_server_config: {key_file: k.pem}", "missing cert_file"),
    ("tls_server_config: {cert_file: nope.pem, key_file: k.pem}", "is not a file"),
    ("tls_server_config: {cert_file: k.pem, key_file: c.pem}", "cannot load"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, min_version: TLS14}",
     "unknown TLS version"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, min_version: TLS13, "
     "max_version: TLS12}", "min_version is above max_version"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, client_auth_type: "
     "RequestClientCert, client_ca_file: c.pem}", "not supported"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, client_auth_type: "
     "RequireAndVerifyClientCert}", "needs client_ca_file"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, client_ca_file: c.pem}",
     "without a client_auth_type"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, cipher_suites: [X]}",
     "not supported"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, client_allowed_sans: [a]}",
     "needs client_auth_type"),
    ("tls_server_config: {cert_file: c.pem, key_file: k.pem, bogus: 1}", "unknown field"),
    ("basic_auth_users: {u: plaintext}", "not a bcrypt hash"),
    ("basic_auth_users: {'a:b': '" + HASH + "'}", "bad user name"),
    ("http_server_config: {headers: {X-Powered-By: me}}", "is not allowed"),
    ("http_server_config: {headers: {X-Frame-Options: allow}}", "is not one of"),
    ("http_server_config: {http2: maybe}", "true or false"),
    ("rate_limit: {interval: 1s, burst: 1}", "not supported"),
    ("tsl_server_config: {}", "unknown field"),
    ("basic_auth_users: [a]", "must be a mapping"),
    ("a: [", "not YAML"),
])
def test_bad_config_is_one_clear_error(tmp_path: Path, doc: str, fragment: str) -> None:
    _pem(tmp_path)
    f = tmp_path / "web.yml"
    f.write_text(doc)
    with pytest.raises(WebConfigError) as exc:
        load_web_config(f)
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read"):
        load_web_config(tmp_path / "absent.yml")


def test_shipped_example_is_valid(tmp_path: Path) -> None:
    """deploy/web-config.example.yml parses, given the certificate files it names."""
    import yaml

    example = Path(__file__).resolve().parents[2] / "deploy" / "web-config.example.yml"
    doc = yaml.safe_load(example.read_text())
    c, k = _pem(tmp_path)
    c.rename(tmp_path / doc["tls_server_config"]["cert_file"])
    k.rename(tmp_path / doc["tls_server_config"]["key_file"])
    cfg = parse_web_config(doc, tmp_path)
    assert cfg.tls is not None and set(cfg.users) == {"prometheus"}
    assert bcrypt.checkpw(b"change-me", cfg.users["prometheus"])
