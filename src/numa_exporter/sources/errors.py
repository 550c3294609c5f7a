"""OS error classification, following psutil's rules for vanished processes."""

from __future__ import annotations

import errno


class SourceError(Exception):
    """Base of the classified read errors; ``source`` names the kind of file."""

    reason = "error"

    def __init__(self, source: str, path: str, err: OSError | None = None) -> None:
        self.source = source
        self.path = path
        self.errno = err.errno if err else None
        detail = f": {err.strerror}" if err and err.strerror else ""
        super().__init__(f"{path}{detail}")


class Gone(SourceError):
    """The process or file vanished (ENOENT, ESRCH): skip quietly."""

    reason = "gone"


class Denied(SourceError):
    """Permission denied (EACCES, EPERM): count and log once."""

    reason = "denied"


class ReadFailed(SourceError):
    """Any other OS error: a bug or a kernel surprise that must surface in logs and metrics."""

    reason = "error"


class Refused(ReadFailed):
    """A file refused before or while it was read: not a regular file (a FIFO, a device, a
    socket), or a read or listing cut at its time or size bound. ``path`` names the file,
    the message says why."""

    reason = "error"

    def __init__(self, source: str, path: str, why: str) -> None:
        super().__init__(source, path)
        self.why = why
        self.args = (f"{path}: {why}",)


class Absent(ReadFailed):
    """A file of a process is absent while the process's own directory is still there.

    psutil's rule: ENOENT means the process is gone only when ``/proc/<pid>`` is gone too.
    Otherwise the file is missing for another reason (a kernel built without NUMA has no
    ``numa_maps``; a partial tree; a container runtime's masked path): counted as an error,
    never taken for an exit.
    """

    reason = "error"


GONE_ERRNOS = frozenset({errno.ENOENT, errno.ESRCH})
DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})


def classify(source: str, path: str, err: OSError) -> SourceError:
    """Return the classified error for an OSError raised while reading ``path``."""
    if err.errno in GONE_ERRNOS:
        return Gone(source, path, err)
    if err.errno in DENIED_ERRNOS:
        return Denied(source, path, err)
    return ReadFailed(source, path, err)
