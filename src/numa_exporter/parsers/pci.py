"""Parsers of PCI and driver text: PCI class codes, NVIDIA's ``information`` files and
``/proc/devices``. Pure: text in, values out; never raise on bad input."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

Kind = Literal["display", "accelerator", "rdma"]


def parse_hex(text: str | None) -> int | None:
    """Return a hexadecimal number (``0x10de``, ``030200``), or None."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def parse_int(text: str | None) -> int | None:
    """Return a decimal integer (``-1``, ``3``), or None."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def classify_pci(pci_class: int, has_rdma: bool, include_rdma: bool) -> Kind | None:
    """Return the accelerator kind of a PCI class code (``0xCCSSPP``), or None if not one."""
    base, sub = pci_class >> 16, (pci_class >> 8) & 0xFF
    if base == 0x03:
        return "display"
    if base == 0x12:
        return "accelerator"
    if include_rdma and base == 0x02 and (sub == 0x07 or (sub == 0x00 and has_rdma)):
        return "rdma"
    return None


def parse_nvidia_information(data: bytes) -> tuple[int | None, str | None]:
    """Return (``Device Minor``, ``Bus Location``) of an NVIDIA ``information`` file."""
    minor: int | None = None
    bus: str | None = None
    for raw in data.decode("utf-8", "replace").splitlines():
        key, sep, val = raw.partition(":")
        if not sep:
            continue
        key, val = key.strip(), val.strip()
        if key == "Device Minor":
            minor = parse_int(val)
        elif key == "Bus Location":
            bus = val.lower() or None
    return minor, bus


def parse_char_major(data: bytes, names: Iterable[str]) -> int | None:
    """Return the major of the first character driver in ``names`` in ``/proc/devices``."""
    wanted = tuple(names)
    majors: dict[str, int] = {}
    in_char = False
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line.endswith("devices:"):
            in_char = line.startswith("Character")
            continue
        parts = line.split()
        if in_char and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return next((majors[n] for n in wanted if n in majors), None)
