"""``PROCMAP_QUERY`` (Linux 6.11+): a process's VMA list through its ``maps`` descriptor,
one ``ioctl`` per VMA, without the text.

Reading ``/proc/<pid>/maps`` makes the kernel print every line, and a line of a file
mapping costs it a ``d_path`` of the file: 60,000 memfds of distinct names cost 3.2x as
much to read as 60,000 anonymous mappings (70.7 against 21.9 ms here). The ioctl
(``fs/proc/task_mmu.c``, ``do_procmap_query``) returns one VMA's range, protection, device
and inode, and its name only when asked; it is answered under the same permission check as
the text (``PTRACE_MODE_READ`` at open). A kernel before 6.11 answers ``ENOTTY``:
:class:`MapsQueryUnsupported`, and the caller reads the text. The loop itself is compiled
(``readers/sampled/_sampled_fast.c``, ``query_frame``); this module opens the descriptor and
classifies what fails.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TypeVar

from numa_exporter.sources.errors import classify

SOURCE = "maps"
T = TypeVar("T")
_FLAGS = os.O_RDONLY | os.O_CLOEXEC
#: What a kernel without the ioctl (or a file that is not maps) answers.
UNSUPPORTED_ERRNOS = frozenset({errno.ENOTTY, errno.EOPNOTSUPP})


class MapsQueryUnsupported(Exception):
    """The kernel has no PROCMAP_QUERY (before Linux 6.11)."""


def with_maps_descriptor(path: str, run: Callable[[int], T]) -> T:
    """Return what ``run`` returns given a descriptor open on the maps file ``path`` (closed
    after). Raises MapsQueryUnsupported where the ioctl is unknown, else the classified
    SourceError (Gone, Denied, ReadFailed) of the open or of an OSError ``run`` raised."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as err:
        raise classify(SOURCE, path, err) from err
    try:
        return run(fd)
    except OSError as err:
        if err.errno in UNSUPPORTED_ERRNOS:
            raise MapsQueryUnsupported(f"{path}: PROCMAP_QUERY unsupported "
                                       f"({errno.errorcode.get(err.errno or 0, err.errno)})"
                                       ) from err
        raise classify(SOURCE, path, err) from err
    finally:
        os.close(fd)
