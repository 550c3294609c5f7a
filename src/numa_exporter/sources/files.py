"""Reading whole small files and streaming big ones, with classified errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from numa_exporter.sources.errors import classify

MAX_SMALL_FILE = 4 << 20  # a status/stat/vmstat file is a few KiB; refuse runaway input
CHUNK = 32 << 10  # sysctl handlers allocate the whole read size in the kernel: keep it small


def read_small(path: Path, source: str) -> bytes:
    """Return the bytes of a small file (at most MAX_SMALL_FILE); raise a SourceError."""
    try:
        with open(path, "rb", buffering=0) as fh:
            parts: list[bytes] = []
            size = 0
            while size < MAX_SMALL_FILE:
                chunk = fh.read(CHUNK)
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
            return b"".join(parts)
    except OSError as err:
        raise classify(source, str(path), err) from err


def read_optional(path: Path, source: str) -> bytes | None:
    """Return the bytes of a file, or None when it does not exist."""
    if not path.exists():
        return None
    return read_small(path, source)


def stream_lines(path: Path, source: str, buffer_size: int = 64 << 10) -> Iterator[bytes]:
    """Yield the lines of a file without holding the whole text; errors are classified.

    The kernel produces numa_maps text one mapping per read call, so lines arrive as they are
    generated.
    """
    try:
        fh = open(path, "rb", buffering=buffer_size)  # noqa: SIM115 - closed below
    except OSError as err:
        raise classify(source, str(path), err) from err
    with fh:
        while True:
            try:
                line = fh.readline(1 << 20)
            except OSError as err:
                raise classify(source, str(path), err) from err
            if not line:
                return
            yield line
