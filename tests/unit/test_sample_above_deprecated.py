"""--placement.sample-above is deprecated: still accepted, its threshold ignored, only 0
still turns sampling off (the real-kernel tier and the benchmarks' full-read daemon pass it).
The warning it logs at start is checked on the real daemon in
tests/e2e/test_cadence_daemon.py."""

from __future__ import annotations

import pytest

from numa_exporter.cli import build_parser, config_from_args


def _sampling(*flags: str) -> bool:
    parser = build_parser()
    config, _ = config_from_args(parser.parse_args(list(flags)), parser)
    return config.sampling


@pytest.mark.parametrize(("flags", "sampling"), [
    ((), True),
    (("--placement.sample-above=0",), False),
    (("--placement.sample-above=0s",), False),
    (("--placement.sample-above=5ms",), True),
    (("--placement.sample-above=1h",), True),  # once: sample only above an hour; now ignored
])
def test_only_zero_still_turns_sampling_off(flags: tuple[str, ...], sampling: bool) -> None:
    assert _sampling(*flags) is sampling
