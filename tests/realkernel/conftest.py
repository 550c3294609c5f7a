"""Session fixtures for the real-kernel tier: one QEMU guest per node layout and kernel.

Every scenario test runs on each kernel generation (``kernel``: Debian's 5.10, 6.1, 6.12 and
7.3; a scenario that needs only one says why in ``Scenario.one_kernel`` and is skipped on the
others with that reason). Unless ``$NUMA_REALKERNEL_KERNELS`` names them, 5.10 and 7.3 run
only the scenarios whose outcome can differ there (scenarios.EDGE_UNITS, the CI budget); the
others skip saying so. Each layout's guest boots once per session and kernel and runs
every scenario it is asked for (those of the selected tests, or all of them) one after the
other; the tests then read the folders it left. When the host cannot run the guest at all
the tests are skipped with a loud reason; when the guest runs but the exporter misbehaves
they fail.

Environment: ``NUMA_REALKERNEL_SKIP=1`` skips the tier; ``NUMA_REALKERNEL_EXPORTER`` overrides
the exporter command (default ``<this python> -m numa_exporter``); ``NUMA_REALKERNEL_RESULTS``
keeps results in that folder instead of pytest's temporary one. See guest.py for the others.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import guest as harness
from .results import ScenarioRun, format_report, report_rows
from .scenarios import BY_NAME, for_layout

# 2node: + 120 s for kubelet_pods (about 40 s of it under TCG on the build machine)
LAYOUT_TIMEOUT_S = {"2node": 720.0, "4node": 300.0}


@dataclass
class GuestRun:
    """A finished guest run of one layout on one kernel."""

    layout: str
    kernel: str
    path: Path
    boot: harness.BootResult
    assets_s: float
    wall_s: float
    scenarios: list[str] = field(default_factory=list)

    def scenario(self, name: str) -> ScenarioRun:
        """Return the folder of scenario ``name``; fail when the guest did not produce it."""
        d = self.path / "results" / name
        if not (d / "summary.json").exists():
            pytest.fail(f"guest run {self.path} has no results for {name}; job log tail:\n"
                        f"{self.boot.job_log[-3000:]}")
        return ScenarioRun(d)

    def guest_file(self, rel: str) -> str:
        """Return a guest-wide file saved by the runner (``_guest/<rel>``)."""
        return (self.path / "results" / "_guest" / rel).read_text()


_RUNS: dict[tuple[str, str], GuestRun] = {}
_SKIPS: dict[tuple[str, str], str] = {}


def exporter_command() -> list[str]:
    """Return the command that starts the exporter inside the guest (same path as here)."""
    env = os.environ.get("NUMA_REALKERNEL_EXPORTER")
    return shlex.split(env) if env else [sys.executable, "-m", "numa_exporter"]


def guest_assets(unit: str, kernel: str, *needed: str) -> harness.Assets:
    """Return the assets of ``kernel`` for the guest module ``unit`` (its name after
    ``test_``); skip, saying why, when the tier is off, the host cannot run the guest, the CI
    budget leaves ``unit`` out on ``kernel`` (scenarios.EDGE_UNITS), or the guest kernel lacks
    one of the ``needed`` features (guest.FEATURES, detected in the guest)."""
    if os.environ.get("NUMA_REALKERNEL_SKIP") == "1":
        pytest.skip("real-kernel tier disabled by NUMA_REALKERNEL_SKIP=1")
    left_out = harness.budget_skip(unit, kernel)
    if left_out:
        pytest.skip(left_out)
    try:
        assets = harness.ensure_assets(kernel)
        missing = harness.missing_feature(assets, *needed) if needed else ""
    except harness.RealKernelUnavailable as exc:
        print(f"REAL-KERNEL TESTS SKIPPED: {exc}", file=sys.__stderr__, flush=True)
        pytest.skip(f"REAL-KERNEL TESTS SKIPPED: cannot prepare the QEMU guest: {exc}")
    if missing:
        pytest.skip(f"{unit} cannot run: {missing}")
    return assets


def _loud(config: pytest.Config, msg: str) -> None:
    """Print ``msg`` on the terminal right away (not captured) and on stderr."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"[realkernel] {msg}", yellow=True, bold=True)
    else:
        print(f"[realkernel] {msg}", file=sys.__stderr__, flush=True)


