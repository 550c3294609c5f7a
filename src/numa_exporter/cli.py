"""Command line: ``numa-exporter`` (the daemon), ``inspect PID`` and ``udev-dump``.

One parser: the daemon's flags sit on the top level (the daemon runs when no command is
given), the commands are subparsers, and the flags they share with the daemon (paths, config
file, accelerator sources) are defined once in ``_add_shared``.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NoReturn

import structlog

from numa_exporter import __version__, logs
from numa_exporter.collectors.registry import COLLECTORS, DEFAULT_OFF
from numa_exporter.config import (
    DEFAULT_PORT,
    MAX_DAMON_CGROUPS,
    AcceleratorPin,
    Config,
    HomePin,
)
from numa_exporter.flags import duration as _duration
from numa_exporter.flags import positive_duration as _positive_duration
from numa_exporter.flags import size as _size
from numa_exporter.patterns import Pattern, PatternError, compile_pattern
from numa_exporter.roots import RootError, Roots
from numa_exporter.web import WebConfigError, WebSettings, add_web_flags, settings_from_args

log = structlog.get_logger()

MIN_INTERVAL = 0.1  # seconds; shorter intervals only burn CPU on page-table walks
MAX_INTERVAL = 86400.0
MAX_BUDGET = 10.0  # the default budget is two thirds of the interval, at most this
MAX_COUNT = 1_000_000  # for --process.top and --drift.warmup-scans
MAX_PID = 1 << 22  # the kernel's PID_MAX_LIMIT


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Exit with one line on stderr and status 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


#: Logged once at start when --placement.sample-above is given (its threshold is gone).
SAMPLE_ABOVE_DEPRECATED = ("--placement.sample-above is deprecated and ignored, except that 0 "
                           "still turns sampling off")

def _regex(text: str) -> Pattern:
    try:
        return compile_pattern(text)
    except PatternError as exc:
        raise argparse.ArgumentTypeError(f"bad regular expression {text!r}: {exc}") from None


def _interval(text: str) -> float:
    v = _duration(text)
    if not MIN_INTERVAL <= v <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(f"must be between 100ms and 24h: {text!r}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v <= 1:  # also false for nan
        raise argparse.ArgumentTypeError(f"not a fraction in 0-1: {text!r}")
    return v


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 7 or int(text) > MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"not an integer in 0-{MAX_COUNT}: {text[:20]!r}")
    return int(text)


def _pid(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 8 or not 0 < int(text) <= MAX_PID:
        raise argparse.ArgumentTypeError(f"not a process id: {text[:20]!r}")
    return int(text)


def _host_path(text: str) -> str:
    if not text.startswith("/") or "\0" in text or len(text) > 4096:
        raise argparse.ArgumentTypeError(f"not an absolute host path: {text[:80]!r}")
    return text


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        sys.stdout.write(version_text())
        parser.exit(0)


def version_text() -> str:
    """Return what ``--version`` prints: versions of the exporter, Python, the client, kernel."""
    try:
        client = version("prometheus-client")
    except PackageNotFoundError:
        client = "unknown"
    return (
        f"numa-exporter, version {__version__}\n"
        f"  python:            {platform.python_version()} ({platform.python_implementation()})\n"
        f"  prometheus-client: {client}\n"
        f"  kernel:            {platform.release()}\n"
        f"  platform:          {platform.system().lower()}/{platform.machine()}\n"
    )


def _add_shared(p: argparse.ArgumentParser, *, top: bool) -> None:
    """Add the flags the daemon and ``inspect`` share.

    On a command's parser (``top=False``) they have no defaults of their own, so a value
    given before the command (``numa-exporter --path.procfs=X inspect 1``) is kept.
    """
    def d(value: object) -> object:
        return value if top else argparse.SUPPRESS

    a = p.add_argument
    a("--path.procfs", dest="procfs", metavar="PATH", default=d("/proc"),
      help="procfs mount point, e.g. /host/proc in a container (default /proc)")
    a("--path.sysfs", dest="sysfs", metavar="PATH", default=d("/sys"),
      help="sysfs mount point: NUMA nodes, cgroups, PCI devices (default /sys)")
    a("--path.rootfs", dest="rootfs", metavar="PATH", default=d("/"),
      help="where the host's root filesystem is visible, e.g. /host in a container; the "
           "kubelet's checkpoints, the CDI specs (/etc/cdi, /var/run/cdi), /var/log/pods "
           "and the container runtimes' state are read under it (default /)")
    a("--kubelet.root-dir", dest="kubelet_root_dir", metavar="PATH",
      type=_host_path, default=d("/var/lib/kubelet"),
      help="the kubelet's --root-dir as a host path, read under --path.rootfs "
           "(default /var/lib/kubelet)")
    a("--config.file", dest="config_file", metavar="PATH", default=d(None),
      help="TOML file pinning home nodes or accelerators per process (README: Config "
           "file); the daemon rereads it on SIGHUP")
    a("--accelerator.records", dest="records", metavar="PATH", default=d(None),
      help="read accelerators from this udev records JSON (numa-exporter udev-dump) instead "
           "of udev: for hosts or containers without udev, and for tests")
    a("--accelerator.rdma", dest="rdma", action=argparse.BooleanOptionalAction,
      default=d(False), help="count RDMA/high-speed NICs as accelerators (default off)")


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the daemon's flags (node_exporter style) and its commands."""
    p = _Parser(
        prog="numa-exporter",
        description="Prometheus exporter of per-process NUMA memory placement. Without a "
                    "command it runs the exporter; SIGHUP rereads --config.file.",
        epilog="Durations: 500ms, 15s, 1m30s, 2h. Sizes: 4096, 64MiB, 1GiB. Regular "
               "expressions use RE2 syntax (as Prometheus relabelling does) and match "
               "anywhere in a process's comm or command line (first 4096 characters).",
    )
    p.add_argument("--version", action=_VersionAction,
                   help="print the versions of numa-exporter, Python, prometheus-client and "
                        "the kernel, and exit")
    a = p.add_argument
    a("--web.listen-address", dest="listen", default=f":{DEFAULT_PORT}",
      help=f"address to listen on (default :{DEFAULT_PORT})")
    a("--web.telemetry-path", dest="telemetry_path", default="/metrics",
      help="path under which to expose metrics (default /metrics)")
    _add_shared(p, top=True)
    _add_scan_flags(a)
    _add_placement_flags(a)
    _add_drift_flags(a)
    for c in COLLECTORS:
        on = c not in DEFAULT_OFF
        a(f"--collector.{c}", dest=f"collector_{c}", action=argparse.BooleanOptionalAction,
          default=on, help=f"enable the {c} collector (default {'on' if on else 'off'})")
    _add_damon(a)
    _add_log_flags(a)

    add_web_flags(p)
    _add_commands(p)
    return p


