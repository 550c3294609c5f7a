"""Command line: ``numa-exporter`` (the daemon) and ``numa-exporter inspect PID``."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import structlog
from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.registry import CollectorRegistry

from numa_exporter import __version__, logs
from numa_exporter.config import (
    COLLECTORS,
    DEFAULT_PORT,
    AcceleratorPin,
    Config,
    HomePin,
    parse_duration,
    parse_size,
)
from numa_exporter.roots import RootError, Roots
from numa_exporter.web import WebConfigError, add_web_flags, settings_from_args

log = structlog.get_logger()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Exit with one line on stderr and status 2."""
        self.exit(2, f"numa-exporter: error: {message}\n")


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"bad regular expression {text!r}: {exc}") from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> float:
    try:
        v = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _duration_or_zero(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"not a fraction in 0-1: {text!r}")
    return v


def _positive_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the daemon's flags (node_exporter style)."""
    p = _Parser(
        prog="numa-exporter",
        description="Prometheus exporter of per-process NUMA memory placement.",
    )
    p.add_argument("--version", action="version", version=f"numa-exporter {__version__}")
    a = p.add_argument
    a("--web.listen-address", dest="listen", default=f":{DEFAULT_PORT}",
      help=f"address to listen on (default :{DEFAULT_PORT})")
    a("--web.telemetry-path", dest="telemetry_path", default="/metrics",
      help="path under which to expose metrics (default /metrics)")
    a("--path.procfs", dest="procfs", default="/proc", help="procfs mountpoint (default /proc)")
    a("--path.sysfs", dest="sysfs", default="/sys", help="sysfs mountpoint (default /sys)")
    a("--path.rootfs", dest="rootfs", default="/", help="host root filesystem (default /)")
    a("--scan.interval", dest="interval", type=_duration, default=15.0,
      help="time between scans, e.g. 15s, 1m (default 15s)")
    a("--scan.budget", dest="budget", type=_duration, default=None,
      help="time one scan may spend on processes before leaving the rest for the next "
           "(default: two thirds of the interval, at most 10s)")
    a("--process.min-resident", dest="min_resident", type=_size, default=64 << 20,
      help="scan processes with at least this resident memory, e.g. 64MiB; 0 = every "
           "process (default 64MiB)")
    a("--process.top", dest="top", type=_positive_int, default=200,
      help="scan at most this many processes, largest RSS first; 0 = no limit (default 200)")
    a("--process.include", dest="include", type=_regex, default=None,
      help="only scan processes whose comm or cmdline matches this regex")
    a("--process.exclude", dest="exclude", type=_regex, default=None,
      help="never scan processes whose comm or cmdline matches this regex")
    a("--config.file", dest="config_file", default=None,
      help="TOML file pinning home nodes or accelerators per process (see README)")
    a("--accelerator.records", dest="records", default=None,
      help="read accelerators from this udev records JSON (numa-exporter udev-dump) instead "
           "of udev: for hosts or containers without udev, and for tests")
    a("--accelerator.rdma", dest="rdma", action=argparse.BooleanOptionalAction, default=False,
      help="count RDMA/high-speed NICs as accelerators (default off)")
    a("--drift.warmup-age", dest="warmup_age", type=_duration_or_zero, default=300.0,
      help="a process must be this old before its baseline placement is taken (default 5m)")
    a("--drift.warmup-scans", dest="warmup_scans", type=_positive_int, default=4,
      help="... and its RSS stable over this many scans (default 4)")
    a("--drift.rss-tolerance", dest="rss_tolerance", type=_fraction, default=0.05,
      help="... within this relative change, 0-1 (default 0.05)")
    for c in COLLECTORS:
        a(f"--collector.{c}", dest=f"collector_{c}", action=argparse.BooleanOptionalAction,
          default=True, help=f"enable the {c} collector (default on)")
    a("--log.level", dest="log_level", choices=logs.LEVELS, default="info",
      help="debug, info, warn or error (default info)")
    a("--log.format", dest="log_format", choices=("logfmt", "json"), default=None,
      help="logfmt or json (default: logfmt on a terminal, json otherwise)")
    add_web_flags(p)
    return p


