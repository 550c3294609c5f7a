"""House rule: no function or method in ``src/`` is longer than 80 lines (def to last line)."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
SRC = Path(__file__).resolve().parents[2] / "src"


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Return ``path:line name (n lines)`` for each function under ``root`` over ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                end = node.end_lineno if node.end_lineno is not None else node.lineno
                # Decorators belong to the function; count from the first of them.
                start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                n = end - start + 1
                if n > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_in_src_is_over_80_lines() -> None:
    assert SRC.is_dir()
    assert long_functions(SRC) == []


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"def f():\n{body}\n\nclass C:\n    def g(self):\n"
                                      "        return 1\n")
    assert long_functions(tmp_path) == [f"long.py:1 f ({MAX_LINES + 1} lines)"]
