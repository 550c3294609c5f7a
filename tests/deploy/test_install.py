"""docs/deploy.md's install commands, run as written, and the unit verified against the result.

The documented block creates a virtual environment in /opt/numa-exporter, installs the
checkout into it and copies the unit and its flags file into /etc. Here the commands run
without ``sudo``; the venv goes to the real /opt/numa-exporter when running as root and it
does not exist yet (removed afterwards), else to a temporary folder standing in for it, with
the unit's paths rewritten to match. /etc is always a temporary folder; the ``systemctl``
lines are not run (no service manager in a test). Then ``systemd-analyze verify`` checks the
installed unit, which fails when its ExecStart names a script the install did not create.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import FIXTURE_ROOTS, REPO, free_port, require_tool, run, running, tools_required

DEPLOY_MD = REPO / "docs" / "deploy.md"
OPT = Path("/opt/numa-exporter")


def documented_commands() -> list[str]:
    """Return the commands of the install block in docs/deploy.md, in order."""
    text = DEPLOY_MD.read_text()
    block = text.split("<!-- install:begin -->", 1)[1].split("<!-- install:end -->", 1)[0]
    body = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [ln.strip() for ln in body.splitlines() if ln.strip()]


@contextlib.contextmanager
def _prefix(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() == 0 and not OPT.exists():
        try:
            yield OPT
        finally:
            shutil.rmtree(OPT, ignore_errors=True)
    else:
        yield tmp_path / "opt" / "numa-exporter"


def _python() -> str:
    """Return the python3 the docs' first command names, or this interpreter's base."""
    py = shutil.which("python3")
    if py:
        r = run([py, "-c", "import sys, venv; print(sys.version_info >= (3, 11))"])
        if r.stdout.strip() == "True":
            return py
    return str(Path(sys.base_prefix) / "bin" / "python3")


def test_documented_install_commands_and_the_installed_unit(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    systemd_analyze = require_tool("systemd-analyze")
    commands = documented_commands()
    assert [c.split()[:2] for c in commands] == [
        ["sudo", "python3"], ["sudo", "/opt/numa-exporter/bin/pip"], ["sudo", "install"],
        ["sudo", "install"], ["sudo", "systemctl"], ["sudo", "systemctl"]], commands
    build = REPO / "build"  # setuptools' in-tree build folder: do not leave one behind
    if not build.exists():
        request.addfinalizer(lambda: shutil.rmtree(build, ignore_errors=True))
    etc = tmp_path / "etc"
    (etc / "systemd" / "system").mkdir(parents=True)
    (etc / "default").mkdir()
    with _prefix(tmp_path) as prefix:
        for cmd in commands:
            argv = shlex.split(cmd)
            assert argv[0] == "sudo"
            argv = argv[1:]
            if argv[0] == "systemctl":
                continue
            argv = [a.replace(str(OPT), str(prefix)).replace("/etc/", f"{etc}/")
                    for a in argv]
            if argv[0] == "python3":
                argv[0] = _python()
            r = run(argv, cwd=REPO, timeout=900)
            out = r.stdout + r.stderr
            if r.returncode != 0 and re.search(
                    r"NewConnectionError|Could not find a version|No matching distribution|"
                    r"Temporary failure in name resolution", out):
                if tools_required():
                    pytest.fail(f"{cmd}: the package index is unreachable:\n{out[-3000:]}")
                pytest.skip(f"{cmd}: the package index is unreachable")
            assert r.returncode == 0, f"{cmd}:\n{out[-3000:]}"

        exe = prefix / "bin" / "numa-exporter"
        assert exe.is_file() and os.access(exe, os.X_OK), f"{exe} was not installed"
        r = run([str(exe), "--version"])
        assert r.returncode == 0 and r.stdout.startswith("numa-exporter, version"), r.stderr

        unit = etc / "systemd" / "system" / "numa-exporter.service"
        env = etc / "default" / "numa-exporter"
        assert env.is_file() and unit.is_file()
        text = unit.read_text()
        assert f"ExecStart={OPT}/bin/numa-exporter $NUMA_EXPORTER_ARGS" in text
        if prefix != OPT:
            unit.write_text(text.replace(str(OPT), str(prefix)))
        r = run([systemd_analyze, "verify", "--man=no", str(unit)], timeout=120)
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr

        # the installed script runs with the shipped flags file, as the unit would start it
        args = shlex.split(env.read_text().split("NUMA_EXPORTER_ARGS=", 1)[1].splitlines()[0])
        port = free_port()
        args = [a for a in args if not a.startswith("--web.listen-address=")]
        root = FIXTURE_ROOTS / "two_node"
        with running([str(exe), *args, f"--web.listen-address=127.0.0.1:{port}",
                      f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}",
                      f"--accelerator.records={FIXTURE_ROOTS.parent / 'udev' / 'none.json'}"],
                     tmp_path / "exporter.log", f"http://127.0.0.1:{port}/metrics",
                     what="installed exporter", ready_body=b"numa_exporter_scans_total 1"):
            pass


def test_unit_verify_fails_when_the_script_is_missing(tmp_path: Path) -> None:
    """The check above can fail: verify reports an ExecStart that names no executable."""
    systemd_analyze = require_tool("systemd-analyze")
    unit = tmp_path / "numa-exporter.service"
    text = (REPO / "deploy" / "systemd" / "numa-exporter.service").read_text()
    unit.write_text(text.replace(str(OPT), str(tmp_path / "absent")))
    r = run([systemd_analyze, "verify", "--man=no", str(unit)], timeout=120)
    assert r.returncode != 0 or "absent" in r.stdout + r.stderr, r.stdout + r.stderr
