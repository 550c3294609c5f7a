"""The README's metric table is the contract's, and the README names the test command."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import metrics_table  # noqa: E402


def test_metric_table_matches_contract() -> None:
    text = (REPO / "README.md").read_text()
    assert metrics_table.replace(text) == text, "run tools/metrics_table.py --write"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash tools/test.sh" in readme
    assert "bash tools/test.sh" in ci


def test_every_flag_is_documented() -> None:
    from numa_exporter.cli import build_parser

    readme = (REPO / "README.md").read_text()
    for action in build_parser()._actions:
        for opt in action.option_strings:
            if opt in ("-h", "--help", "--version") or opt.startswith("--no-"):
                continue
            name = opt.removeprefix("--")
            if name.startswith("collector.") and name.count(".") == 1:
                assert f"`--[no-]{name}`" in readme, opt
            else:
                assert f"`{opt}" in readme, opt
