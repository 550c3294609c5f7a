"""CDI specs (cncf-tags/container-device-interface ``specs-go/config.go``): JSON and YAML,
device and spec-level device nodes, and hostile files refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.cdi_spec import (
    MAX_BYTES,
    CdiDeviceNode,
    parse_cdi_spec,
    split_cdi_id,
)

# The shape of a spec the NVIDIA container toolkit generates (nvidia-ctk cdi generate),
# trimmed to two devices and one common node.
YAML = b"""\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
"""


def test_yaml_spec_with_common_nodes() -> None:
    got = parse_cdi_spec(YAML, "nvidia.yaml")
    assert (got.kind, got.version, got.error_count) == ("nvidia.com/gpu", "0.5.0", 0)
    ctl = CdiDeviceNode("/dev/nvidiactl", "/dev/nvidiactl")
    assert got.devices == {
        "0": (CdiDeviceNode("/dev/nvidia0", "/dev/nvidia0"), ctl),
        "all": (CdiDeviceNode("/dev/nvidia0", "/dev/nvidia0"),
                CdiDeviceNode("/dev/nvidia1", "/dev/nvidia1"), ctl)}


def test_json_spec_with_numbers_and_host_path() -> None:
    spec = {"cdiVersion": "0.6.0", "kind": "gpu.example.com/gpu", "devices": [
        {"name": "gpu-1", "containerEdits": {"deviceNodes": [
            {"path": "/dev/dri/renderD128", "hostPath": "/dev/dri/renderD129", "type": "c",
             "major": 226, "minor": 129}]}}]}
    got = parse_cdi_spec(json.dumps(spec).encode(), "gpu.json")
    assert got.devices == {"gpu-1": (CdiDeviceNode("/dev/dri/renderD128",
                                                   "/dev/dri/renderD129", "c", 226, 129),)}


def test_bad_devices_and_nodes_are_dropped_and_counted() -> None:
    spec = {"kind": "a.com/b", "devices": [
        {"name": "ok", "containerEdits": {"deviceNodes": [{"path": "relative"},
                                                           {"path": "/dev/x", "major": -1}]}},
        {"name": "bad name!"}, {"name": "ok"}, "x"]}
    got = parse_cdi_spec(json.dumps(spec).encode(), "s.json")
    assert got.devices == {"ok": (CdiDeviceNode("/dev/x", "/dev/x"),)}
    assert got.error_count == 4


@pytest.mark.parametrize("data, name, fragment", [
    (b"{", "a.json", "not JSON"),
    (b"kind: [", "a.yaml", "not JSON or YAML"),
    (b"- 1", "a.yaml", "not a mapping"),
    (b"kind: nokind", "a.yaml", "kind"),
    (b"kind: a.com/b\nx: " + b"[" * 40 + b"]" * 40, "a.yaml", "deeper"),
    (b'{"kind": "a.com/b", "x": ' + b"[" * 40 + b"]" * 40 + b"}", "a.json", "deeper"),
    (b"kind: a.com/b\na: &x [1]\nb: [*x, *x]\n", "a.yaml", "aliases"),
    (b"kind: a.com/b\nx: !!python/object:os.system {}\n", "a.yaml", "not JSON or YAML"),
    (b"{" * 100_000, "a.json", ""),
])
def test_hostile_specs_are_refused(data: bytes, name: str, fragment: str) -> None:
    got = parse_cdi_spec(data, name)
    assert (got.kind, got.devices, got.error_count) == ("", {}, 1)
    assert fragment in got.error


def test_too_large() -> None:
    assert "larger than" in parse_cdi_spec(b" " * (MAX_BYTES + 1), "a.yaml").error


def test_billion_laughs_is_refused_before_it_expands() -> None:
    lines = ["kind: a.com/b", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i-1}"] * 10) + "]" for i in range(1, 9)]
    got = parse_cdi_spec("\n".join(lines).encode(), "lol.yaml")
    assert (got.kind, got.error_count) == ("", 1)


def test_control_characters_stay_data() -> None:
    spec = {"kind": "a.com/b", "devices": [{"name": "d", "containerEdits": {"deviceNodes": [
        {"path": "/dev/\x1b[2J\n"}]}}]}
    got = parse_cdi_spec(json.dumps(spec).encode(), "s.json")
    assert got.devices["d"][0].path == "/dev/\x1b[2J\n"


@pytest.mark.parametrize("cdi_id, want", [
    ("nvidia.com/gpu=0", ("nvidia.com/gpu", "0")),
    ("example.com/example=cdi-example", ("example.com/example", "cdi-example")),
    ("nokind=0", None), ("a.com/b", None), ("a.com/b=", None), ("a.com/b=x/y", None)])
def test_split_cdi_id(cdi_id: str, want: tuple[str, str] | None) -> None:
    assert split_cdi_id(cdi_id) == want


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512), st.sampled_from(["a.json", "a.yaml"]))
def test_total_on_bytes(data: bytes, name: str) -> None:
    assert parse_cdi_spec(data, name).error_count >= 0
