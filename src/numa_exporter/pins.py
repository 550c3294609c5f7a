"""The optional ``--config.file`` (TOML): pinned home nodes and accelerators per process.

```toml
[[home]]
match = "^vllm"          # regex on comm or cmdline
nodes = "0"              # kernel list format

[[accelerator]]
match = "triton"
pci_addresses = ["0000:3b:00.0"]
```
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from numa_exporter.config import AcceleratorPin, HomePin
from numa_exporter.parsers.cpulist import parse_cpulist


class PinError(ValueError):
    """The config file is unreadable or wrong; the message names the entry."""


def _regex(entry: dict[str, Any], where: str) -> re.Pattern[str]:
    m = entry.get("match")
    if not isinstance(m, str):
        raise PinError(f"{where}: 'match' must be a string")
    try:
        return re.compile(m)
    except re.error as exc:
        raise PinError(f"{where}: bad regex {m!r}: {exc}") from None


def parse_pins(text: str) -> tuple[tuple[HomePin, ...], tuple[AcceleratorPin, ...]]:
    """Return the home and accelerator pins of a config file's text; raise PinError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PinError(f"not valid TOML: {exc}") from None
    unknown = set(data) - {"home", "accelerator"}
    if unknown:
        raise PinError(f"unknown sections: {', '.join(sorted(unknown))}")
    homes: list[HomePin] = []
    for i, e in enumerate(data.get("home", [])):
        where = f"home[{i}]"
        if not isinstance(e, dict):
            raise PinError(f"{where}: must be a table")
        nodes = parse_cpulist(str(e.get("nodes", "")))
        if not nodes:
            raise PinError(f"{where}: 'nodes' must be a node list such as \"0\" or \"0-1\"")
        homes.append(HomePin(_regex(e, where), nodes))
    accels: list[AcceleratorPin] = []
    for i, e in enumerate(data.get("accelerator", [])):
        where = f"accelerator[{i}]"
        if not isinstance(e, dict):
            raise PinError(f"{where}: must be a table")
        addrs = e.get("pci_addresses")
        if not isinstance(addrs, list) or not addrs or not all(isinstance(a, str) for a in addrs):
            raise PinError(f"{where}: 'pci_addresses' must be a non-empty list of strings")
        accels.append(AcceleratorPin(_regex(e, where), tuple(addrs)))
    return tuple(homes), tuple(accels)


def load_pins(path: Path) -> tuple[tuple[HomePin, ...], tuple[AcceleratorPin, ...]]:
    """Return the pins of a config file; raise PinError if it cannot be read or parsed."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PinError(f"{path}: {exc.strerror}") from None
    return parse_pins(text)
