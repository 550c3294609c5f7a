"""Reading what a real-kernel guest run left behind, and computing the kernel's own figures.

Everything the tests compare the exporter with is computed here independently of the
exporter's code: per-node bytes from ``numa_maps``, ``numastat -p`` totals, vmstat counters.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .scenarios import BY_NAME, Scenario

MiB = 1 << 20


def numa_maps_node_bytes(text: str, only: str | None = None) -> dict[int, int]:
    """Return bytes per node summed over numa_maps lines (N<node>=pages x kernelpagesize_kB).

    ``only="huge"`` counts only hugetlb mappings (lines with the ``huge`` flag).
    """
    totals: dict[int, int] = defaultdict(int)
    for line in text.splitlines():
        fields = line.split()
        if only == "huge" and "huge" not in fields:
            continue
        m = re.search(r"\bkernelpagesize_kB=(\d+)", line)
        page = int(m.group(1)) * 1024 if m else 4096
        for node, pages in re.findall(r"\bN(\d+)=(\d+)", line):
            totals[int(node)] += int(pages) * page
    return dict(totals)


def kernel_page_bytes(text: str) -> dict[int, int]:
    """Return bytes per node of the numa_maps lines that hold no page of the process's own:
    no ``file=``, no ``heap``/``stack``/``huge`` flag and no ``anon=`` count (7.x's vDSO data
    page, ``[vvar]``). The exporter leaves them out; numa_maps and numastat -p count them."""
    totals: dict[int, int] = defaultdict(int)
    for line in text.splitlines():
        fields = line.split()[2:]
        if any(f.startswith(("file=", "anon=")) or f in ("heap", "stack", "huge")
               for f in fields):
            continue
        for node, pages in re.findall(r"\bN(\d+)=(\d+)", line):
            totals[int(node)] += int(pages) * 4096
    return dict(totals)


def numastat_totals_mib(text: str) -> dict[int, float]:
    """Return the ``Total`` row of ``numastat -p PID`` per node, in MiB (numastat's "MB")."""
    header: list[int] = []
    for line in text.splitlines():
        if not header and "Node" in line and "Total" in line:
            header = [int(n) for n in re.findall(r"Node (\d+)", line)]
        elif header and line.startswith("Total"):
            values = [float(v) for v in line.split()[1:]]
            return dict(zip(header, values[: len(header)], strict=True))
    raise ValueError(f"no numastat Total row in:\n{text}")


def numastat_by_pid_mib(text: str) -> dict[int, dict[int, float]]:
    """Return the ``Total`` row per node (MiB) of each ``numastat -p`` section, by pid."""
    out: dict[int, dict[int, float]] = {}
    for part in re.split(r"(?=^Per-node process memory usage)", text, flags=re.M):
        m = re.search(r"for PID (\d+)", part)
        if m:
            out[int(m.group(1))] = numastat_totals_mib(part)
    return out


def kv_file(text: str, sep: str | None = None) -> dict[str, int]:
    """Return ``name value`` lines (vmstat, sched ``a : b``) as a dict of ints."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split(":") if sep == ":" else line.split()
        if len(parts) == 2:
            try:
                out[parts[0].strip()] = int(parts[1].strip())
            except ValueError:
                continue
    return out


def memory_numa_stat(text: str) -> dict[str, dict[int, int]]:
    """Return cgroup v2 memory.numa_stat as {field: {node: bytes}}."""
    out: dict[str, dict[int, int]] = {}
    for line in text.splitlines():
        name, *rest = line.split()
        out[name] = {int(k[1:]): int(v) for k, v in (x.split("=") for x in rest)}
    return out


class Exposition:
    """A scraped /metrics text, parsed with prometheus_client's parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                self.samples.append((s.name, dict(s.labels), float(s.value)))

    def select(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        """Return (labels, value) of the samples named ``name`` whose labels include ``labels``."""
        return [
            (lab, v) for n, lab, v in self.samples
            if n == name and all(lab.get(k) == val for k, val in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float | None:
        """Return the single value of ``name`` with ``labels``; None when absent."""
        found = self.select(name, **labels)
        if len(found) > 1:
            raise AssertionError(f"{name}{labels} matched {len(found)} samples: {found}")
        return found[0][1] if found else None

    def node_bytes(self, pid: int, kind: str | None = None) -> dict[int, float]:
        """Return numa_process_memory_bytes of ``pid`` summed over kinds (or one kind) per node."""
        out: dict[int, float] = defaultdict(float)
        for lab, v in self.select("numa_process_memory_bytes", pid=str(pid)):
            if kind is None or lab.get("kind") == kind:
                out[int(lab["node"])] += v
        return dict(out)

    def ratio(self, pid: int) -> float | None:
        """Return numa_process_remote_memory_ratio of ``pid``."""
        return self.value("numa_process_remote_memory_ratio", pid=str(pid))


@dataclass
class KernelView:
    """The guest kernel's files saved next to one scrape (``kernel-NN`` or ``-after``)."""

    path: Path

    def text(self, name: str) -> str:
        """Return a saved file's text ('' when it was not saved)."""
        p = self.path / name
        return p.read_text(errors="replace") if p.exists() else ""

    @cached_property
    def node_bytes(self) -> dict[int, int]:
        """Return bytes per node from the saved numa_maps."""
        return numa_maps_node_bytes(self.text("numa_maps"))

    @cached_property
    def numastat_mib(self) -> dict[int, float]:
        """Return ``numastat -p`` totals per node in MiB."""
        return numastat_totals_mib(self.text("numastat_p.txt"))

    @cached_property
    def vmstat(self) -> dict[str, int]:
        """Return /proc/vmstat as a dict."""
        return kv_file(self.text("vmstat"))

    @cached_property
    def sched(self) -> dict[str, int]:
        """Return the integer fields of /proc/<pid>/sched."""
        return kv_file(self.text("sched"), sep=":")

    def task_cpus(self) -> dict[int, int]:
        """Return the last CPU (stat field 39) of every saved task, by tid."""
        out = {}
        for stat in sorted((self.path / "task").glob("*/stat")):
            after_comm = stat.read_text().rsplit(")", 1)[1].split()
            out[int(stat.parent.name)] = int(after_comm[36])
        return out


@dataclass
class ScenarioRun:
    """One scenario's folder from a guest run."""

    path: Path

    @cached_property
    def summary(self) -> dict[str, Any]:
        """Return summary.json."""
        return dict(json.loads((self.path / "summary.json").read_text()))

    @property
    def scenario(self) -> Scenario:
        """Return the scenario definition."""
        return BY_NAME[self.path.name]

    @property
    def pid(self) -> int:
        """Return the pid the assertions concern (the child for the shared-pool scenario)."""
        return int(self.summary["pid"])

    @property
    def count(self) -> int:
        """Return the number of scrapes taken."""
        return len(self.summary.get("scrapes", []))

    def scrape(self, i: int) -> Exposition:
        """Return scrape ``i`` (negative counts from the end)."""
        i = i % self.count
        return Exposition((self.path / f"scrape-{i:02d}.txt").read_text())

    def kernel(self, i: int, after: bool = True) -> KernelView:
        """Return the kernel view captured after (or before) scrape ``i``."""
        i = i % self.count
        return KernelView(self.path / (f"kernel-{i:02d}-after" if after else f"kernel-{i:02d}"))

    def log_tail(self, n: int = 3000) -> str:
        """Return the tails of the workload and exporter logs, for failure messages."""
        out = []
        for name in ("workload.out", "exporter.log", "exporter.out"):
            p = self.path / name
            if p.exists():
                out.append(f"--- {name}\n{p.read_text(errors='replace')[-n:]}")
        return "\n".join(out)


def close(a: float, b: float, rel: float = 0.02, abs_bytes: float = MiB) -> bool:
    """Return True when ``a`` and ``b`` differ by at most max(rel x larger, abs_bytes)."""
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_bytes)


def report_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Return, per scenario of a guest run, the exporter's figures next to the kernel's.

    Each row: scenario, pid, exporter per-node MiB and ratio (first and last scrape), kernel
    numa_maps per-node MiB and numastat -p per-node MiB of the last scrape, errors.
    """
    rows: list[dict[str, Any]] = []
    for d in sorted(p for p in (run_dir / "results").iterdir() if p.is_dir()):
        if d.name.startswith("_") or not (d / "summary.json").exists():
            continue
        run = ScenarioRun(d)
        row: dict[str, Any] = {"scenario": d.name, "errors": run.summary.get("errors"),
                               "elapsed_s": run.summary.get("elapsed_s")}
        if run.count == 0 or "pid" not in run.summary:
            rows.append(row)
            continue
        row["pid"] = run.pid
        try:
            first, last = run.scrape(0), run.scrape(-1)
            row["exporter_mib"] = {n: round(v / MiB, 2) for n, v in
                                   sorted(last.node_bytes(run.pid).items())}
            row["exporter_ratio"] = [first.ratio(run.pid), last.ratio(run.pid)]
        except Exception as exc:
            row["exporter_error"] = f"{type(exc).__name__}: {exc}"
        kv = run.kernel(-1)
        row["numa_maps_mib"] = {n: round(v / MiB, 2) for n, v in sorted(kv.node_bytes.items())}
        try:
            row["numastat_mib"] = kv.numastat_mib
        except ValueError:
            row["numastat_mib"] = None
        rows.append(row)
    return rows


def format_report(rows: list[dict[str, Any]]) -> str:
    """Return ``report_rows`` as an aligned text table."""
    lines = [f"{'scenario':17} {'pid':>5}  {'exporter MiB/node':24} {'numa_maps MiB/node':24} "
             f"{'numastat -p MiB/node':24} ratio(first,last)"]

    def fmt(d: Any) -> str:
        if not isinstance(d, dict):
            return str(d)
        return " ".join(f"N{k}={v:.2f}" for k, v in d.items() if v)

    for r in rows:
        ratio = r.get("exporter_ratio")
        rtxt = ",".join("-" if x is None else f"{x:.3f}" for x in ratio) if ratio else "-"
        lines.append(
            f"{r['scenario']:17} {r.get('pid', '-')!s:>5}  {fmt(r.get('exporter_mib')):24} "
            f"{fmt(r.get('numa_maps_mib')):24} {fmt(r.get('numastat_mib')):24} {rtxt}"
            + (f"  ERRORS {r['errors']}" if r.get("errors") else "")
            + (f"  {r['exporter_error']}" if r.get("exporter_error") else "")
        )
    return "\n".join(lines)
