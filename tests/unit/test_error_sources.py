"""The ``source`` label of the error counters stays bounded and every name is registered."""

from __future__ import annotations

import ast
from pathlib import Path

from numa_exporter.collectors.exporter import PARSE_ERRORS, READ_ERRORS
from numa_exporter.readers.error_report import ErrorReporter
from numa_exporter.sources.error_sources import OTHER, SOURCES, UNREGISTERED
from numa_exporter.sources.errors import Denied, Gone

SRC = Path(__file__).resolve().parents[2] / "src" / "numa_exporter"

#: Callables that take a source name, and its position (None: any positional argument of a
#: generic ``read(...)``, where it is the one that is a plain snake_case word).
SOURCE_ARG: dict[str, int | None] = {
    "classify": 0, "Gone": 0, "Denied": 0, "ReadFailed": 0, "Refused": 0, "Absent": 0,
    "SourceError": 0, "parse": 0, "bug": 0, "read_parsed": 0, "report": 0,
    "read_small": 1, "read_optional": 1, "stream_chunks": 1, "read_records": 1, "_names": 1,
    "_read": 1, "listdir": 1, "_list": 1, "_resolved": 1, "usable": 1, "read": None,
}


def _word(v: object) -> bool:
    return isinstance(v, str) and v.replace("_", "").isalnum() and v == v.lower()


def literal_sources() -> dict[str, str]:
    """Return every literal source name given in the code, with one place it is given."""
    found: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "SOURCE" for t in node.targets)
                    and isinstance(node.value, ast.Constant) and _word(node.value.value)):
                found.setdefault(str(node.value.value), f"{path}:{node.lineno}")
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name not in SOURCE_ARG:
                continue
            args = [kw.value for kw in node.keywords if kw.arg == "source"]
            i = SOURCE_ARG[name]
            args += node.args if i is None else node.args[i:i + 1]
            for a in args:
                if isinstance(a, ast.Constant) and _word(a.value):
                    found.setdefault(str(a.value), f"{path}:{node.lineno}")
    return found


def test_every_literal_source_is_registered() -> None:
    found = literal_sources()
    assert len(found) >= 40  # the scan sees the readers' names at all
    missing = {k: v for k, v in found.items() if k not in SOURCES}
    assert not missing, f"register these in sources/error_sources.py: {missing}"


#: Names given inside data rather than as an argument (the static scan cannot see them).
IN_DATA = frozenset({"containerd_spec", "crio_spec"})


def test_registered_names_are_used() -> None:
    unused = SOURCES - set(literal_sources()) - IN_DATA
    assert not unused, f"no longer given anywhere: {sorted(unused)}"
    text = (SRC / "readers" / "kubernetes.py").read_text(encoding="utf-8")
    assert all(f'"{n}"' in text for n in IN_DATA)


def test_bounds_follow_the_registry() -> None:
    assert dict(PARSE_ERRORS.bounds)["source"] == len(SOURCES) + 1
    assert dict(READ_ERRORS.bounds)["source"] == len(SOURCES) + 1
    assert OTHER not in SOURCES


def test_unregistered_and_hostile_names_count_as_other() -> None:
    errors = ErrorReporter()
    hostile = 'x"\n{evil}' * 50
    errors.parse(hostile, "/proc/1/x")
    errors.parse("numa_maps", "/proc/1/numa_maps", 3)
    errors.read(Gone(hostile, "/proc/1/y"))
    errors.read(Denied("stat", "/proc/1/stat"))
    errors.bug("never_registered", "/proc/1/z", ValueError("boom"))
    assert errors.parse_errors == {"other": 1, "numa_maps": 3}
    assert errors.read_errors == {("other", "gone"): 1, ("stat", "denied"): 1,
                                  ("other", "error"): 1}
    assert errors.count == 7  # 1 + 3 malformed, 2 unreadable, 1 bug
    assert "never_registered" in UNREGISTERED
    UNREGISTERED.clear()  # this test's names are meant to be unregistered
