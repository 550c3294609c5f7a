"""Patterns remember their verdicts by text (issue 14: selection of a host's processes)."""

from __future__ import annotations

import re

from numa_exporter import patterns
from numa_exporter.patterns import MAX_TEXT, compile_pattern


def test_verdicts_are_the_search_results_and_stay_bounded(monkeypatch: object) -> None:
    p = compile_pattern(r"^ba(na)+$|x{3}")
    oracle = re.compile(r"^ba(na)+$|x{3}")
    texts = [f"{w}{i % 7}" for i in range(200) for w in ("bana", "xxx", "nab")]
    texts += ["banana", "banan", "y" * MAX_TEXT + "xxx", "xxx" + "y" * MAX_TEXT, ""]
    for _ in range(2):  # the second round comes from the memo
        for t in texts:
            assert p.search(t) is (oracle.search(t[:MAX_TEXT]) is not None), t
    memo = p._verdicts
    assert memo.chars <= patterns.MEMO_CHARS
    big = "z" * MAX_TEXT
    for i in range(patterns.MEMO_CHARS // MAX_TEXT + 5):
        assert not p.search(f"{i}{big}")
        assert memo.chars <= patterns.MEMO_CHARS
    assert p.search("banana") and p.search("banana")  # forgotten and found again
