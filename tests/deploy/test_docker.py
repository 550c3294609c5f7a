"""Dockerfile: hadolint, structure, and its build/install steps run outside a container.

The builder's `pip wheel` command runs, with the builder's ENV, on a copy of exactly the
build context that .dockerignore lets through (the wheel must hold the compiled numa_maps
scanner: the builder has a compiler), the runtime's `pip install` installs that wheel, and
the image's HEALTHCHECK and CMD run against the installed exporter. Where a container engine answers
(`docker info`), the image is also built and run with the documented `docker run` recipe;
elsewhere (CI may have no daemon) that test skips and says why.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import uuid
import zipfile
from pathlib import Path

import pytest

from .helpers import (
    FIXTURE_ROOTS,
    REPO,
    exporter_available,
    exporter_command,
    free_port,
    http_get,
    missing,
    require_tool,
    run,
    running,
    tools_required,
)

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def instructions(text: str | None = None) -> list[tuple[str, str]]:
    """Return (INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text() if text is None else text
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        buf += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            word, _, rest = buf.partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def exec_form(args: str) -> list[str]:
    import json

    value = json.loads(args)
    assert isinstance(value, list)
    return [str(v) for v in value]


def dockerignore_admits(rel: str) -> bool:
    """Docker's rule: the last pattern matching the path (or a parent of it) decides."""
    admitted = True
    parts = rel.split("/")
    for raw in DOCKERIGNORE.read_text().splitlines():
        pat = raw.strip()
        if not pat or pat.startswith("#"):
            continue
        negate = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, pat.replace("**/", ""))
                  or pat == "**" for p in prefixes)
        if hit:
            admitted = negate
    return admitted


