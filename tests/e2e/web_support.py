"""Support for the HTTP layer's tests and benchmark: a large fixture root, raw sockets,
the daemon's thread count and RSS, and throw-away TLS material made with ``openssl``."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TWO_NODE = REPO / "tests" / "fixtures" / "roots" / "two_node"
NO_UDEV = REPO / "tests" / "fixtures" / "udev" / "none.json"
TEMPLATE_PID = "130"


def build_many_root(dst: Path, processes: int) -> Path:
    """Return a root like two_node's with ``processes`` copies of its process 130.

    Each copy gets its own pid (in the directory names, stat and status), so the exposition
    grows with ``processes`` (about 4 KB per process).
    """
    proc = dst / "proc"
    proc.mkdir(parents=True)
    src = TWO_NODE / "proc"
    for entry in src.iterdir():
        if not entry.name.isdigit():
            (proc / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (dst / "sys").symlink_to(TWO_NODE / "sys", target_is_directory=True)
    tpl = src / TEMPLATE_PID
    texts = {p.relative_to(tpl): p.read_bytes() for p in tpl.rglob("*") if p.is_file()}
    for i in range(processes):
        pid = str(20000 + i)
        for rel, data in texts.items():
            out = proc / pid / Path(*(pid if part == TEMPLATE_PID else part
                                      for part in rel.parts))
            out.parent.mkdir(parents=True, exist_ok=True)
            if rel.name in ("stat", "status"):
                new = pid.encode()
                data = re.sub(rb"(?m)^130 |(?<=Pid:\t)130$|(?<=Tgid:\t)130$",
                              lambda m, new=new: m.group(0).replace(b"130", new), data)
            out.write_bytes(data)
    return dst


def root_args(root: Path) -> list[str]:
    """Return the daemon flags that scan ``root`` (every process, no udev)."""
    return [f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}",
            f"--accelerator.records={NO_UDEV}", "--process.min-resident=0", "--process.top=0",
            "--log.format=json"]


def threads_of(pid: int) -> int:
    """Return the number of threads of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads: line for {pid}")


def rss_of(pid: int) -> int:
    """Return the resident bytes of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS: line for {pid}")


def open_fds(pid: int) -> int:
    """Return how many file descriptors process ``pid`` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def raw_request(port: int, data: bytes, host: str = "127.0.0.1", timeout: float = 20.0,
                ) -> bytes:
    """Send ``data`` and return everything the server sends until it closes."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        s.sendall(data)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                return b"".join(chunks)
            chunks.append(b)


def wait_port(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
    """Wait until something accepts connections on (host, port)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {host}:{port}")


def has_ipv6_loopback() -> bool:
    """Return whether ::1 can be bound here."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def make_pki(d: Path) -> dict[str, Path]:
    """Return paths of a throw-away CA, a server certificate for 127.0.0.1/::1/localhost and
    a client certificate (SAN DNS:scraper), all made with ``openssl`` in ``d``."""
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed for the TLS tests"
    d.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=numa test CA")
    for name, san, usage in (
            ("server", "DNS:localhost,IP:127.0.0.1,IP:::1", "serverAuth"),
            ("client", "DNS:scraper", "clientAuth")):
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        (d / f"{name}.ext").write_text(
            f"subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {k: d / v for k, v in {"ca": "ca.pem", "cert": "server.pem", "key": "server.key",
                                  "client_cert": "client.pem",
                                  "client_key": "client.key"}.items()}
