"""The compiled checkpoint hashing (parsers/kubelet/_kubelet_fast.c) against the pure-Python
reference in parsers/kubelet/go_json.py, and the reader's once-per-version verification
bounded by the scan's deadline.

The checkpoints are the real kubelet files of tests/fixtures/kubelet (see its README): their
stored checksums were computed by kubelets, so a verified result is the kubelet's verdict.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.kubelet import go_json as gj
from numa_exporter.parsers.kubelet.cpu_manager_state import parse_cpu_manager_state
from numa_exporter.parsers.kubelet.kubelet_internal_checkpoint import (
    parse_kubelet_internal_checkpoint,
)
from numa_exporter.parsers.kubelet.memory_manager_state import parse_memory_manager_state
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.readers.kubernetes import KubernetesReader
from numa_exporter.sources.deadline import Deadline
from numa_exporter.sources.rootfs import DEVICE_CHECKPOINT, RootFS

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
REAL = FIX / "containerd-systemd-v2" / "var" / "lib" / "kubelet"
PARSERS = {"cpu_manager_state": parse_cpu_manager_state,
           "memory_manager_state": parse_memory_manager_state,
           "device-plugins/kubelet_internal_checkpoint": parse_kubelet_internal_checkpoint}
CHECKPOINTS = sorted(p for p in FIX.glob("*/var/lib/kubelet/**/*") if p.is_file())

needs_compiled = pytest.mark.skipif(not gj.COMPILED, reason="built without a C compiler")


@needs_compiled
@pytest.mark.parametrize("path", CHECKPOINTS, ids=lambda p: str(p.relative_to(FIX)))
def test_compiled_and_reference_agree_on_real_checkpoints(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = path.read_bytes()
    assert gj._kubelet_fast.fnv32a(data) == gj.fnv32a_py(data)
    name = str(path.relative_to(path.parents[0 if path.parent.name == "kubelet" else 1]))
    parse = PARSERS[name]
    compiled = parse(data)
    monkeypatch.setattr(gj, "_kubelet_fast", None)
    assert parse(data) == compiled


def test_real_device_checkpoint_verified_by_both() -> None:
    """The kubelet's own checksum of the real device checkpoint (AllocResp blobs printed as
    decimal bytes) holds with the compiled helpers and without them."""
    data = (REAL / "device-plugins" / "kubelet_internal_checkpoint").read_bytes()
    assert parse_kubelet_internal_checkpoint(data).checksum == "verified"
    fast = gj._kubelet_fast
    try:
        gj._kubelet_fast = None  # type: ignore[assignment]
        assert parse_kubelet_internal_checkpoint(data).checksum == "verified"
    finally:
        gj._kubelet_fast = fast


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096), st.integers(0, 0xFFFFFFFF))
def test_compiled_fnv32a_is_the_reference(data: bytes, start: int) -> None:
    assert gj._kubelet_fast.fnv32a(data) == gj.fnv32a_py(data)
    assert gj._kubelet_fast.fnv32a(data, start) == gj.fnv32a_py(data, start)
    half = len(data) // 2  # hashing in parts continues the hash
    assert gj._kubelet_fast.fnv32a(data[half:], gj.fnv32a_py(data[:half])) == gj.fnv32a_py(data)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_compiled_decimal_bytes_is_the_reference(data: bytes) -> None:
    assert gj._kubelet_fast.decimal_bytes(data).decode() == gj.decimal_bytes_py(data)
    assert gj.decimal_bytes_py(data) == " ".join(str(b) for b in data)


def test_fnv32a_known_vectors() -> None:
    """FNV-1a 32-bit test vectors (Go's hash/fnv tests: "", "a", "ab", "abc")."""
    for text, want in ((b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"ab", 0x4D2505CA),
                       (b"abc", 0x1A47E90B)):
        assert gj.fnv32a_py(text) == want
        assert gj.fnv32a(text) == want


# --- the reader: once per file version, bounded by the deadline ---------------------------

class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIX / "containerd-systemd-v2", root)
    return root


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` as the kubelet does: a new file renamed over the old one."""
    new = path.with_name(".tmp")
    new.write_bytes(data)
    os.replace(new, path)


def test_unchanged_checkpoint_is_verified_once(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path)
    hashed: list[int] = []
    real = gj.checksum_of

    def spy(text: str) -> int:
        hashed.append(len(text))
        return real(text)

    monkeypatch.setattr(gj, "checksum_of", spy)
    reader = KubernetesReader(RootFS(root))
    errors = ErrorReporter(quiet=True)
    for _ in range(3):
        got = reader.checkpoints.get(DEVICE_CHECKPOINT, "kubelet_internal_checkpoint",
                                     1 << 22, parse_kubelet_internal_checkpoint, errors,
                                     Deadline(None))
        assert got is not None and got.checksum == "verified"
    assert len(hashed) == 1  # the cache kept the verified result
    path = root / "var" / "lib" / "kubelet" / DEVICE_CHECKPOINT
    _replace(path, path.read_bytes())  # same bytes, a new inode: a new version
    reader.checkpoints.get(DEVICE_CHECKPOINT, "kubelet_internal_checkpoint", 1 << 22,
                           parse_kubelet_internal_checkpoint, errors, Deadline(None))
    assert len(hashed) == 2 and errors.parse_errors == {}


def test_a_version_that_cannot_be_verified_in_time_is_counted_not_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path)
    clock = _Clock()
    real = parse_kubelet_internal_checkpoint

    def slow(data: bytes) -> object:  # the verification costs 1 s (CPU and wall)
        clock.now += 1.0
        return real(data)

    reader = KubernetesReader(RootFS(root), cpu_clock=clock)
    errors = ErrorReporter(quiet=True)
    args = (DEVICE_CHECKPOINT, "kubelet_internal_checkpoint", 1 << 22, slow, errors)

    def within(seconds: float) -> Deadline:
        return Deadline(clock.now + seconds, clock=clock)

    assert reader.checkpoints.get(*args, within(5.0)) is not None  # cost measured: 1 s
    path = root / "var" / "lib" / "kubelet" / DEVICE_CHECKPOINT
    _replace(path, path.read_bytes() + b" ")  # a new version
    before = clock.now
    assert reader.checkpoints.get(*args, within(0.5)) is None  # would end past the deadline
    assert clock.now == before  # not started
    assert errors.parse_errors == {"kubelet_internal_checkpoint": 1}
    assert reader.checkpoints.get(*args, within(-1.0)) is None  # the deadline has passed
    stopping = threading.Event()
    stopping.set()
    assert reader.checkpoints.get(*args, Deadline(None, stopping, clock)) is None  # stopping
    assert errors.parse_errors == {"kubelet_internal_checkpoint": 3}
    got = reader.checkpoints.get(*args, within(5.0))  # time enough: verified, kept
    assert got is not None and got.checksum == "verified"
    assert reader.checkpoints.get(*args, within(-1.0)) is got  # unchanged: no work, no error
    assert errors.parse_errors == {"kubelet_internal_checkpoint": 3}
