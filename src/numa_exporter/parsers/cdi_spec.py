"""Parser for a Container Device Interface spec (``/etc/cdi/*.json``, ``/var/run/cdi/*.yaml``).

A DRA driver (and the NVIDIA container toolkit) describes the devices it hands out in CDI
specs; the kubelet's DRA checkpoint names them by CDI device ID, ``vendor/class=name``.
The format, as cncf-tags/container-device-interface ``specs-go/config.go`` defines it::

    {"cdiVersion": "0.6.0", "kind": "vendor.com/class",
     "devices": [{"name": "gpu0", "containerEdits": {"deviceNodes": [
         {"path": "/dev/dri/renderD128", "hostPath": "...", "type": "c",
          "major": 226, "minor": 128}]}}],
     "containerEdits": {"deviceNodes": [...]}}

``containerEdits`` at the top applies to every device of the spec. ``major``/``minor``
(``int64``, omitted when 0) and ``hostPath`` (the node on the host where it differs from
``path`` in the container) are optional. JSON files are read as JSON, any other as YAML with
PyYAML's ``safe_load`` after a bounded walk of its event stream: at most ``MAX_DEPTH``
levels, ``MAX_EVENTS`` events, no aliases (a CDI spec has no use for them; they are how a
small YAML file becomes a huge document). Device nodes are kept only as data: nothing here
opens a path. Never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_BYTES = 1 << 20  # the NVIDIA toolkit's spec for 8 GPUs is ~20 KiB
MAX_DEPTH = 16  # a spec nests 6 levels
MAX_EVENTS = 200_000
MAX_DEVICES = 4096
MAX_NODES = 64  # device nodes of one device (or of the spec)
_KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")


@dataclass(frozen=True, slots=True)
class CdiDeviceNode:
    """A device node a CDI device adds: its path in the container, its path on the host
    (``hostPath``, else ``path``), type (``c``, ``b``, ``u``, ``p``; empty: not said) and
    device number where the spec gives one."""

    path: str
    host_path: str
    type: str = ""
    major: int | None = None
    minor: int | None = None


@dataclass(frozen=True, slots=True)
class CdiSpec:
    """One spec: ``kind`` (``vendor/class``), each device's nodes by name (the spec's
    common nodes appended), ``error``/``error_count`` for what was wrong (a file-level
    error leaves ``kind`` empty; bad devices and nodes are dropped and counted)."""

    kind: str = ""
    version: str = ""
    devices: dict[str, tuple[CdiDeviceNode, ...]] = field(default_factory=dict)
    error: str = ""
    error_count: int = 0


class _TooComplex(Exception):
    pass


def _check_yaml_events(data: bytes) -> None:
    """Raise _TooComplex when the YAML stream nests deeper than MAX_DEPTH, has more than
    MAX_EVENTS events or any alias; yaml.YAMLError when it is not YAML."""
    depth = 0
    for events, ev in enumerate(yaml.parse(data, Loader=yaml.SafeLoader), 1):
        if events > MAX_EVENTS:
            raise _TooComplex(f"more than {MAX_EVENTS} YAML events")
        if isinstance(ev, yaml.AliasEvent):
            raise _TooComplex("YAML aliases are not accepted")
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _TooComplex(f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _json_depth(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise _TooComplex(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for v in value.values():
            _json_depth(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _json_depth(v, depth + 1)


def _load(data: bytes, is_json: bool) -> Any:
    if is_json:
        value = json.loads(data)
        _json_depth(value)
        return value
    _check_yaml_events(data)
    return yaml.safe_load(data)


def _int(v: Any) -> int | None:
    """Return a device number (0 or absent: None, as ``omitempty`` writes it)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < (1 << 32):
        return None
    return v


def _nodes(edits: Any, errors: list[int]) -> tuple[CdiDeviceNode, ...]:
    """Return the device nodes of a ``containerEdits`` value (bad ones counted)."""
    if edits is None:
        return ()
    if not isinstance(edits, dict):
        errors[0] += 1
        return ()
    raw = edits.get("deviceNodes") or []
    if not isinstance(raw, list):
        errors[0] += 1
        return ()
    out: list[CdiDeviceNode] = []
    for n in raw:
        path = n.get("path") if isinstance(n, dict) else None
        if not isinstance(path, str) or not path.startswith("/") or len(out) >= MAX_NODES:
            errors[0] += 1
            continue
        host = n.get("hostPath")
        kind = n.get("type")
        out.append(CdiDeviceNode(path, host if isinstance(host, str) and host.startswith("/")
                                 else path, kind if isinstance(kind, str) else "",
                                 _int(n.get("major")), _int(n.get("minor"))))
    return tuple(out)


def parse_cdi_spec(data: bytes, name: str) -> CdiSpec:
    """Return the devices of a CDI spec file called ``name`` (``.json``: JSON, else YAML).

    Never raises: a file that is too large, too deep, not JSON/YAML, or without a valid
    ``kind`` gives a spec with ``error`` set and no kind.
    """
    if len(data) > MAX_BYTES:
        return CdiSpec(error=f"larger than {MAX_BYTES} bytes", error_count=1)
    try:
        top = _load(data, name.endswith(".json"))
    except _TooComplex as err:
        return CdiSpec(error=str(err), error_count=1)
    except (ValueError, yaml.YAMLError, RecursionError) as err:
        return CdiSpec(error=f"not JSON or YAML: {str(err)[:120]}", error_count=1)
    if not isinstance(top, dict):
        return CdiSpec(error="not a mapping", error_count=1)
    kind, version = top.get("kind"), top.get("cdiVersion")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        return CdiSpec(error="no valid kind (vendor/class)", error_count=1)
    errors = [0]
    common = _nodes(top.get("containerEdits"), errors)
    devices: dict[str, tuple[CdiDeviceNode, ...]] = {}
    raw = top.get("devices")
    for d in raw if isinstance(raw, list) else ():
        dname = d.get("name") if isinstance(d, dict) else None
        if (not isinstance(dname, str) or not _NAME.fullmatch(dname) or dname in devices
                or len(devices) >= MAX_DEVICES):
            errors[0] += 1
            continue
        devices[dname] = _nodes(d.get("containerEdits"), errors) + common
    if not isinstance(raw, list):
        errors[0] += 1
    return CdiSpec(kind, version if isinstance(version, str) else "", devices,
                   f"{errors[0]} devices or device nodes dropped" if errors[0] else "",
                   errors[0])


def split_cdi_id(cdi_id: str) -> tuple[str, str] | None:
    """Return (kind, name) of a CDI device ID ``vendor/class=name``, None if malformed."""
    kind, eq, name = cdi_id.partition("=")
    if not eq or not _KIND.fullmatch(kind) or not _NAME.fullmatch(name):
        return None
    return kind, name
