"""TLS, client certificates and basic auth from --web.config.file, checked with real clients:
Python's ssl, curl, and Debian's Prometheus scraping over TLS with basic auth."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml
from tests.conftest import ROOTS, Daemon, free_port
from tests.deploy.helpers import http_get, require_tool, running, tools_required
from tests.e2e.web_support import make_pki, raw_request

pytestmark = pytest.mark.e2e
StartDaemon = Callable[..., Daemon]
ROOT = ROOTS / "two_node"
ARGS = [f"--path.procfs={ROOT / 'proc'}", f"--path.sysfs={ROOT / 'sys'}",
        f"--accelerator.records={ROOTS.parent / 'udev' / 'none.json'}",
        "--process.min-resident=0", "--scan.interval=1s", "--log.format=json"]
USER, PASSWORD = "prometheus", "correct horse"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")


def _config(tmp: Path, pki: dict[str, Path], **tls: object) -> Path:
    doc = {"tls_server_config": {"cert_file": str(pki["cert"]), "key_file": str(pki["key"]),
                                 **tls},
           "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
           "basic_auth_users": {USER: _hash(PASSWORD)}}
    f = tmp / "web.yml"
    f.write_text(yaml.safe_dump(doc))
    return f


def _client_ctx(pki: dict[str, Path], cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if cert:
        ctx.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
    return ctx


def _auth(user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _get(port: int, ctx: ssl.SSLContext, path: str = "/metrics", host: str = "127.0.0.1",
         **headers: str) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPSConnection(host, port, context=ctx, timeout=30)
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def _wait_tls(d: Daemon, ctx: ssl.SSLContext, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if d.proc.poll() is not None:
            raise AssertionError(d.log_path.read_text()[-2000:])
        try:
            status, _, body = _get(d.port, ctx, **_auth())
            if status == 200 and b"numa_exporter_scans_total 1" in body:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("TLS daemon not ready: " + d.log_path.read_text()[-2000:])


@pytest.fixture
def tls_daemon(start_daemon: StartDaemon, pki: dict[str, Path], tmp_path: Path) -> Daemon:
    d = start_daemon(*ARGS, f"--web.config.file={_config(tmp_path, pki)}")
    _wait_tls(d, _client_ctx(pki))
    return d


def test_python_ssl_client_with_basic_auth(tls_daemon: Daemon, pki: dict[str, Path]) -> None:
    ctx = _client_ctx(pki)
    port = tls_daemon.port
    status, hdrs, body = _get(port, ctx, **_auth())
    assert status == 200 and b"numa_exporter_build_info" in body
    assert hdrs["x-content-type-options"] == "nosniff"
    for headers in ({}, _auth(password="wrong"), _auth(user="nobody"),
                    {"Authorization": "Bearer x"}):
        status, hdrs, _ = _get(port, ctx, **headers)
        assert status == 401, headers
        assert hdrs["www-authenticate"].startswith("Basic")
        assert hdrs["x-content-type-options"] == "nosniff"
    assert _get(port, ctx, "/-/healthy")[0] == 401, "every path needs credentials"
    assert _get(port, ctx, "/-/healthy", **_auth())[0] == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        _get(port, ssl.create_default_context())  # the system CAs do not know this server


def test_plain_http_is_refused_on_the_tls_port(tls_daemon: Daemon,
                                               pki: dict[str, Path]) -> None:
    out = raw_request(tls_daemon.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.0 400 Bad Request") and b"HTTPS" in out
    assert b"numa_" not in out
    assert http_get(f"http://127.0.0.1:{tls_daemon.port}/metrics")[0] in (0, 400)
    _, _, body = _get(tls_daemon.port, _client_ctx(pki), **_auth())
    assert b'numa_exporter_web_requests_refused_total{reason="bad_request"} 2.0' in body


def test_tls_versions_below_min_version_are_refused(
        start_daemon: StartDaemon, pki: dict[str, Path], tmp_path: Path) -> None:
    d = start_daemon(*ARGS, f"--web.config.file={_config(tmp_path, pki, min_version='TLS13')}")
    _wait_tls(d, _client_ctx(pki))
    old = _client_ctx(pki)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(d.port, old, **_auth())


def test_client_certificates_required_and_verified(
        start_daemon: StartDaemon, pki: dict[str, Path], tmp_path: Path) -> None:
    cfg = _config(tmp_path, pki, client_auth_type="RequireAndVerifyClientCert",
                  client_ca_file=str(pki["ca"]), client_allowed_sans=["scraper"])
    d = start_daemon(*ARGS, f"--web.config.file={cfg}")
    _wait_tls(d, _client_ctx(pki, cert=True))
    assert _get(d.port, _client_ctx(pki, cert=True), **_auth())[0] == 200
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(d.port, _client_ctx(pki), **_auth())  # no client certificate
    # a certificate that verifies but whose SAN is not allowed
    cfg2 = _config(tmp_path, pki, client_auth_type="RequireAndVerifyClientCert",
                   client_ca_file=str(pki["ca"]), client_allowed_sans=["someone-else"])
    d2 = start_daemon(*ARGS, f"--web.config.file={cfg2}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", d2.port), timeout=5).close()
            break
        except OSError:
            time.sleep(0.2)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        _get(d2.port, _client_ctx(pki, cert=True), **_auth())
    assert "Traceback" not in d.log_path.read_text() + d2.log_path.read_text()


def _curl() -> str:
    curl = shutil.which("curl")
    if curl is None:
        if tools_required():
            pytest.fail("curl is not installed (required under CI)")
        pytest.skip("curl is not installed")
    return curl


def test_curl_over_tls(tls_daemon: Daemon, pki: dict[str, Path]) -> None:
    url = f"https://127.0.0.1:{tls_daemon.port}/metrics"
    base = [_curl(), "-sS", "--cacert", str(pki["ca"]), "-o", "-", "-w", "\n%{http_code}"]
    r = subprocess.run([*base, "-u", f"{USER}:{PASSWORD}", "--compressed", url],
                       capture_output=True, text=True, timeout=60, check=False)
    body, _, code = r.stdout.rpartition("\n")
    assert code == "200" and "numa_exporter_build_info" in body, r.stderr
    assert body.rstrip("\n").splitlines()[-1].startswith("python_") or "process_" in body
    r = subprocess.run([*base, url], capture_output=True, text=True, timeout=60, check=False)
    assert r.stdout.rpartition("\n")[2] == "401"
    r = subprocess.run([_curl(), "-sS", "-o", "/dev/null", url], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode != 0, "curl without the CA refuses the certificate"


def test_hash_written_by_htpasswd(start_daemon: StartDaemon, pki: dict[str, Path],
                                  tmp_path: Path) -> None:
    htpasswd = shutil.which("htpasswd")
    if htpasswd is None:
        if tools_required():
            pytest.fail("htpasswd (apache2-utils) is not installed (required under CI)")
        pytest.skip("htpasswd not installed (Debian package apache2-utils)")
    line = subprocess.run([htpasswd, "-nbBC", "5", "scraper", "s3cret!"], capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()
    user, _, hashed = line.partition(":")
    assert hashed.startswith("$2y$05$")
    f = tmp_path / "web.yml"
    f.write_text(yaml.safe_dump({"basic_auth_users": {user: hashed}}))
    d = start_daemon(*ARGS, f"--web.config.file={f}")
    deadline = time.monotonic() + 30
    while http_get(d.url + "/-/healthy")[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    c.request("GET", "/metrics", headers=_auth("scraper", "s3cret!"))
    r = c.getresponse()
    assert r.status == 200 and b"numa_exporter_build_info" in r.read()
    c.request("GET", "/metrics", headers=_auth("scraper", "s3cret"))
    r = c.getresponse()
    r.read()
    assert r.status == 401


@pytest.fixture
def prometheus_over_tls(tls_daemon: Daemon, pki: dict[str, Path],
                        tmp_path: Path) -> Iterator[str]:
    prometheus = require_tool("prometheus")
    target = f"127.0.0.1:{tls_daemon.port}"

    def job(name: str, password: str) -> dict[str, object]:
        return {"job_name": name, "scheme": "https",
                "tls_config": {"ca_file": str(pki["ca"])},
                "basic_auth": {"username": USER, "password": password},
                "static_configs": [{"targets": [target]}]}

    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [job("tls", PASSWORD), job("tls-wrong-password", "nope")]}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running([prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'd'}",
                  f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                 tmp_path / "prometheus.log", f"{url}/-/ready", what="prometheus"):
        yield url


@pytest.mark.prometheus
def test_prometheus_scrapes_over_tls_with_basic_auth(prometheus_over_tls: str) -> None:
    def query(expr: str) -> list[dict[str, object]]:
        q = urllib.parse.urlencode({"query": expr})
        status, body = http_get(f"{prometheus_over_tls}/api/v1/query?{q}", timeout=10)
        assert status == 200, body
        result = json.loads(body)["data"]["result"]
        assert isinstance(result, list)
        return result

    deadline = time.monotonic() + 90
    ups: dict[str, str] = {}
    while time.monotonic() < deadline:
        ups = {str(r["metric"]["job"]): str(r["value"][1])  # type: ignore[index]
               for r in query("up")}
        if ups.get("tls") == "1" and "tls-wrong-password" in ups:
            break
        time.sleep(0.5)
    assert ups == {"tls": "1", "tls-wrong-password": "0"}, ups
    assert query('numa_exporter_scans_total{job="tls"} > 0')
    assert query('numa_node_distance{job="tls"}')