def test_hadolint_passes() -> None:
    hadolint = require_tool("hadolint")
    r = run([hadolint, "--no-color", str(DOCKERFILE)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_would_catch_problems(tmp_path: Path) -> None:
    hadolint = require_tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text().replace("# hadolint ignore=DL3008\n", "")
                   .replace("USER 10061:10061", "USER root"))
    r = run([hadolint, "--no-color", str(bad)])
    assert r.returncode != 0
    assert "DL3008" in r.stdout and "DL3002" in r.stdout, r.stdout


def test_multi_stage_non_root_healthcheck_labels() -> None:
    builder, runtime = stages()
    assert builder[0][1].endswith(" AS builder")
    assert "python:3.11-slim" in DOCKERFILE.read_text()
    args = dict(a.split("=", 1) for k, a in instructions() if k == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    kinds = [k for k, _ in runtime]
    user = [a for k, a in runtime if k == "USER"]
    assert user and not re.match(r"^(0|root)\b", user[-1]), user
    assert kinds.index("USER") > max(i for i, k in enumerate(kinds) if k == "RUN")
    assert ("EXPOSE", "10061") in runtime
    assert "HEALTHCHECK" in kinds
    labels = " ".join(a for k, a in runtime if k == "LABEL")
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    version = re.search(r"ARG VERSION=(\S+)", DOCKERFILE.read_text())
    assert version and version.group(1) == PYPROJECT["project"]["version"]
    assert exec_form(dict(runtime)["ENTRYPOINT"]) == ["numa-exporter"]


def test_build_context_holds_what_the_wheel_needs() -> None:
    builder = stages()[0]
    copied = " ".join(a for k, a in builder if k == "COPY").split()
    readme = PYPROJECT["project"]["readme"]
    for need in ("pyproject.toml", "setup.py", readme, *PYPROJECT["project"]["license-files"],
                 "src/"):
        assert need in copied, f"builder does not COPY {need}"
        assert (REPO / need).exists(), need
        assert dockerignore_admits(need.rstrip("/")), f".dockerignore excludes {need}"
    assert dockerignore_admits("src/numa_exporter/cli.py")
    assert dockerignore_admits(f"src/{SCANNER_SOURCE}")
    assert not dockerignore_admits(f"src/{SCANNER_SOURCE[:-2]}.cpython-311-x86_64-linux-gnu.so")
    assert not dockerignore_admits("tests/deploy/test_docker.py")
    assert not dockerignore_admits(".venv/bin/python")
    assert not dockerignore_admits("src/numa_exporter/__pycache__/cli.cpython-311.pyc")


SCANNER_SOURCE = "numa_exporter/parsers/_numa_maps_fast.c"
SCANNER_IN_WHEEL = re.compile(r"numa_exporter/parsers/_numa_maps_fast\.cpython-3\d+-[^/]+\.so")
SAMPLER_IN_WHEEL = re.compile(
    r"numa_exporter/readers/sampled/_sampled_fast\.cpython-3\d+-[^/]+\.so")


def _context_copy(dest: Path) -> None:
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith((".git/", ".venv/")) or not path.is_file():
            continue
        if dockerignore_admits(rel):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)


def builder_env() -> dict[str, str]:
    """Return the variables the builder stage's ENV instructions set."""
    out: dict[str, str] = {}
    for kind, args in stages()[0]:
        if kind == "ENV":
            for part in shlex.split(args):
                key, eq, value = part.partition("=")
                assert eq, f"ENV {args}: write KEY=value"
                out[key] = value
    return out


def has_compiler() -> bool:
    """Return whether this host can compile a Python C extension (a compiler and Python.h)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(cc) is not None and headers.exists()


def _pip_wheel(context: Path, dist: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the builder's ``pip wheel`` command on ``context`` into ``dist``; skip (fail under
    CI) when pip cannot reach the package index for its build isolation."""
    wheel_cmd = next(a for k, a in stages()[0] if k == "RUN" and "pip wheel" in a)
    argv = [a.replace("/dist", str(dist)) for a in shlex.split(wheel_cmd)]
    assert argv[:2] == ["pip", "wheel"] and argv[-1] == "."
    r = run([sys.executable, "-m", *argv], timeout=600, cwd=context, env=env)
    if r.returncode != 0 and re.search(r"NewConnectionError|Could not find a version|"
                                       r"No matching distribution", r.stdout + r.stderr):
        if tools_required():
            pytest.fail("pip wheel needs the package index for build isolation:\n" + r.stderr)
        pytest.skip("pip wheel could not reach the package index (build isolation)")
    return r


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Return (dist folder, wheel) of the builder's ``pip wheel`` on the build context, with
    the builder's ENV, where a compiler is present as it is in the builder stage."""
    if not has_compiler():
        missing("a C compiler with Python's headers (the image's builder stage installs gcc)")
    tmp = tmp_path_factory.mktemp("image")
    context = tmp / "context"
    _context_copy(context)
    dist = tmp / "dist"
    r = _pip_wheel(context, dist, {**os.environ, **builder_env()})
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = sorted(dist.glob("numa_exporter-*.whl"))
    assert len(wheels) == 1, wheels
    return dist, wheels[0]


def test_wheel_ships_the_compiled_scanner(built_wheel: tuple[Path, Path]) -> None:
    """The image installs this wheel: it must hold the compiled numa_maps scanner, not only
    the pure-Python fallback (which is what a build context without setup.py gives)."""
    _, wheel = built_wheel
    with zipfile.ZipFile(wheel) as z:
        compiled = [n for n in z.namelist() if SCANNER_IN_WHEEL.fullmatch(n)]
    assert compiled, f"{wheel.name} lacks the compiled numa_maps scanner"
    assert not wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        sampler = [n for n in z.namelist() if SAMPLER_IN_WHEEL.fullmatch(n)]
    assert sampler, f"{wheel.name} lacks the compiled sampled-placement loops"


def test_builder_fails_rather_than_ship_the_fallback(tmp_path: Path) -> None:
    """With the builder's ENV, a compiler that fails fails the build; without it, the same
    build quietly falls back to the pure-Python scanner (what a user's `pip install` gets)."""
    env = builder_env()
    assert env.get("NUMA_EXPORTER_REQUIRE_COMPILED") == "1", env
    context = tmp_path / "context"
    _context_copy(context)
    broken = {**os.environ, "CC": "false"}  # a C compiler that always fails
    r = _pip_wheel(context, tmp_path / "required", {**broken, **env})
    assert r.returncode != 0, "the build went on without the compiled scanner"
    quiet = {k: v for k, v in broken.items() if k != "NUMA_EXPORTER_REQUIRE_COMPILED"}
    r = _pip_wheel(context, tmp_path / "optional", quiet)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next((tmp_path / "optional").glob("numa_exporter-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        assert not [n for n in z.namelist() if SCANNER_IN_WHEEL.fullmatch(n)], wheel.name
        assert "numa_exporter/parsers/numa_maps.py" in z.namelist()


def test_image_install_steps_work_outside_a_container(built_wheel: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    """Builder: pip wheel on the build context; runtime: pip install of that wheel."""
    runtime = stages()[1]
    install = next(a for k, a in runtime if k == "RUN" and "pip install" in a)
    mount = re.match(r"--mount=type=bind,from=builder,source=(\S+),target=(\S+)\s+(.*)", install)
    assert mount and mount.group(1) == mount.group(2) == "/dist", install
    install_cmd = mount.group(3)
    dist, built = built_wheel

    argv = shlex.split(install_cmd)
    assert argv[:2] == ["pip", "install"]
    wheels = [w for a in argv[2:] if a.startswith("/dist/")
              for w in glob.glob(a.replace("/dist", str(dist)))]
    assert wheels == [str(built)], f"{install_cmd} matches {wheels}"
    wheel = Path(wheels[0])
    version = PYPROJECT["project"]["version"]
    assert wheel.name.startswith(f"numa_exporter-{version}-cp3"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert "numa_exporter/collectors/spec.py" in names
        assert "numa_exporter/py.typed" in names
        entry = z.read(f"numa_exporter-{version}.dist-info/entry_points.txt").decode()
        meta = z.read(f"numa_exporter-{version}.dist-info/METADATA").decode()
    assert "numa-exporter = numa_exporter.cli:main" in entry
    for dep in PYPROJECT["project"]["dependencies"]:
        assert f"Requires-Dist: {dep}" in meta, dep
    # SPDX metadata (PEP 639), not the deprecated free-text License field
    assert "License-Expression: Apache-2.0" in meta, meta[:2000]
    assert "License-File: LICENSE" in meta and "numa_exporter-" in wheel.name
    assert f"numa_exporter-{version}.dist-info/licenses/LICENSE" in names

    # The runtime stage's install, into a target dir (its dependencies come from this venv).
    target = tmp_path / "target"
    argv = [a for a in argv[2:] if not a.startswith("/dist/")]
    r = run([sys.executable, "-m", "pip", "install", *argv, "--no-deps", "--target",
             str(target), str(wheel)], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = run([sys.executable, str(target / "bin" / "numa-exporter"), "--version"], env=env)
    assert r.returncode == 0 and version in r.stdout + r.stderr, r.stdout + r.stderr
    r = run([sys.executable, "-c", "import numa_exporter; print(numa_exporter.__file__)"],
            env=env)
    assert r.stdout.strip().startswith(str(target)), r.stdout
    r = run([sys.executable, "-c", "from numa_exporter.parsers import numa_maps as m; "
             "print(m.COMPILED, m._numa_maps_fast.__file__)"], env=env)
    assert r.stdout.startswith(f"True {target}"), r.stdout + r.stderr


def test_healthcheck_and_cmd_against_the_exporter(tmp_path: Path) -> None:
    """The image's CMD flags start the exporter; its HEALTHCHECK passes, then fails when down."""
    if not exporter_available():
        missing("the numa-exporter command")
    root = FIXTURE_ROOTS / "two_node"
    if not root.is_dir():
        missing(f"fixture root {root}")
    runtime = stages()[1]
    cmd = exec_form(dict(runtime)["CMD"])
    assert cmd == ["--path.procfs=/host/proc", "--path.sysfs=/host/sys"]
    health = dict(runtime)["HEALTHCHECK"]
    hc = exec_form(health[health.index("CMD") + 3:].strip())
    assert hc[0] == "python" and "http://127.0.0.1:10061/" in hc[-1], hc
    port = free_port()
    hc = [sys.executable, *hc[1:-1], hc[-1].replace(":10061/", f":{port}/")]
    args = [a.replace("/host/proc", str(root / "proc")).replace("/host/sys", str(root / "sys"))
            for a in cmd]
    with running([*exporter_command(), *args, f"--web.listen-address=127.0.0.1:{port}"],
                 tmp_path / "exporter.log", f"http://127.0.0.1:{port}/", what="exporter"):
        r = run(hc, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
    r = run(hc, timeout=30)
    assert r.returncode != 0, "the healthcheck passes with the exporter stopped"


def _container_engine() -> str | None:
    """Return docker (or podman) when its daemon answers ``info``, else None."""
    for name in ("docker", "podman"):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            if run([path, "info"], timeout=30).returncode == 0:
                return path
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def documented_docker_run() -> list[str]:
    """Return the argv of the ``docker run`` recipe in docs/deploy.md."""
    text = (REPO / "docs" / "deploy.md").read_text()
    block = text.split("\ndocker run ", 1)[1].split("```", 1)[0]
    return shlex.split("docker run " + block.replace("\\\n", " "))


def test_image_builds_and_runs_with_the_documented_recipe(tmp_path: Path) -> None:
    engine = _container_engine()
    if engine is None:
        pytest.skip("no container engine answers `docker info` here (no daemon, as in CI "
                    "without one): the image is not built; its steps are tested above")
    tag = f"numa-exporter:test-{uuid.uuid4().hex[:8]}"
    r = run([engine, "build", "-t", tag, str(REPO)], timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    name = tag.replace(":", "-")
    port = free_port()
    argv = documented_docker_run()
    image = next(a for a in argv if a.startswith("numa-exporter:"))
    at = argv.index(image)
    argv = [*argv[1:at], tag, *argv[at + 1:], f"--web.listen-address=127.0.0.1:{port}"]
    argv[argv.index("--name") + 1] = name
    assert "--cgroupns=host" in argv and "--pid=host" in argv
    try:
        r = run([engine, *argv], timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        deadline = time.monotonic() + 120
        body = b""
        while time.monotonic() < deadline:
            status, body = http_get(f"http://127.0.0.1:{port}/metrics")
            if status == 200 and b"numa_exporter_scans_total 1" in body:
                break
            time.sleep(1)
        logs = run([engine, "logs", name], timeout=60)
        assert b"numa_exporter_scans_total" in body, logs.stdout + logs.stderr
        assert b"numa_exporter_build_info{" in body
        scanned = re.search(rb'numa_exporter_processes\{state="scanned"\} (\S+)', body)
        assert scanned and float(scanned.group(1)) > 0, logs.stdout + logs.stderr
    finally:
        run([engine, "rm", "-f", name], timeout=120)
        run([engine, "rmi", "-f", tag], timeout=120)