def _wanted(session: pytest.Session, layout: str, kernel: str) -> list[str]:
    """Return the scenarios of ``layout`` on ``kernel`` the selected tests need (all when
    unclear)."""
    every = [s.name for s in for_layout(layout, kernel)
             if not harness.budget_skip(s.name, kernel)]
    names: set[str] = set()
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("scenario") if callspec is not None else None
        if isinstance(name, str) and name in BY_NAME:
            if callspec is not None and callspec.params.get("kernel", kernel) != kernel:
                continue
            if BY_NAME[name].layout == layout:
                names.add(name)
        elif "guest" in getattr(item, "fixturenames", ()):
            return every
    return [n for n in every if n in names] or every


def results_folder(base: Path, layout: str, kernel: str) -> Path:
    """Return the results folder of a layout's guest on ``kernel`` (6.1 keeps the plain
    layout name)."""
    return base / (layout if kernel == harness.DEFAULT_GENERATION else f"{layout}-{kernel}")


def _start(config: pytest.Config, session: pytest.Session, layout: str, kernel: str,
           base: Path) -> GuestRun:
    """Boot ``layout``'s guest on ``kernel`` and run its scenarios; skip/fail loudly when it
    cannot."""
    if os.environ.get("NUMA_REALKERNEL_SKIP") == "1":
        pytest.skip("real-kernel tier disabled by NUMA_REALKERNEL_SKIP=1")
    t0 = time.monotonic()
    try:
        assets = harness.ensure_assets(kernel)
    except harness.RealKernelUnavailable as exc:
        reason = f"REAL-KERNEL TESTS SKIPPED: cannot prepare the QEMU guest: {exc}"
        _loud(config, reason)
        pytest.skip(reason)
    assets_s = time.monotonic() - t0
    cmd = exporter_command()
    try:
        probe = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=120,
                               check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"exporter command {cmd} is not runnable: {exc}")
    if probe.returncode != 0:
        pytest.fail(f"exporter command {cmd} --help exited {probe.returncode}: "
                    f"{probe.stderr[-2000:]}")
    names = _wanted(session, layout, kernel)
    path = results_folder(base, layout, kernel)
    path.mkdir(parents=True, exist_ok=True)
    _loud(config, f"booting {layout} guest ({assets.kernel_release}) for {len(names)} "
                  f"scenarios: {', '.join(names)}; results in {path}")
    t1 = time.monotonic()
    try:
        boot = harness.run_scenarios(layout, names, path, cmd, timeout=LAYOUT_TIMEOUT_S[layout],
                                   assets=assets)
    except harness.RealKernelUnavailable as exc:
        reason = f"REAL-KERNEL TESTS SKIPPED: {exc}"
        _loud(config, reason)
        pytest.skip(reason)
    run = GuestRun(layout, kernel, path, boot, assets_s, time.monotonic() - t1, names)
    if boot.userland_s is None:
        tail = "\n".join(boot.console.splitlines()[-20:])
        reason = (f"REAL-KERNEL TESTS SKIPPED: the {layout} guest never reached userland "
                  f"({'; '.join(boot.attempts)}); console tail:\n{tail}")
        _loud(config, reason)
        pytest.skip(reason)
    _loud(config, f"{layout}: accel={boot.accel} image={boot.boot_image} "
                  f"userland after {boot.userland_s:.2f} s (guest uptime "
                  f"{boot.guest_uptime_userland_s} s), guest total {boot.total_s:.1f} s, "
                  f"assets {assets_s:.1f} s")
    _RUNS[(layout, kernel)] = run
    if not boot.ok:
        hint = (f" (its limit: {LAYOUT_TIMEOUT_S[layout] * harness.timeout_factor():.0f} s; "
                "NUMA_REALKERNEL_TIMEOUT_FACTOR raises it)" if boot.timed_out else "")
        pytest.fail(f"{layout} guest job failed (rc={boot.rc}, timed_out={boot.timed_out})"
                    f"{hint}; job log tail:\n{boot.job_log[-4000:]}")
    return run


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that takes ``kernel`` once per generation, the generation last in its
    id (``test_x[membind_remote-7.3]``): parametrized after the test's own parameters."""
    if "kernel" in metafunc.fixturenames:
        metafunc.parametrize("kernel", list(harness.GENERATIONS), indirect=True)


