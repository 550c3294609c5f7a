"""The daemon's exposition over HTTP: IPv4/IPv6/dual-stack listening, format and encoding
negotiation, name[] filtering, exporter self-metrics, HEAD, and start-up flag errors."""

from __future__ import annotations

import gzip
import http.client
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from tests.conftest import ROOTS, Daemon, exporter_command, free_port
from tests.e2e.web_support import has_ipv6_loopback, wait_port

pytestmark = pytest.mark.e2e
StartDaemon = Callable[..., Daemon]
ROOT = ROOTS / "two_node"
ARGS = [f"--path.procfs={ROOT / 'proc'}", f"--path.sysfs={ROOT / 'sys'}",
        f"--accelerator.records={ROOTS.parent / 'udev' / 'none.json'}",
        "--process.min-resident=0", "--scan.interval=1s", "--log.format=json"]


def _get(host: str, port: int, path: str = "/metrics", method: str = "GET",
         **headers: str) -> tuple[int, dict[str, str], bytes]:
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        c.request(method, path, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def _started(d: Daemon, host: str = "127.0.0.1", port: int | None = None) -> int:
    port = port or d.port
    try:
        wait_port(port, host)
    except AssertionError:
        raise AssertionError(d.log_path.read_text()[-2000:]) from None
    return port


def test_dual_stack_listen_address_serves_ipv4_and_ipv6(start_daemon: StartDaemon) -> None:
    port = free_port()
    d = start_daemon(*ARGS, f"--web.listen-address=:{port}")
    _started(d, port=port)
    assert _get("127.0.0.1", port)[0] == 200
    if not has_ipv6_loopback():
        pytest.skip("this host has no ::1: the IPv6 half of the dual-stack check is skipped")
    status, _, body = _get("::1", port)
    assert status == 200 and b"numa_exporter_build_info" in body


def test_ipv6_loopback_listen_address(start_daemon: StartDaemon) -> None:
    if not has_ipv6_loopback():
        pytest.skip("this host has no ::1")
    port = free_port()
    d = start_daemon(*ARGS, f"--web.listen-address=[::1]:{port}")
    _started(d, "::1", port)
    status, _, body = _get("::1", port)
    assert status == 200 and b"numa_exporter_build_info" in body
    with pytest.raises(OSError):
        _get("127.0.0.1", port)


def test_ipv4_listen_address(start_daemon: StartDaemon) -> None:
    d = start_daemon(*ARGS)  # 127.0.0.1:port
    port = _started(d)
    assert _get("127.0.0.1", port)[0] == 200
    if has_ipv6_loopback():
        with pytest.raises(OSError):
            _get("::1", port)


def test_negotiation_filtering_and_head(start_daemon: StartDaemon) -> None:
    d = start_daemon(*ARGS)
    port = _started(d)
    h = "127.0.0.1"
    status, hdrs, text = _get(h, port)
    assert status == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4")
    assert "content-encoding" not in hdrs
    assert b"\nprocess_cpu_seconds_total " in text and b"\npython_info{" in text

    _, hdrs, om = _get(h, port, Accept="application/openmetrics-text; version=1.0.0")
    assert hdrs["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert om.endswith(b"# EOF\n") and om.count(b"# EOF") == 1
    names = {f.name for f in text_string_to_metric_families(om.decode())}
    assert {"numa_exporter_scans", "numa_process_memory_bytes", "process_cpu_seconds"} <= names

    for enc, gz in (("gzip", True), ("gzip;q=0", False), ("*", True), ("identity", False),
                    ("br, gzip;q=0.1", True), ("gzip;q=0, *;q=1", False)):
        _, hdrs, body = _get(h, port, **{"Accept-Encoding": enc})
        assert (hdrs.get("content-encoding") == "gzip") is gz, enc
        if gz:
            dec = zlib.decompressobj(31)  # one gzip member, as Go and curl decode by default
            plain = dec.decompress(body) + dec.flush()
            assert dec.eof and plain == gzip.decompress(body)
            assert plain.startswith(b"# HELP ") and b"\nprocess_cpu_seconds_total " in plain

    q = "/metrics?name[]=numa_exporter_scans_total&name[]=numa_node_distance"
    _, _, sel = _get(h, port, q)
    fams = {ln.split()[2] for ln in sel.decode().splitlines() if ln.startswith("# TYPE")}
    assert fams == {"numa_exporter_scans_total", "numa_node_distance"}
    _, hdrs, sel_gz = _get(h, port, q, **{"Accept-Encoding": "gzip"})
    assert hdrs["content-encoding"] == "gzip"
    assert {ln.split()[2] for ln in gzip.decompress(sel_gz).decode().splitlines()
            if ln.startswith("# TYPE")} == fams

    status, hdrs, body = _get(h, port, method="HEAD")
    assert status == 200 and body == b"" and int(hdrs["content-length"]) > 1000
    assert _get(h, port, "/-/healthy")[2] == b"OK\n"
    assert _get(h, port, "/-/ready")[2] == b"OK\n"
    assert b'href="/metrics"' in _get(h, port, "/")[2]
    assert _get(h, port, "/nope")[0] == 404


def test_disable_exporter_metrics(start_daemon: StartDaemon) -> None:
    d = start_daemon(*ARGS, "--web.disable-exporter-metrics")
    port = _started(d)
    _, _, text = _get("127.0.0.1", port)
    assert b"numa_exporter_build_info" in text
    names = {ln.split()[2] for ln in text.decode().splitlines() if ln.startswith("# TYPE")}
    assert not {n for n in names if n.startswith(("process_", "python_"))}, names
    # the web layer's own counters go with them (node_exporter's flag drops promhttp_*)
    assert not {n for n in names if n.startswith("numa_exporter_web_")}, names
    assert "numa_exporter_scans_total" in names, "the scan's own families stay"


def _fails(*flags: str) -> str:
    r = subprocess.run([*exporter_command(), *flags], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2, (flags, r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize(("flag", "fragment"), [
    ("--web.listen-address=:\uff11\uff10\uff10\uff16\uff11", "not a listen address"),
    ("--web.listen-address=:\uff11", "not a listen address"),
    ("--web.listen-address=[::1:10061", "not a listen address"),
    ("--web.telemetry-path=/metrics?x", "not a URL path"),
    ("--web.telemetry-path=/metrics#x", "not a URL path"),
    ("--web.telemetry-path=/met rics", "not a URL path"),
    ("--web.telemetry-path=metrics", "not a URL path"),
    ("--web.telemetry-path=/", "not a URL path"),
    ("--web.max-requests=-1", "not a non-negative integer"),
    ("--web.max-requests=\uff14", "not a non-negative integer"),
    ("--web.write-timeout=0", "must be positive"),
    ("--web.config.file=/does/not/exist.yml", "cannot read"),
])
def test_bad_web_flags_exit_2_with_one_line(flag: str, fragment: str) -> None:
    assert fragment in _fails(flag)


def test_bad_web_config_file_exits_2_with_one_line(tmp_path: Path) -> None:
    f = tmp_path / "web.yml"
    f.write_text("tls_server_config:\n  cert_file: missing.pem\n  key_file: missing.key\n")
    line = _fails(f"--web.config.file={f}")
    assert line.startswith("numa-exporter: error: --web.config.file=") and "missing.pem" in line
    f.write_text("basic_auth_users:\n  prom: hunter2\n")
    assert "not a bcrypt hash" in _fails(f"--web.config.file={f}")
