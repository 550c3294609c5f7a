"""Parser for ``/proc/<pid>/statm`` (``proc_pid_statm`` in fs/proc/array.c).

One line of seven page counts: size resident shared text lib data dt. A process without an
mm (a kernel thread, a zombie) shows ``0 0 0 0 0 0 0``. Much cheaper for the kernel to write
than ``status``: the scan screens every process of the host with it where it can.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# seven fields of 1-20 ASCII digits between ASCII whitespace, the first two captured: what
# ``split()`` and ``isdigit()`` accept, in one C call (the scan runs it on every process)
_LINE = re.compile(rb"[ \t\n\r\f\v]*([0-9]{1,20})[ \t\n\r\f\v]+([0-9]{1,20})"
                   rb"(?:[ \t\n\r\f\v]+[0-9]{1,20}){5}[ \t\n\r\f\v]*")


@dataclass(frozen=True, slots=True)
class PidStatm:
    """The pages of a statm line the screening uses."""

    size_pages: int  # virtual size; 0 without an mm
    resident_pages: int  # RssAnon + RssFile + RssShmem, as VmRSS


def parse_pid_statm(data: bytes) -> PidStatm | None:
    """Return the size and resident pages of a statm line, or None when it is malformed."""
    m = _LINE.fullmatch(data)
    if m is None:
        return None
    return PidStatm(int(m[1]), int(m[2]))
