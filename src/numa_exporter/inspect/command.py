"""``numa-exporter inspect PID``: read one process as a scan would and print the diagnosis.

The command's arguments are parsed in ``cli.py``; :func:`run` does the I/O, and
``inspect/diagnosis.py`` the judging.
"""

from __future__ import annotations

import json
import sys

from numa_exporter.config import Config
from numa_exporter.inspect.diagnosis import render, report
from numa_exporter.parsers.text import label_text
from numa_exporter.readers.accelerator_use import accelerator_source
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.process_files import read_cgroup
from numa_exporter.scan.scanner import Scanner
from numa_exporter.sources.errors import Denied, Gone, SourceError
from numa_exporter.sources.procfs import ProcFS


def systemd_unit(config: Config, pid: int) -> tuple[str | None, str | None]:
    """Return the process's systemd cgroup path and unit as label text (None where unknown)."""
    try:
        cg = read_cgroup(ProcFS(config.roots.procfs).process(pid),
                         ErrorReporter(quiet=True))
    except SourceError:
        return None, None
    if cg is None:
        return None, None
    path, unit = cg.systemd_path, cg.unit
    return (label_text(path) if path is not None else None,
            label_text(unit) if unit is not None else None)


def run(config: Config, pid: int, *, as_json: bool = False) -> int:
    """Print the inspection of ``pid``; return 0, or 1 when the process cannot be read."""
    scanner = Scanner(config, accelerators=accelerator_source(config))
    try:
        sample, system = scanner.sample_one(pid)
    except Gone:
        print(f"numa-exporter inspect: process {pid} does not exist", file=sys.stderr)
        return 1
    except Denied as exc:
        print(f"numa-exporter inspect: permission denied reading {exc.path} "
              "(needs root or CAP_SYS_PTRACE)", file=sys.stderr)
        return 1
    except SourceError as exc:
        print(f"numa-exporter inspect: cannot read process {pid}: {exc}", file=sys.stderr)
        return 1
    if sample is None:
        print(f"numa-exporter inspect: {pid} is a kernel thread (no user memory)",
              file=sys.stderr)
        return 1
    rep = report(sample, system, *systemd_unit(config, pid), view=scanner.kubernetes_view)
    sys.stdout.write(json.dumps(rep, indent=2, sort_keys=True) + "\n" if as_json
                     else render(rep))
    return 0
