"""The daemon's per-scan summary line, read back from its log.

With ``--log.format=json`` the daemon writes one JSON object per scan whose event is
``scan`` (structlog's ``event``, or ``msg`` where the renderer names it so), holding the
scan's seconds, ``processes``, ``kept``, ``pending`` and the scan thread's CPU per stage
(``cpu_<stage>``). The benchmarks, the real-kernel tests and the guest benchmark all read
those lines with :func:`scan_records`; it imports nothing of the package, so that tests and
tools may import it without pulling in the benchmarks' dependencies.
"""

from __future__ import annotations

import json
from typing import Any


def scan_records(log: str | bytes) -> list[dict[str, Any]]:
    """Return the daemon's ``scan`` log lines in ``log`` (JSON format), parsed, in order;
    lines that are not JSON objects, and other events, are skipped."""
    scans: list[dict[str, Any]] = []
    for line in log.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg", rec.get("event")) == "scan":
            scans.append(rec)
    return scans
