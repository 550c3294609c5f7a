"""Parser for ``/proc/sys/kernel/osrelease`` (``uname -r``: ``6.1.0-50-amd64``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_RELEASE = 64  # __NEW_UTS_LEN: the kernel keeps at most 64 characters
# major.minor[.patch], then printable ASCII that does not start with a digit ("-50-amd64")
_RELEASE = re.compile(rb"(\d{1,4})\.(\d{1,4})(?:\.(\d{1,6}))?(?:[!-/:-~][!-~]*)?")


@dataclass(frozen=True, slots=True)
class KernelRelease:
    """A kernel release: ``major.minor[.patch]`` and the whole text (``6.1.0-50-amd64``)."""

    major: int
    minor: int
    patch: int | None
    text: str

    def at_least(self, major: int, minor: int) -> bool:
        """Return True when this release is ``major.minor`` or later (patch level ignored)."""
        return (self.major, self.minor) >= (major, minor)


def parse_osrelease(data: bytes) -> KernelRelease | None:
    """Return the release of an ``osrelease`` file, or None when it is not one.

    The text is one line of at most 64 printable ASCII characters starting with
    ``major.minor``; the version numbers are what a distribution kernel was built from, not
    what it backported.
    """
    line = data[:-1] if data.endswith(b"\n") else data
    if not 0 < len(line) <= MAX_RELEASE:
        return None
    m = _RELEASE.fullmatch(line)
    if m is None:
        return None
    patch = m.group(3)
    return KernelRelease(int(m.group(1)), int(m.group(2)),
                         int(patch) if patch is not None else None, line.decode("ascii"))