def _add_scan_flags(a: Callable[..., object]) -> None:
    """Add the --scan.* and --process.* flags: how often, how long, which processes."""
    a("--scan.interval", dest="interval", metavar="DURATION", type=_interval, default=15.0,
      help="time between scans, 100ms to 24h (default 15s)")
    a("--scan.budget", dest="budget", metavar="DURATION", type=_positive_duration,
      default=None,
      help="time one scan may spend on processes before leaving the rest for the next; "
           "at most the interval (default: two thirds of the interval, at most 10s)")
    a("--process.min-resident", dest="min_resident", metavar="SIZE", type=_size,
      default=64 << 20,
      help="scan processes with at least this resident memory; 0 = every process "
           "(default 64MiB)")
    a("--process.top", dest="top", metavar="N", type=_count, default=200,
      help="scan at most this many processes, largest RSS first; 0 = no limit (default 200)")
    a("--process.detail-above", dest="detail_above", metavar="SIZE", type=_size,
      default=1 << 30,
      help="serve the full per-process breakdown (bytes per node and kind, threads per "
           "node, read costs, tiers) only for processes with at least this many placed "
           "bytes (kept until below 90%% of it for 10 scans in a row); smaller ones get "
           "totals, ratios, bindings and drift (the series budget); "
           "0 = every process in full (default 1GiB, the process alerts' floor)")
    a("--process.detail-top", dest="detail_top", metavar="N", type=_count, default=10,
      help="serve the full per-process breakdown to the N largest processes (placed bytes) "
           "too, whatever their size (kept until ranked past 1.5 N for 10 scans in a row); "
           "every other process still gets its bytes per node (without kinds); "
           "0 = none (default 10)")
    a("--process.include", dest="include", metavar="REGEX", type=_regex, default=None,
      help="only scan processes whose comm or cmdline matches this RE2 regex")
    a("--process.exclude", dest="exclude", metavar="REGEX", type=_regex, default=None,
      help="never scan processes whose comm or cmdline matches this RE2 regex")


