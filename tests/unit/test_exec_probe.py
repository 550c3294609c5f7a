"""The address-space probe (sources/exec_probe.py) on files that act as the kernel's
``environ`` does: a descriptor reads nothing once the address space it was opened on is
gone, while the path reaches the new one. Here the old file is moved aside and emptied
(what the held descriptor sees after an exec) and a new one written in its place."""

from __future__ import annotations

import os
from pathlib import Path

from numa_exporter.sources.exec_probe import ExecProbe


def _exec(folder: Path, env: bytes = b"PATH=/usr/bin\0") -> None:
    """Give the process in ``folder`` a new address space, as an exec does."""
    old = folder / "environ"
    aside = folder / f"environ.{os.urandom(4).hex()}"
    old.rename(aside)
    os.truncate(aside, 0)  # the descriptor held on the old mm reads 0 bytes
    (folder / "environ").write_bytes(env)


def test_each_exec_is_a_new_generation_whenever_it_is_looked_at(tmp_path: Path) -> None:
    (tmp_path / "environ").write_bytes(b"HOME=/root\0")
    probe = ExecProbe()
    assert probe.generation(7, str(tmp_path)) == 0
    assert probe.generation(7, str(tmp_path)) == 0  # same address space
    _exec(tmp_path)
    assert probe.generation(7, str(tmp_path)) == 1
    assert probe.generation(7, str(tmp_path)) == 1
    _exec(tmp_path)
    _exec(tmp_path)  # two execs between looks: a new generation all the same
    assert probe.generation(7, str(tmp_path)) == 2
    assert len(probe) == 1


def test_unknown_where_it_cannot_be_told(tmp_path: Path) -> None:
    probe = ExecProbe()
    assert probe.generation(1, str(tmp_path / "absent")) is None  # no file (fixture roots)
    (tmp_path / "environ").write_bytes(b"")
    assert probe.generation(2, str(tmp_path)) is None  # an empty environment: env -i
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "environ")
    assert probe.generation(3, str(fifo)) is None  # not a regular file: never blocks
    link = tmp_path / "link"
    link.mkdir()
    (link / "environ").symlink_to(tmp_path / "environ")
    assert probe.generation(4, str(link)) is None  # not followed
    full = tmp_path / "full"
    full.mkdir()
    (full / "environ").write_bytes(b"A=1\0")
    assert ExecProbe(budget=lambda: 0).generation(5, str(full)) is None  # no room to hold it
    assert len(probe) == 0


def test_an_exec_seen_while_the_new_file_is_not_readable_yet_still_counts(tmp_path: Path
                                                                          ) -> None:
    (tmp_path / "environ").write_bytes(b"A=1\0")
    probe = ExecProbe()
    assert probe.generation(9, str(tmp_path)) == 0
    _exec(tmp_path, env=b"")  # the new program's environment cannot be read (yet)
    assert probe.generation(9, str(tmp_path)) is None
    (tmp_path / "environ").write_bytes(b"A=2\0")
    assert probe.generation(9, str(tmp_path)) == 1


def test_retain_closes_the_descriptors_of_processes_gone(tmp_path: Path) -> None:
    for pid in (1, 2):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "environ").write_bytes(b"A=1\0")
    probe = ExecProbe()
    assert probe.generation(1, str(tmp_path / "1")) == 0
    assert probe.generation(2, str(tmp_path / "2")) == 0
    probe.retain(frozenset({2}))
    assert len(probe) == 1
    probe.close()
    assert len(probe) == 0
