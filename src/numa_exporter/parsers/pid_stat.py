"""Parser for ``/proc/<pid>/stat`` and ``/proc/<pid>/task/<tid>/stat`` (proc(5))."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PidStat:
    """Fields of a stat line that the exporter uses; times in clock ticks."""

    pid: int
    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    num_threads: int
    starttime: int
    processor: int | None  # last CPU; absent on very old kernels


def parse_pid_stat(data: bytes) -> PidStat | None:
    """Return the parsed stat line, or None when it is malformed."""
    text = data.decode("utf-8", "surrogateescape").strip()
    open_p = text.find("(")
    close_p = text.rfind(")")  # comm may itself contain ')' and spaces
    if open_p <= 0 or close_p < open_p:
        return None
    rest = text[close_p + 1 :].split()
    # rest[0] is field 3 (state); field N is rest[N - 3]
    if len(rest) < 20:
        return None
    try:
        pid = int(text[:open_p].strip())
        f = [int(x) for x in rest[1:]]
    except ValueError:
        return None

    def field(n: int) -> int:
        return f[n - 4]

    processor = field(39) if len(rest) >= 37 else None
    return PidStat(
        pid=pid,
        comm=text[open_p + 1 : close_p],
        state=rest[0],
        ppid=field(4),
        utime=field(14),
        stime=field(15),
        num_threads=field(20),
        starttime=field(22),
        processor=processor,
    )