@pytest.fixture
def kernel(request: pytest.FixtureRequest) -> str:
    """Return the kernel generation a test runs on (each test runs once per generation)."""
    return str(request.param)


GuestGetter = Callable[[str, str], GuestRun]


@pytest.fixture(scope="session")
def guest(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> GuestGetter:
    """Return a function (layout, kernel) -> GuestRun that boots each pair at most once."""
    keep = os.environ.get("NUMA_REALKERNEL_RESULTS")
    base = Path(keep).resolve() if keep else tmp_path_factory.mktemp("realkernel")
    failed: dict[tuple[str, str], BaseException] = {}

    def get(layout: str, kernel: str = harness.DEFAULT_GENERATION) -> GuestRun:
        key = (layout, kernel)
        if key in _RUNS:
            return _RUNS[key]
        if key in _SKIPS:
            pytest.skip(_SKIPS[key])
        if key in failed:
            raise failed[key]
        try:
            return _start(request.config, request.session, layout, kernel, base)
        except pytest.skip.Exception as exc:
            _SKIPS[key] = str(exc.msg)
            raise
        except BaseException as exc:
            failed[key] = exc
            raise

    return get


@pytest.fixture
def run(guest: GuestGetter, scenario: str, kernel: str) -> ScenarioRun:
    """Return the results of ``scenario`` on ``kernel``; skip where the scenario runs on one
    kernel only (with its reason); fail when the in-guest runner reported errors."""
    s = BY_NAME[scenario]
    if kernel not in s.kernels:
        pytest.skip(f"{scenario} runs on {', '.join(s.kernels)} only: {s.one_kernel}")
    left_out = harness.budget_skip(scenario, kernel)
    if left_out:
        pytest.skip(left_out)
    r = guest(s.layout, kernel).scenario(scenario)
    if r.summary.get("errors"):
        pytest.fail(f"{scenario}: {r.summary['errors']}\n{r.summary.get('traceback', '')}\n"
                    f"{r.log_tail()}")
    return r


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print boot facts and the exporter-vs-kernel table of every guest run."""
    for (layout, kernel), run in _RUNS.items():
        b = run.boot
        terminalreporter.section(f"real-kernel {layout} guest, kernel {kernel}")
        terminalreporter.write_line(
            f"kernel {b.kernel}, accel {b.accel}, image {b.boot_image}, userland after "
            f"{b.userland_s and round(b.userland_s, 2)} s, guest run {b.total_s:.1f} s, "
            f"assets {run.assets_s:.1f} s, results {run.path}")
        try:
            rows = report_rows(run.path)
            text = format_report(rows)
            (run.path / "report.txt").write_text(text + "\n")
            (run.path / "report.json").write_text(json.dumps(rows, indent=1))
            terminalreporter.write_line(text)
        except Exception as exc:  # the report is informative only
            terminalreporter.write_line(f"(no report: {type(exc).__name__}: {exc})")
    for (layout, kernel), reason in _SKIPS.items():
        terminalreporter.section(f"real-kernel {layout} guest, kernel {kernel}, SKIPPED")
        terminalreporter.write_line(reason)
