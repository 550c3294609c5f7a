"""The benchmark harness runs another checkout's daemon where NUMA_BENCH_DAEMON_SRC says so."""

from __future__ import annotations

import pytest
from benchmarks.daemon import DAEMON_SRC_ENV, daemon_env


def test_without_the_variable_the_environment_is_left_alone(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.delenv(DAEMON_SRC_ENV, raising=False)
    assert daemon_env(None) is None
    assert daemon_env({"A": "1"}) == {"A": "1"}


def test_the_named_source_tree_comes_first_on_pythonpath(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv(DAEMON_SRC_ENV, "/base/src")
    monkeypatch.setenv("PYTHONPATH", "/here")
    env = daemon_env(None)
    assert env is not None and env["PYTHONPATH"] == "/base/src:/here"
    assert daemon_env({"PYTHONPATH": ""}) == {"PYTHONPATH": "/base/src"}
