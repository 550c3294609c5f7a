"""Parser for ``/proc/<pid>/statm`` (``proc_pid_statm`` in fs/proc/array.c).

One line of seven page counts: size resident shared text lib data dt. A process without an
mm (a kernel thread, a zombie) shows ``0 0 0 0 0 0 0``. Much cheaper for the kernel to write
than ``status``: the scan screens every process of the host with it where it can.
"""

from __future__ import annotations

from dataclasses import dataclass

_MAX_DIGITS = 20


@dataclass(frozen=True, slots=True)
class PidStatm:
    """The pages of a statm line the screening uses."""

    size_pages: int  # virtual size; 0 without an mm
    resident_pages: int  # RssAnon + RssFile + RssShmem, as VmRSS


def parse_pid_statm(data: bytes) -> PidStatm | None:
    """Return the size and resident pages of a statm line, or None when it is malformed."""
    fields = data.split()
    if len(fields) != 7 or not all(0 < len(f) <= _MAX_DIGITS and f.isdigit() for f in fields):
        return None
    return PidStatm(int(fields[0]), int(fields[1]))
