#!/usr/bin/env python3
"""Print the README's collector and metric reference tables from the collector registry.

    .venv/bin/python tools/metrics_table.py            # print the tables
    .venv/bin/python tools/metrics_table.py --write    # replace them in README.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from numa_exporter.collectors.registry import ALL, SPECS_BY_COLLECTOR

BEGIN = "<!-- metrics:begin -->"
END = "<!-- metrics:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def _cell(text: str) -> str:
    return text.replace("|", "/")


def collectors_table() -> str:
    """Return the markdown table of every collector, its flag and what it covers."""
    rows = ["| collector | flag | covers |", "|---|---|---|"]
    for c in ALL:
        flag = f"`--[no-]collector.{c.name}`" if c.switchable else "always on"
        rows.append(f"| {c.name} | {flag} | {_cell(c.help)} |")
    return "\n".join(rows)


def metrics_table() -> str:
    """Return the markdown table of every metric family of every collector."""
    rows = ["| metric | type | labels | collector | meaning |", "|---|---|---|---|---|"]
    for name, s in SPECS_BY_COLLECTOR:
        labels = ", ".join(s.labels) or "-"
        rows.append(f"| `{s.name}` | {s.type} | {labels} | {name} | {_cell(s.help)} |")
    return "\n".join(rows)


def table() -> str:
    """Return both tables as they stand between the README's markers."""
    return f"{collectors_table()}\n\n{metrics_table()}"


def replace(text: str) -> str:
    """Return README text with the tables between the markers regenerated."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


if __name__ == "__main__":
    if "--write" in sys.argv:
        README.write_text(replace(README.read_text()))
    else:
        print(table())
