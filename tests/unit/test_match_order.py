"""Include/exclude matching reads the command line only when it can change the answer
(issue 14: the fixed cost of a scan), with the answers it always gave."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from numa_exporter.config import Config
from numa_exporter.patterns import compile_pattern
from numa_exporter.scan.select import matches
from numa_exporter.sources.procfs import ProcFS

COMMS = ["", "web", "db", "webdb"]
CMDLINES = [None, b"", b"/usr/bin/web --port 1", b"db\0--web\0", b"other\0"]
PATTERNS = [None, "web", "^db", "nothing"]


def _old(inc: str | None, exc: str | None, comm: str, cmdline: str) -> bool:
    """The answer as any() over (comm, cmdline), non-empty texts only, gave it."""
    found = [t for t in (comm, cmdline) if t]
    i = compile_pattern(inc) if inc else None
    e = compile_pattern(exc) if exc else None
    if i is not None and not any(i.search(t) for t in found):
        return False
    return not (e is not None and any(e.search(t) for t in found))


@pytest.mark.parametrize(("inc", "exc"), list(itertools.product(PATTERNS, PATTERNS)))
def test_answers_as_before(tmp_path: Path, inc: str | None, exc: str | None) -> None:
    cfg = Config(include=compile_pattern(inc) if inc else None,
                 exclude=compile_pattern(exc) if exc else None)
    for n, (comm, cmdline) in enumerate(itertools.product(COMMS, CMDLINES)):
        d = tmp_path / str(n + 1)
        d.mkdir()
        if cmdline is not None:
            (d / "cmdline").write_bytes(cmdline)
        text = (cmdline or b"").replace(b"\0", b" ").decode().strip()
        files = ProcFS(tmp_path).process(n + 1)
        assert matches(cfg, files, comm) is _old(inc, exc, comm, text), (comm, cmdline)


def test_cmdline_not_read_when_the_name_decides(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "1").mkdir()
    files = ProcFS(tmp_path).process(1)
    read: list[int] = []
    monkeypatch.setattr(files, "cmdline", lambda: read.append(1) or b"x")
    assert matches(Config(include=compile_pattern("web")), files, "web")
    assert read == []
    assert not matches(Config(include=compile_pattern("web"), exclude=compile_pattern("x")),
                       files, "web")
    assert read == [1]  # an exclude pattern may still refuse it by its command line