def _add_placement_flags(a: Callable[..., object]) -> None:
    """Add the --placement.* flags: how a process's placement is read."""
    a("--placement.hold-budget", dest="hold_budget", metavar="DURATION", type=_duration,
      default=0.005,
      help="longest the process's mmap lock may be held by one read() of its numa_maps "
           "(the walk of its largest mapping); a process estimated above it has its "
           "placement sampled with move_pages instead; below it the reader that measured "
           "cheaper is used; 0 = no bound (default 5ms)")
    a("--placement.sample-above", dest="sample_above", metavar="DURATION", type=_duration,
      default=None,
      help="deprecated, logs a warning: the reader is chosen by --placement.hold-budget and "
           "the measured cost of both; only 0 still has an effect: never sample, read every "
           "process in full")
    a("--placement.full-interval", dest="full_interval", metavar="DURATION", type=_duration,
      default=0.0,
      help="also read sampled processes in full this often, for exact numbers; 0 = never "
           "(default 0)")
    a("--placement.policy-interval", dest="policy_interval", metavar="DURATION",
      type=_duration, default=300.0,
      help="read a sampled process in full for its memory policies (only numa_maps shows "
           "them) at discovery, then this often or once its resident size moved by half, "
           "where --placement.policy-hold-budget allows; its policies are exported until "
           "twice this old, then left out with the verdicts that rest on them; 0 = never "
           "(a sampled process exports no policies) (default 5m)")
    a("--placement.policy-hold-budget", dest="policy_hold_budget", metavar="DURATION",
      type=_duration, default=0.1,
      help="longest the mmap lock may be held by one read() of numa_maps in a full read "
           "made for memory policies (--placement.policy-interval) or of a quiet process "
           "otherwise sampled (no fault, the same size, nothing migrated: read once, then "
           "kept); a process estimated above it is not read for either; 0 = never "
           "(default 100ms)")


def _add_drift_flags(a: Callable[..., object]) -> None:
    """Add --scan.process-budget and the --drift.* flags."""
    a("--scan.process-budget", dest="process_budget", metavar="DURATION", type=_duration,
      default=0.5,
      help="average time a full read of one process may take per scan; where sampling is "
           "unavailable a costlier process is read every k-th scan; 0 = no limit "
           "(default 500ms)")
    a("--drift.warmup-age", dest="warmup_age", metavar="DURATION", type=_duration,
      default=300.0,
      help="a process must be this old before its baseline placement is taken (default 5m)")
    a("--drift.warmup-scans", dest="warmup_scans", metavar="N", type=_count, default=4,
      help="... and its RSS stable over this many scans (default 4)")
    a("--drift.rss-tolerance", dest="rss_tolerance", metavar="FRACTION", type=_fraction,
      default=0.05, help="... within this relative change, 0-1 (default 0.05)")


def _add_log_flags(a: Callable[..., object]) -> None:
    """Add the --log.* flags."""
    a("--log.level", dest="log_level", metavar="LEVEL", choices=logs.LEVELS, default="info",
      help="debug, info, warn or error (default info)")
    a("--log.format", dest="log_format", metavar="FORMAT", choices=logs.FORMATS,
      default=logs.DEFAULT_FORMAT,
      help=f"logfmt or json; keys ts, level, caller, msg (default {logs.DEFAULT_FORMAT})")


def _add_commands(p: argparse.ArgumentParser) -> None:
    """Add the commands inspect and udev-dump (with their flags) to ``p``."""
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                           description="without a command, numa-exporter runs the exporter",
                           help="inspect or udev-dump; COMMAND --help for its flags")
    i = sub.add_parser("inspect", help="diagnose one process's placement, no server needed",
                       description="Diagnose one process's NUMA placement: bytes per node, "
                                   "bindings, accelerators, a verdict and remedies.")
    i.add_argument("pid", metavar="PID", type=_pid, help="the process to inspect")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_shared(i, top=False)
    sub.add_parser("udev-dump", help="print this machine's udev records as JSON, for "
                                     "--accelerator.records",
                   description="Print this machine's udev records of accelerators and NICs "
                               "as JSON, the format --accelerator.records reads.")


