"""The daemon's log sink: a failing or blocked descriptor loses lines, counted, and never
raises into (or blocks) the code that logs."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest
import structlog

from numa_exporter import logs
from numa_exporter.logs import LogSink


def _wait(pred: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_lines_reach_the_descriptor_in_order(pipe: tuple[int, int]) -> None:
    r, w = pipe
    sink = LogSink(w)
    for i in range(100):
        sink.put(f"line {i}\n".encode())
    sink.close()
    os.close(w)
    got = b""
    while chunk := os.read(r, 65536):
        got += chunk
    assert got.decode().splitlines() == [f"line {i}" for i in range(100)]
    assert sink.write_errors == 0 and sink.backlog_drops == 0


def test_reader_gone_counts_lost_lines_and_never_raises(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.close(r)  # EPIPE from here on (Python ignores SIGPIPE)
    sink = LogSink(w)
    for _i in range(5):
        sink.put(b"lost\n")
    assert _wait(lambda: sink.write_errors == 5)
    assert "pipe" in sink.last_error.lower()


def test_full_disk_counts_lost_lines() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        sink = LogSink(fd)
        sink.put(b"x\n")
        sink.put(b"y\n")
        assert _wait(lambda: sink.write_errors == 2)
        assert "space" in sink.last_error.lower()
    finally:
        os.close(fd)


def test_closed_descriptor_counts_lost_lines() -> None:
    r, w = os.pipe()
    os.close(r)
    os.close(w)  # EBADF (the number is not reused in between: nothing opens here)
    sink = LogSink(w)
    sink.put(b"x\n")
    assert _wait(lambda: sink.write_errors == 1)


def test_a_blocked_descriptor_drops_lines_instead_of_blocking(pipe: tuple[int, int]) -> None:
    _r, w = pipe  # nobody reads: the pipe fills (64 KiB) and the writer blocks
    sink = LogSink(w, capacity=10)
    line = b"x" * 4000 + b"\n"
    for _ in range(200):  # 800 KB: far past the pipe and the queue
        sink.put(line)  # must return: a blocked writer cannot hold the caller
    assert sink.backlog_drops > 0
    assert sink.write_errors == 0


def test_structlog_to_a_broken_sink_does_not_raise(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.close(r)
    sink = LogSink(w)
    logs.configure("info", "logfmt", sink)
    log = structlog.get_logger()
    for _ in range(3):
        log.info("scan", processes=1)
        log.error("scan failed")
    assert _wait(lambda: sink.write_errors == 6)


def test_sink_stream_takes_python_writes(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.close(r)
    sink = LogSink(w)
    stream = logs.sink_stream(sink)
    stream.write("Exception in thread x:\n")
    stream.flush()  # would raise BrokenPipeError on the real stderr
    assert _wait(lambda: sink.write_errors == 1)