def config_from_args(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> Config:
    """Return the Config the parsed flags describe; exits 2 for inconsistent values."""
    from numa_exporter.pins import PinError, load_pins

    try:
        web = settings_from_args(ns)
    except WebConfigError as exc:
        parser.error(str(exc))
    roots = Roots(Path(ns.procfs), Path(ns.sysfs), Path(ns.rootfs))
    try:
        roots.validate()
    except RootError as exc:
        parser.error(str(exc))
    budget = ns.budget if ns.budget is not None else min(ns.interval * 2 / 3, 10.0)
    home_pins: tuple[HomePin, ...] = ()
    accel_pins: tuple[AcceleratorPin, ...] = ()
    if ns.records and not Path(ns.records).is_file():
        parser.error(f"--accelerator.records={ns.records}: not a file")
    if ns.config_file:
        try:
            home_pins, accel_pins = load_pins(Path(ns.config_file))
        except PinError as exc:
            parser.error(f"--config.file: {exc}")
    return Config(
        roots=roots,
        listen_address=ns.listen,
        telemetry_path=ns.telemetry_path,
        scan_interval=ns.interval,
        scan_budget=budget,
        min_resident=ns.min_resident,
        top=ns.top,
        include=ns.include,
        exclude=ns.exclude,
        collectors=frozenset(c for c in COLLECTORS if getattr(ns, f"collector_{c}")),
        log_level=ns.log_level,
        log_format=ns.log_format or logs.default_format(),
        home_pins=home_pins,
        accelerator_pins=accel_pins,
        accelerator_rdma=ns.rdma,
        accelerator_records=Path(ns.records) if ns.records else None,
        warmup_age=ns.warmup_age,
        warmup_scans=max(ns.warmup_scans, 1),
        warmup_rss_tolerance=ns.rss_tolerance,
        web=web,
    )


def run_daemon(config: Config) -> int:
    """Serve until SIGTERM/SIGINT; return the exit status."""
    from numa_exporter.app import build_app
    from numa_exporter.web import WebSettings, serve

    registry = CollectorRegistry(auto_describe=False)  # snapshot families: cached per scan
    live = CollectorRegistry(auto_describe=False)  # the exporter's own, rendered per scrape
    web = config.web if isinstance(config.web, WebSettings) else WebSettings()
    if not web.disable_exporter_metrics:
        ProcessCollector(registry=live)
        PlatformCollector(registry=live)
        GCCollector(registry=live)
    app = build_app(config, registry)
    try:
        server = serve(web, registry, lambda: app.sampler.snapshot, live)
    except OSError as exc:
        print(f"numa-exporter: error: cannot listen on {config.listen_address}: {exc.strerror}",
              file=sys.stderr)
        return 1
    log.info("listening", address=config.listen_address, path=config.telemetry_path,
             tls=web.config.tls is not None, basic_auth=bool(web.config.users),
             version=__version__, procfs=str(config.roots.procfs),
             sysfs=str(config.roots.sysfs), interval=config.scan_interval,
             nodes=list(app.sampler.scanner.topology.nodes))
    app.start()
    done = threading.Event()

    def _stop(signum: int, _frame: object) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    done.wait()
    app.stop()
    server.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``numa-exporter`` command; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "udev-dump":
        import json

        from numa_exporter.sources.accelerators import UdevAcceleratorSource

        print(json.dumps(UdevAcceleratorSource().dump(), indent=2, sort_keys=True))
        return 0
    if args and args[0] == "inspect":
        from numa_exporter.inspect import main as inspect_main

        return inspect_main(args[1:])
    parser = build_parser()
    ns = parser.parse_args(args)
    config = config_from_args(ns, parser)
    logs.configure(config.log_level, config.log_format)
    return run_daemon(config)
