"""The optional ``--config.file`` (TOML): pinned home nodes and accelerators per process.

```toml
[[home]]
match = "^vllm"          # RE2 regex on comm or cmdline
nodes = "0"              # kernel list format

[[accelerator]]
match = "triton"
pci_addresses = ["0000:3b:00.0"]
memory_nodes = "1"       # optional: the accelerator's own memory is NUMA node 1
```

``memory_nodes`` declares where an accelerator's memory is itself a NUMA node (coherent
CPU-GPU platforms, where the GPU's PCI ``numa_node`` reads -1); it applies to every process
that uses that accelerator (pinned here or found through its open device files).

Every error names the entry (``home[0].nodes``) and says what is wrong in one line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from numa_exporter.config import AcceleratorPin, HomePin
from numa_exporter.parsers.cpulist import MAX_NODE_ID, parse_cpulist
from numa_exporter.patterns import Pattern, PatternError, compile_pattern

MAX_FILE_BYTES = 1 << 20  # a config file is a few lines; refuse to parse megabytes
MAX_NODE_LIST = 256  # characters of one node list
MAX_PCI_ADDRESSES = 256
MAX_ENTRIES = 1024  # [[home]] or [[accelerator]] tables in one file

_SECTIONS = {"home": ("match", "nodes"),
             "accelerator": ("match", "pci_addresses", "memory_nodes")}
_PCI = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class PinError(ValueError):
    """The config file is unreadable or wrong; the message names the entry."""


Pins = tuple[tuple[HomePin, ...], tuple[AcceleratorPin, ...]]


def _pattern(entry: dict[str, Any], where: str) -> Pattern:
    m = entry.get("match")
    if not isinstance(m, str):
        raise PinError(f"{where}.match: must be a string (a regex on comm or cmdline)")
    try:
        return compile_pattern(m)
    except PatternError as exc:
        raise PinError(f"{where}.match: bad regex {m!r}: {exc}") from None


def parse_node_list(text: str) -> frozenset[int] | None:
    """Return the node ids of a list such as ``0``, ``0-1`` or ``0,2-3`` (the kernel list
    format, parsed by ``parsers/cpulist.py``).

    Returns None unless every id is at most MAX_NODE_ID and the text is short.
    """
    if len(text) > MAX_NODE_LIST:
        return None
    return parse_cpulist(text, MAX_NODE_ID) or None


def _nodes(entry: dict[str, Any], where: str, key: str = "nodes") -> frozenset[int]:
    raw = entry.get(key)
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    nodes = parse_node_list(raw) if isinstance(raw, str) else None
    if not nodes:
        shown = repr(raw) if not isinstance(raw, str) or len(raw) <= 40 else repr(raw[:40]) + "..."
        raise PinError(f"{where}.{key}: must be a node list such as \"0\" or \"0-1\" with ids "
                       f"0-{MAX_NODE_ID}, got {shown}")
    return nodes


def _addresses(entry: dict[str, Any], where: str) -> tuple[str, ...]:
    addrs = entry.get("pci_addresses")
    if (not isinstance(addrs, list) or not addrs or len(addrs) > MAX_PCI_ADDRESSES
            or not all(isinstance(a, str) for a in addrs)):
        raise PinError(f"{where}.pci_addresses: must be a non-empty list of strings such as "
                       "[\"0000:3b:00.0\"]")
    for a in addrs:
        if not _PCI.match(a):
            raise PinError(f"{where}.pci_addresses: {a[:40]!r} is not a PCI address "
                           "(domain:bus:device.function, e.g. 0000:3b:00.0)")
    return tuple(a.lower() for a in addrs)


def _entries(data: dict[str, Any], section: str) -> Iterable[tuple[str, dict[str, Any]]]:
    value = data.get(section, [])
    if not isinstance(value, list):
        raise PinError(f"{section}: must be an array of tables ([[{section}]]), "
                       f"got {type(value).__name__}")
    if len(value) > MAX_ENTRIES:
        raise PinError(f"{section}: more than {MAX_ENTRIES} entries")
    for i, e in enumerate(value):
        where = f"{section}[{i}]"
        if not isinstance(e, dict):
            raise PinError(f"{where}: must be a table ([[{section}]])")
        unknown = sorted(set(e) - set(_SECTIONS[section]))
        if unknown:
            raise PinError(f"{where}: unknown key {unknown[0]!r} "
                           f"(known: {', '.join(_SECTIONS[section])})")
        yield where, e


def parse_pins(text: str) -> Pins:
    """Return the home and accelerator pins of a config file's text; raise PinError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PinError(f"not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise PinError(f"unknown sections: {', '.join(unknown)} (known: home, accelerator)")
    homes = [HomePin(_pattern(e, w), _nodes(e, w)) for w, e in _entries(data, "home")]
    accels = [AcceleratorPin(_pattern(e, w), _addresses(e, w),
                             _nodes(e, w, "memory_nodes") if "memory_nodes" in e
                             else frozenset())
              for w, e in _entries(data, "accelerator")]
    return tuple(homes), tuple(accels)


def check_nodes(homes: tuple[HomePin, ...], nodes: Iterable[int],
                accels: tuple[AcceleratorPin, ...] = ()) -> None:
    """Raise PinError when a home pin (or an accelerator's memory_nodes) names a node this
    host does not have."""
    have = frozenset(nodes)
    listed = ",".join(str(n) for n in sorted(have)) or "none"
    named = [(f"home[{i}].nodes", pin.nodes) for i, pin in enumerate(homes)]
    named += [(f"accelerator[{i}].memory_nodes", pin.memory_nodes)
              for i, pin in enumerate(accels)]
    for where, want in named:
        absent = sorted(want - have)
        if absent:
            raise PinError(f"{where}: node {absent[0]} does not exist on this host "
                           f"(nodes: {listed})")


def load_pins(path: Path) -> Pins:
    """Return the pins of a config file; raise PinError if it cannot be read or parsed."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PinError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise PinError(f"{path}: larger than {MAX_FILE_BYTES >> 10} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PinError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return parse_pins(text)
    except PinError as exc:
        raise PinError(f"{path}: {exc}") from None
