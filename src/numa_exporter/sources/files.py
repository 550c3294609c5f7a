"""Reading whole small files and streaming big ones, with classified errors."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from numa_exporter.sources.errors import classify

MAX_SMALL_FILE = 4 << 20  # a status/stat/vmstat file is a few KiB; refuse runaway input
CHUNK = 32 << 10  # sysctl handlers allocate the whole read size in the kernel: keep it small
STREAM_CHUNK = 64 << 10  # read size for streamed files (seq_file returns at most its buffer)
_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def read_at_most(read: Callable[[int], bytes], limit: int, chunk_size: int = CHUNK) -> bytes:
    """Return what ``read(n)`` gives, asked for at most ``chunk_size`` bytes a call, until it
    gives nothing or ``limit`` bytes are read (OSError passes through)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        chunk = read(min(chunk_size, limit - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def read_small(path: Path, source: str) -> bytes:
    """Return the bytes of a small file (at most MAX_SMALL_FILE); raise a SourceError."""
    try:
        with open(path, "rb", buffering=0) as fh:
            return read_at_most(fh.read, MAX_SMALL_FILE)
    except OSError as err:
        raise classify(source, str(path), err) from err


def read_optional(path: Path, source: str) -> bytes | None:
    """Return the bytes of a file, or None when it does not exist."""
    if not path.exists():
        return None
    return read_small(path, source)


def stream_chunks(path: Path, source: str, size: int = STREAM_CHUNK) -> Iterator[bytes]:
    """Yield the bytes of a file as each read() returns them; errors are classified.

    Nothing is read before the first item is asked for, and the file is closed when the
    iterator ends or is dropped, so a caller can abandon a long read at a deadline. For
    seq_file files such as numa_maps the kernel fills one buffer (a page, more only for a
    record longer than that) per read call, taking the mmap lock for each.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as err:
        raise classify(source, str(path), err) from err
    try:
        while True:
            try:
                chunk = os.read(fd, size)
            except OSError as err:
                raise classify(source, str(path), err) from err
            if not chunk:
                return
            yield chunk
    finally:
        os.close(fd)
