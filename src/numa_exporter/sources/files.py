"""Reading whole small files and streaming big ones, with classified errors."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
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
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_small(path: Path | str, source: str) -> bytes:
    """Return the bytes of a small file (at most MAX_SMALL_FILE); raise a SourceError.

    Read with os.open/os.read (no file object): a scan reads a status or statm of every
    process of the host.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as err:
        raise classify(source, str(path), err) from err
    try:
        return read_at_most(lambda n: os.read(fd, n), MAX_SMALL_FILE)
    except OSError as err:
        raise classify(source, str(path), err) from err
    finally:
        os.close(fd)


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


#: Records one :func:`read_records` call reads at most (a probe asks for a few dozen).
MAX_RECORDS = 4096


def read_records(path: Path | str, source: str, offsets: Sequence[int], size: int = 8
                 ) -> list[bytes]:
    """Return the ``size`` bytes at each of ``offsets`` of a binary file (``pread``; one
    open for all), at most :data:`MAX_RECORDS` of them; a record past the end comes back
    short or empty. Raises a classified SourceError."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as err:
        raise classify(source, str(path), err) from err
    try:
        return [os.pread(fd, size, off) for off in offsets[:MAX_RECORDS]]
    except OSError as err:
        raise classify(source, str(path), err) from err
    finally:
        os.close(fd)