def _add_damon(a: Callable[..., object]) -> None:
    """Add the --collector.damon.* settings (used only with --collector.damon)."""
    a("--collector.damon.run-dir", dest="damon_run_dir", metavar="DIR",
      default="/run/numa-exporter",
      help="where the damon collector keeps the state that proves which kdamonds are its "
           "own (default /run/numa-exporter)")
    a("--collector.damon.sample-interval", dest="damon_sample", metavar="DURATION",
      type=_positive_duration, default=0.005,
      help="DAMON's sampling interval for the exporter's kdamonds (default 5ms)")
    a("--collector.damon.aggregation-interval", dest="damon_aggregation", metavar="DURATION",
      type=_positive_duration, default=0.1,
      help="DAMON's aggregation interval: access counts are per this interval (default "
           "100ms, i.e. 20 samples)")
    a("--collector.damon.max-regions", dest="damon_max_regions", metavar="N", type=_count,
      default=1000, help="most regions DAMON splits a process into (default 1000)")
    a("--collector.damon.processes", dest="damon_processes", metavar="N", type=_count,
      default=1, help="processes watched, one kdamond each, largest resident first "
                      "(default 1)")
    a("--collector.damon.mode", dest="damon_mode", choices=("auto", "vaddr", "paddr"),
      default="auto",
      help="vaddr: hot memory of the largest watched processes; paddr: the host's hot and "
           "idle bytes per node (for kernels with DAMON_PADDR but not DAMON_VADDR); auto: "
           "vaddr where the kernel has it, else paddr (default auto)")
    a("--collector.damon.yield-to-modules", dest="damon_yield_to_modules",
      action=argparse.BooleanOptionalAction, default=False,
      help="stop the exporter's kdamonds while one of the kernel's DAMON modules "
           "(damon_reclaim, damon_lru_sort, damon_stat) is enabled, and resume when none is: "
           "a module cannot start while they run (default off: the refusal is reported)")
    a("--collector.damon.cgroups", dest="damon_cgroups", metavar="N", type=_count,
      default=0,
      help="hot memory per cgroup and node from the one paddr kdamond: one memcg-filtered "
           f"stat scheme for each of the N largest cgroups (pod containers first; at most "
           f"{MAX_DAMON_CGROUPS}), where the kernel offers per-filter passed bytes (6.14+); "
           "elsewhere said once and counted, and hot memory goes on as without it "
           "(default 0: off)")
    a("--collector.damon.hot-threshold", dest="damon_hot_threshold", metavar="FRACTION",
      type=_fraction, default=0.05,
      help="a region is hot when accessed in at least this fraction of an aggregation "
           "interval's samples (and at least once); 0-1 (default 0.05: 1 of 20)")


