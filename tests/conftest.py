"""Shared test helpers: fixture roots and a config reading one, a fake clock, a running daemon,
scraping and the golden switch."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from numa_exporter.config import Config
from numa_exporter.config_file import load_pins
from numa_exporter.roots import Roots

# No wall-clock threshold in a test: Hypothesis' per-example deadline (200 ms) fails property
# tests whenever the shared machine is busy, whatever the code does. Work stays bounded by the
# examples' sizes, which each test sets.
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")

TESTS = Path(__file__).resolve().parent
ROOTS = TESTS / "fixtures" / "roots"
REPO = TESTS.parent


class FakeClock:
    """A monotonic clock that only moves when told: ``step`` per call, plus what a test adds
    to ``t``."""

    def __init__(self, step: float = 0.0) -> None:
        self.t = 0.0
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def fixture_config(root: Path | str, *, rootfs: bool = False, pins: bool = False,
                   **kw: Any) -> Config:
    """Return a Config that reads the fixture root ``root`` (a path, or a name under
    tests/fixtures/roots): its ``proc`` and ``sys`` (and ``rootfs`` with ``rootfs=True``),
    every process selected (``min_resident`` 0 unless ``kw`` sets it), and the rest of
    ``kw``. With ``pins=True`` the root's ``config.toml`` gives the home and accelerator pins
    and its ``udev.json`` the accelerator records, where the root has them."""
    base = ROOTS / root if isinstance(root, str) else root
    kw.setdefault("min_resident", 0)
    if pins and (base / "config.toml").exists():
        kw["home_pins"], kw["accelerator_pins"] = load_pins(base / "config.toml")
    if pins and (base / "udev.json").exists():
        kw["accelerator_records"] = base / "udev.json"
    roots = (Roots(base / "proc", base / "sys", base / "rootfs") if rootfs
             else Roots(base / "proc", base / "sys"))
    return Config(roots=roots, **kw)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite golden exposition files from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden")) or os.environ.get(
        "UPDATE_GOLDEN") == "1"


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """Undo any structlog configuration a test made (inspect and bench configure it)."""
    yield
    import structlog

    structlog.reset_defaults()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exporter_command() -> list[str]:
    """Return the installed console script when present, else ``python -m numa_exporter``."""
    script = shutil.which("numa-exporter", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "numa_exporter"]


def scrape(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> str:
        return scrape(self.url + "/metrics")

    def wait_scans(self, n: int, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: "
                                     f"{self.log_path.read_text()[-2000:]}")
            try:
                last = self.metrics()
            except OSError:
                time.sleep(0.1)
                continue
            for line in last.splitlines():
                if line.startswith("numa_exporter_scans_total ") and float(line.split()[1]) >= n:
                    return last
            time.sleep(0.1)
        raise AssertionError(f"no {n} scans within {timeout}s; log: "
                             f"{self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[object]:
    started: list[Daemon] = []

    def _start(*args: str, user: str | None = None) -> Daemon:
        port = free_port()
        log_path = tmp_path / f"daemon-{port}.log"
        cmd = [*exporter_command(), f"--web.listen-address=127.0.0.1:{port}", *args]
        if user:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        d = Daemon(proc, port, log_path)
        started.append(d)
        return d

    yield _start
    for d in started:
        d.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session where a test made the code count an error under a source name not
    registered in ``sources/error_sources.py`` (it would be served as ``source="other"``)."""
    from numa_exporter.sources.error_sources import UNREGISTERED
    if UNREGISTERED:
        print(f"\nerror sources counted but not registered: {sorted(UNREGISTERED)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
