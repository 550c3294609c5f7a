#!/usr/bin/env python3
"""Print the README's metric reference table from the metric contract.

    .venv/bin/python tools/metrics_table.py            # print the table
    .venv/bin/python tools/metrics_table.py --write    # replace it in README.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from numa_exporter.metrics_spec import SPECS

BEGIN = "<!-- metrics:begin -->"
END = "<!-- metrics:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def table() -> str:
    """Return the markdown table of every metric family in the contract."""
    rows = ["| metric | type | labels | collector | meaning |", "|---|---|---|---|---|"]
    for s in SPECS:
        labels = ", ".join(s.labels) or "-"
        rows.append(f"| `{s.name}` | {s.type} | {labels} | {s.collector} | "
                    f"{s.help.replace('|', '/')} |")
    return "\n".join(rows)


def replace(text: str) -> str:
    """Return README text with the table between the markers regenerated."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


if __name__ == "__main__":
    if "--write" in sys.argv:
        README.write_text(replace(README.read_text()))
    else:
        print(table())