def roots_from_args(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> Roots:
    """Return the validated roots the flags name; exits 2 when one is unusable."""
    roots = Roots(Path(ns.procfs), Path(ns.sysfs), Path(ns.rootfs))
    try:
        roots.validate()
    except RootError as exc:
        parser.error(str(exc))
    return roots


def pins_from_args(ns: argparse.Namespace, parser: argparse.ArgumentParser, roots: Roots
                   ) -> tuple[tuple[HomePin, ...], tuple[AcceleratorPin, ...]]:
    """Return the pins of --config.file, checked against this host's nodes; exits 2 if bad."""
    from numa_exporter.config_file import PinError, check_nodes, load_pins

    if ns.records and not Path(ns.records).is_file():
        parser.error(f"--accelerator.records={ns.records}: not a file")
    if not ns.config_file:
        return (), ()
    path = Path(ns.config_file)
    try:
        homes, accels = load_pins(path)
    except PinError as exc:
        parser.error(f"--config.file: {exc}")
    try:
        check_nodes(homes, host_nodes(roots), accels)
    except PinError as exc:
        parser.error(f"--config.file: {path}: {exc}")
    return homes, accels


def host_nodes(roots: Roots) -> tuple[int, ...]:
    """Return the NUMA nodes of the host whose sysfs ``roots`` names (``(0,)`` without NUMA)."""
    from numa_exporter.readers.error_report import ErrorReporter
    from numa_exporter.readers.system import read_topology
    from numa_exporter.sources.sysfs import NodeSysFS

    return read_topology(NodeSysFS(roots.sysfs), ErrorReporter(quiet=True)).nodes


def config_from_args(ns: argparse.Namespace, parser: argparse.ArgumentParser
                     ) -> tuple[Config, WebSettings]:
    """Return the Config and the web settings the parsed flags describe; exits 2 for
    inconsistent values."""
    try:
        web = settings_from_args(ns)
    except WebConfigError as exc:
        parser.error(str(exc))
    roots = roots_from_args(ns, parser)
    if ns.budget is None:
        budget = min(ns.interval * 2 / 3, MAX_BUDGET)
    elif ns.budget > ns.interval:
        parser.error(f"--scan.budget ({ns.budget:g}s) is longer than --scan.interval "
                     f"({ns.interval:g}s): a scan must end before the next one starts")
    else:
        budget = ns.budget
    home_pins, accel_pins = pins_from_args(ns, parser, roots)
    return Config(
        roots=roots,
        listen_address=ns.listen,
        telemetry_path=ns.telemetry_path,
        scan_interval=ns.interval,
        scan_budget=budget,
        min_resident=ns.min_resident,
        top=ns.top,
        detail_above=ns.detail_above,
        detail_top=ns.detail_top,
        include=ns.include,
        exclude=ns.exclude,
        collectors=frozenset(c for c in COLLECTORS if getattr(ns, f"collector_{c}")),
        log_level=ns.log_level,
        log_format=ns.log_format,
        home_pins=home_pins,
        accelerator_pins=accel_pins,
        accelerator_rdma=ns.rdma,
        accelerator_records=Path(ns.records) if ns.records else None,
        config_file=Path(ns.config_file) if ns.config_file else None,
        warmup_age=ns.warmup_age,
        warmup_scans=max(ns.warmup_scans, 1),
        warmup_rss_tolerance=ns.rss_tolerance,
        sampling=ns.sample_above != 0,  # None: not given
        hold_budget=ns.hold_budget,
        full_interval=ns.full_interval,
        policy_interval=ns.policy_interval,
        policy_hold_budget=ns.policy_hold_budget,
        process_budget=ns.process_budget,
        kubelet_root_dir=ns.kubelet_root_dir,
        damon=ns.collector_damon,
        damon_run_dir=Path(ns.damon_run_dir),
        damon_sample=ns.damon_sample,
        damon_aggregation=ns.damon_aggregation,
        damon_max_regions=ns.damon_max_regions,
        damon_processes=max(ns.damon_processes, 1),
        damon_hot_threshold=ns.damon_hot_threshold,
        damon_mode=ns.damon_mode,
        damon_yield_to_modules=ns.damon_yield_to_modules,
        damon_cgroups=min(ns.damon_cgroups, MAX_DAMON_CGROUPS),
    ), web


def inspect_config(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> Config:
    """Return the Config ``inspect`` scans with: every process, one scan, the daemon's pins."""
    roots = roots_from_args(ns, parser)
    homes, accels = pins_from_args(ns, parser, roots)
    return Config(roots=roots, min_resident=0, warmup_scans=1, home_pins=homes,
                  kubelet_root_dir=ns.kubelet_root_dir,
                  accelerator_pins=accels, accelerator_rdma=ns.rdma,
                  accelerator_records=Path(ns.records) if ns.records else None,
                  config_file=Path(ns.config_file) if ns.config_file else None)


def _udev_dump() -> int:
    import json

    from numa_exporter.readers.accelerators import UdevAcceleratorSource

    try:
        dump = UdevAcceleratorSource().dump()
    except Exception as exc:  # no libudev on this host
        print(f"numa-exporter udev-dump: error: udev unavailable: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(dump, indent=2, sort_keys=True))
    return 0


def _inspect(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from numa_exporter.inspect.command import run

    logs.configure("error", logs.DEFAULT_FORMAT)
    return run(inspect_config(ns, parser), ns.pid, as_json=ns.json)


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``numa-exporter`` command; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns = parser.parse_args(args)
    commands: dict[str, Callable[[], int]] = {
        "udev-dump": _udev_dump,
        "inspect": lambda: _inspect(ns, _command_parser(parser, "inspect")),
    }
    if ns.command in commands:
        return commands[ns.command]()
    from numa_exporter.daemon import block_signals, run_daemon

    block_signals()  # before the first thread: every thread inherits the mask
    sink = logs.LogSink(sys.stderr.fileno())
    logs.configure(ns.log_level, ns.log_format, sink)
    try:
        config, web = config_from_args(ns, parser)  # a bad flag: one line on stderr, exit 2
        sys.stderr = logs.sink_stream(sink)  # from here a failing stderr only loses lines
        warning = config.roots.missing_nodes()
        if warning:
            log.warning(warning)
        if ns.sample_above is not None:
            log.warning(SAMPLE_ABOVE_DEPRECATED, sampling=config.sampling)
        return run_daemon(config, web, sink)
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        sink.close()
