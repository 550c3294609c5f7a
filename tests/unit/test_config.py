"""Sizes, durations, listen addresses, patterns and the config file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from numa_exporter.config import Config
from numa_exporter.config_file import PinError, check_nodes, load_pins, parse_node_list, parse_pins
from numa_exporter.flags import parse_duration, parse_size
from numa_exporter.patterns import MAX_TEXT, PatternError, compile_pattern
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


@pytest.mark.parametrize("text", ["", "fast", "15x", "1m 30s", "-1", "inf", "-inf", "nan",
                                  "1e309", "9" * 400, "9" * 400 + "s", "1" * 70 + "ms",
                                  "400d", "367d", "8785h"])
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
    ("[[home]]\nmatch = 'a'\nnodes = ''\n", "home[0].nodes"),
    ("[[accelerator]]\nmatch = 'a'\n", "accelerator[0].pci_addresses"),
    ("[other]\n", "unknown sections: other"),
    ("not toml [", "not valid TOML"),
    # each of these gave a traceback (TypeError, ValueError) on the old parser
    ("home = 5\n", "home: must be an array of tables"),
    ("accelerator = 'x'\n", "accelerator: must be an array of tables"),
    ("home = [5]\n", "home[0]: must be a table"),
    ("[[home]]\nmatch = 5\nnodes = '0'\n", "home[0].match: must be a string"),
    ("[[home]]\nmatch = 'a'\nnodes = '" + "9" * 5000 + "'\n", "home[0].nodes"),
    ("[[home]]\nmatch = 'a'\nnodes = '1024'\n", "home[0].nodes"),
    ("[[home]]\nmatch = 'a'\nnodes = '1-0'\n", "home[0].nodes"),
    ("[[home]]\nmatch = 'a'\nnodes = true\n", "home[0].nodes"),
    # unknown keys were accepted silently: a typo disabled the pin
    ("[[home]]\nmatch = 'a'\nnode = '0'\n", "home[0]: unknown key 'node'"),
    ("[[accelerator]]\nmatch = 'a'\npci_addresses = ['0000:3b:00.0']\nnodes = '0'\n",
     "accelerator[0]: unknown key 'nodes'"),
    ("[[accelerator]]\nmatch = 'a'\npci_addresses = ['gpu0']\n", "not a PCI address"),
    # RE2 rejects what would backtrack or what it cannot do, and says so
    ("[[home]]\nmatch = '(a)\\1'\nnodes = '0'\n", "backreferences are not supported"),
])
def test_bad_pins(text: str, fragment: str) -> None:
    with pytest.raises(PinError, match=re.escape(fragment)):
        parse_pins(text)


def test_node_list_with_thousands_of_ranges_is_refused_fast() -> None:
    """3,000 ranges of 0-65535 kept start-up busy inserting 196 million ids; now refused."""
    text = ",".join(["0-65535"] * 3000)
    with pytest.raises(PinError, match=r"home\[0\].nodes"):
        parse_pins(f"[[home]]\nmatch = 'a'\nnodes = '{text}'\n")
    assert parse_node_list(text) is None


def test_node_lists() -> None:
    assert parse_node_list("0") == {0}
    assert parse_node_list(" 0-2,5 ") == {0, 1, 2, 5}
    assert parse_node_list("1023") == {1023}
    for bad in ("", "a", "0-", "-1", "1-0", "1024", "\u0663", "0" * 7 + "1"):
        assert parse_node_list(bad) is None, bad


def test_integer_node_is_accepted() -> None:
    homes, _ = parse_pins("[[home]]\nmatch = 'a'\nnodes = 1\n")
    assert homes[0].nodes == {1}


def test_config_file_that_is_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "pins.toml"
    f.write_bytes(b"[[home]]\nmatch = '\xff\xfe'\nnodes = '0'\n")
    with pytest.raises(PinError, match=r"pins.toml: not UTF-8 text \(byte \d+\)"):
        load_pins(f)


def test_config_file_errors_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "pins.toml"
    f.write_text("home = 5\n")
    with pytest.raises(PinError, match=r"pins.toml: home: must be an array"):
        load_pins(f)
    with pytest.raises(PinError, match="No such file"):
        load_pins(tmp_path / "absent.toml")


def test_home_pin_to_a_node_this_host_lacks() -> None:
    homes, _ = parse_pins("[[home]]\nmatch = 'a'\nnodes = '0'\n[[home]]\nmatch = 'b'\n"
                          "nodes = '1-2'\n")
    check_nodes(homes, (0, 1, 2))
    with pytest.raises(PinError, match=r"home\[1\].nodes: node 2 does not exist on this host "
                                       r"\(nodes: 0,1\)"):
        check_nodes(homes, (0, 1))


def test_pattern_is_linear_time() -> None:
    """The pattern that froze the daemon under Python's re answers at once under RE2."""
    p = compile_pattern("(a+)+$")
    assert p.search("a" * 40 + "!") is False
    assert p.search("x aaa") is True
    assert p.pattern == "(a+)+$"


def test_pattern_sees_a_bounded_prefix() -> None:
    p = compile_pattern("needle")
    assert p.search("x" * (MAX_TEXT - 6) + "needle")
    assert not p.search("x" * MAX_TEXT + "needle")


@pytest.mark.parametrize(("text", "fragment"), [
    ("(", "missing )"),
    ("(a)\\1", "backreferences are not supported"),
    ("foo(?=bar)", "lookahead is not supported"),
    ("(?<!x)y", "lookbehind is not supported"),
    ("a{2000}", "repetition"),
    ("a" * 5000, "longer than"),
])
def test_bad_patterns(text: str, fragment: str) -> None:
    with pytest.raises(PatternError, match=re.escape(fragment)):
        compile_pattern(text)


@pytest.mark.parametrize("text", ["9" * 5000, "9" * 30 + "PiB", "2048PiB"])
def test_huge_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a size|too large"):
        parse_size(text)


def test_accelerator_memory_nodes() -> None:
    _, accels = parse_pins('[[accelerator]]\nmatch = "a"\npci_addresses = ["0009:01:00.0"]\n'
                           'memory_nodes = "1-2"\n[[accelerator]]\nmatch = "b"\n'
                           'pci_addresses = ["0000:3b:00.0", "0009:01:00.0"]\n'
                           'memory_nodes = 4\n[[accelerator]]\nmatch = "c"\n'
                           'pci_addresses = ["0000:3c:00.0"]\n')
    assert [a.memory_nodes for a in accels] == [frozenset({1, 2}), frozenset({4}), frozenset()]
    cfg = Config(accelerator_pins=accels)
    assert cfg.accelerator_memory() == {"0009:01:00.0": frozenset({1, 2, 4}),
                                        "0000:3b:00.0": frozenset({4})}


@pytest.mark.parametrize("value", ['"x"', '""', '"1-"', '"2000"', "[1]"])
def test_bad_accelerator_memory_nodes(value: str) -> None:
    with pytest.raises(PinError, match=r"accelerator\[0\]\.memory_nodes: must be a node list"):
        parse_pins(f'[[accelerator]]\nmatch = "a"\npci_addresses = ["0009:01:00.0"]\n'
                   f"memory_nodes = {value}\n")


def test_accelerator_memory_node_must_exist() -> None:
    _, accels = parse_pins('[[accelerator]]\nmatch = "a"\npci_addresses = ["0009:01:00.0"]\n'
                           'memory_nodes = "3"\n')
    with pytest.raises(PinError, match=r"accelerator\[0\]\.memory_nodes: node 3 does not"):
        check_nodes((), (0, 1), accels)
