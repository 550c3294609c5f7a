"""Sizes, durations, listen addresses and the config file."""

from __future__ import annotations

import pytest

from numa_exporter.config import parse_duration, parse_size
from numa_exporter.pins import PinError, parse_pins
from numa_exporter.web import parse_listen_address


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("4096", 4096), ("64MiB", 64 << 20),
                                             ("1G", 1 << 30), ("512k", 512 << 10),
                                             ("1.5GiB", 3 << 29)])
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(("text", "value"), [("15s", 15.0), ("500ms", 0.5), ("1m30s", 90.0),
                                             ("2h", 7200.0), ("3", 3.0)])
def test_durations(text: str, value: float) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", ["", "fast", "15x", "1m 30s", "-1"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_listen_addresses() -> None:
    assert parse_listen_address(":10061") == ("", 10061)
    assert parse_listen_address("127.0.0.1:9") == ("127.0.0.1", 9)
    assert parse_listen_address("[::1]:10061") == ("::1", 10061)
    with pytest.raises(ValueError):
        parse_listen_address("localhost")


def test_pins() -> None:
    homes, accels = parse_pins('[[home]]\nmatch = "^vllm"\nnodes = "0-1"\n'
                               '[[accelerator]]\nmatch = "x"\npci_addresses = ["0000:3b:00.0"]\n')
    assert homes[0].nodes == {0, 1} and homes[0].match.pattern == "^vllm"
    assert accels[0].pci_addresses == ("0000:3b:00.0",)


@pytest.mark.parametrize(("text", "fragment"), [
    ("[[home]]\nmatch = '('\nnodes = '0'\n", "bad regex"),
    ("[[home]]\nmatch = 'a'\nnodes = ''\n", "'nodes'"),
    ("[[accelerator]]\nmatch = 'a'\n", "pci_addresses"),
    ("[other]\n", "unknown sections"),
    ("not toml [", "not valid TOML"),
])
def test_bad_pins(text: str, fragment: str) -> None:
    with pytest.raises(PinError, match=fragment.replace("(", r"\(")):
        parse_pins(text)
