"""The package's imports: no cycle, and no module importing a layer above its own.

Every import statement in ``src/numa_exporter`` is read with ``ast`` - module level,
function level and under ``if TYPE_CHECKING:`` alike - and resolved to the module it names.
The layer order is read from ``docs/architecture.md`` (between the ``layers`` markers), so
the documentation and the check cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
PACKAGE = "numa_exporter"
DOC = REPO / "docs" / "architecture.md"
# Layers that must stay pure: they import nothing of the package outside themselves.
PURE = {"parsers"}

Graph = dict[str, set[str]]


def module_name(path: Path, src: Path) -> str:
    """Return the dotted name of a source file (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(src: Path, package: str) -> Graph:
    """Return module -> the package's modules it imports, from every import statement."""
    files = {module_name(p, src): p for p in (src / package).rglob("*.py")}
    graph: Graph = {m: set() for m in files}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_pkg else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import name` imports pkg.name when that is a module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            for t in targets:
                while t and t not in files and "." in t:  # `import a.b.c` of a function
                    t = t.rsplit(".", 1)[0]
                if t in files and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """Return one import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state and (found := visit(n)) is not None:
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def read_layers(doc: str) -> list[tuple[str, tuple[str, ...]]]:
    """Return the layers, lowest first, as (name, modules or packages) from the doc block::

        <!-- layers:begin -->
        name: module, package/, ...
        <!-- layers:end -->
    """
    block = doc.partition("<!-- layers:begin -->")[2].partition("<!-- layers:end -->")[0]
    out: list[tuple[str, tuple[str, ...]]] = []
    for line in block.splitlines():
        m = re.fullmatch(r"\s*\d+\.\s+`?([a-z_]+)`?:\s*(.+)", line)
        if m:
            members = tuple(re.findall(r"`([a-z_./]+)`", m.group(2)))
            out.append((m.group(1), members))
    return out


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]], package: str
             ) -> tuple[int, str] | None:
    """Return (rank, layer name) of a module, or None when no layer lists it."""
    rel = module.removeprefix(package).removeprefix(".")
    for rank, (name, members) in enumerate(layers):
        for member in members:
            m = member.removesuffix(".py")
            if m.endswith("/"):
                if rel == m[:-1] or rel.startswith(m[:-1] + "."):
                    return rank, name
            elif rel == m.replace("/", ".") or (m == "__init__" and rel == ""):
                return rank, name
    return None


def violations(graph: Mapping[str, set[str]], layers: list[tuple[str, tuple[str, ...]]],
               package: str, pure: set[str]) -> list[str]:
    """Return one line per import of a higher layer, or of anything outside a pure layer,
    and per module no layer lists."""
    out: list[str] = []
    for mod in sorted(graph):
        own = layer_of(mod, layers, package)
        if own is None:
            out.append(f"{mod}: in no layer")
            continue
        for dep in sorted(graph[mod]):
            theirs = layer_of(dep, layers, package)
            if theirs is None:
                continue  # reported as its own line
            if theirs[0] > own[0]:
                out.append(f"{mod} ({own[1]}) imports {dep} ({theirs[1]}), a layer above")
            elif own[1] in pure and theirs[1] != own[1]:
                out.append(f"{mod} ({own[1]}, pure) imports {dep} ({theirs[1]})")
    return out


# --- the package ---------------------------------------------------------------------------

def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(SRC, PACKAGE)
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # it read the package
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_module_imports_a_layer_above_its_own() -> None:
    layers = read_layers(DOC.read_text())
    names = [n for n, _ in layers]
    assert names[:4] == ["base", "sources", "parsers", "model"], names
    assert violations(import_graph(SRC, PACKAGE), layers, PACKAGE, PURE) == []


# --- the checks can fail -------------------------------------------------------------------

LAYERS = [("base", ("__init__.py", "config.py")), ("sources", ("sources/",)),
          ("parsers", ("parsers/",)), ("scan", ("scan/",))]


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_a_cycle_through_function_level_and_type_checking_imports_is_found(
        tmp_path: Path) -> None:
    src = _write(tmp_path, {
        "__init__.py": "",
        "config.py": "def f():\n    from pkg.scan import loop\n",
        "scan/__init__.py": "",
        "scan/loop.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from pkg import config\n"),
    })
    graph = import_graph(src, "pkg")
    assert graph["pkg.config"] == {"pkg.scan.loop"}
    assert graph["pkg.scan.loop"] == {"pkg.config"}
    assert find_cycle(graph) == ["pkg.config", "pkg.scan.loop", "pkg.config"]
    assert violations(graph, LAYERS, "pkg", set()) == [
        "pkg.config (base) imports pkg.scan.loop (scan), a layer above"]


def test_relative_imports_resolve_and_upward_or_impure_imports_are_reported(
        tmp_path: Path) -> None:
    src = _write(tmp_path, {
        "__init__.py": "",
        "config.py": "",
        "sources/__init__.py": "",
        "sources/files.py": "from ..parsers import text\n",
        "parsers/__init__.py": "",
        "parsers/text.py": "from . import kv\nimport pkg.sources.files\n",
        "parsers/kv.py": "",
        "stray.py": "",
    })
    graph = import_graph(src, "pkg")
    assert graph["pkg.sources.files"] == {"pkg.parsers.text"}
    assert graph["pkg.parsers.text"] == {"pkg.parsers.kv", "pkg.sources.files"}
    assert find_cycle(graph) == ["pkg.parsers.text", "pkg.sources.files", "pkg.parsers.text"]
    assert violations(graph, LAYERS, "pkg", {"parsers"}) == [
        "pkg.parsers.text (parsers, pure) imports pkg.sources.files (sources)",
        "pkg.sources.files (sources) imports pkg.parsers.text (parsers), a layer above",
        "pkg.stray: in no layer",
    ]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_layers_are_read_from_the_doc_block() -> None:
    doc = ("x\n<!-- layers:begin -->\n1. `base`: `config.py`, `roots.py`\n"
           "2. `sources`: `sources/`\n<!-- layers:end -->\n3. `late`: `no/`\n")
    assert read_layers(doc) == [("base", ("config.py", "roots.py")), ("sources", ("sources/",))]
