"""The kubelet's DRA checkpoint, ``dra_manager_state``, both shapes.

Checksums are checked against values the kubelet computed, never against this project's
own output. The vectors are copied from the kubelet's unit tests:

* current shape (CRC-32 of ``Data``): ``pkg/kubelet/cm/dra/state/checkpointer_test.go``,
  kubernetes/kubernetes commit 59555c6a62f407cd5834e7a44a20ae4a38a9d258
  (``TestCheckpointGetOrCreate``: single-claim-info-state, claim-info-state-with-multiple-
  devices, two-claim-info-states, incorrect-checksum);
* legacy shape (go-spew/FNV-32a): ``pkg/kubelet/cm/dra/state/state_checkpoint_test.go``,
  commit 0209a4cb57a359609b96779f044bcdff8e8df70d (``TestCheckpointGetOrCreate``,
  ``TestCheckpointStateStore``, ``TestOldCheckpointRestore``).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers.kubelet.dra_manager_state import (
    MAX_BYTES,
    DraDevice,
    parse_dra_manager_state,
)

CLAIM = "067798be-454e-4be4-9047-1aa06aea63f7"
CLAIM2 = "4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
POD = "139cdb46-f989-4f17-9561-ca10cfb509a6"
DRV = "test-driver.cdi.k8s.io"
CDI = "example.com/example=cdi-example"

# the kubelet's test vectors, verbatim (provenance in the file)
VECTORS = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
                      / "dra-vectors.json").read_text())["vectors"]
SINGLE, MULTI, TWO = (VECTORS[k]["content"] for k in ("single", "multi", "two"))
INCORRECT = TWO.replace("3633532417", "2930258365")  # the test's incorrect-checksum case
(LEGACY_HANDLES, LEGACY_TWO_DRIVERS, LEGACY_TWO_CLAIMS, LEGACY_INVALID, LEGACY_OLD,
 LEGACY_NULL_HANDLES) = (VECTORS[k]["content"] for k in (
    "legacy_handles", "legacy_two_drivers", "legacy_two_claims", "legacy_invalid",
    "legacy_old", "legacy_null_handles"))


def _dev(name: str, device: str, cdi: tuple[str, ...] = (CDI,),
         pool: str = "worker-1", uid: str = CLAIM, driver: str = DRV) -> DraDevice:
    return DraDevice(uid, name, "default", driver, pool, device, cdi)


def test_current_single_claim_kubelet_vector() -> None:
    got = parse_dra_manager_state(SINGLE.encode())
    assert (got.version, got.checksum, got.error_count, got.usable) == (
        "v1", "verified", 0, True)
    assert got.api_version == "checkpoint.dra.kubelet.k8s.io/v1"
    assert got.pods == {POD: (_dev("example", "dev-1"),)}


def test_current_multiple_devices_kubelet_vector() -> None:
    got = parse_dra_manager_state(MULTI.encode())
    assert got.checksum == "verified"
    assert got.pods == {POD: (_dev("example", "dev-1"), _dev("example", "dev-2"))}


def test_current_two_claims_kubelet_vector() -> None:
    got = parse_dra_manager_state(TWO.encode())
    assert (got.checksum, got.claims) == ("verified", 2)
    assert got.pods == {POD: (_dev("example-1", "dev-1"),
                              _dev("example-2", "dev-2", (), uid=CLAIM2))}


def test_current_incorrect_checksum_is_refused_whole_and_counted() -> None:
    got = parse_dra_manager_state(INCORRECT.encode())
    assert (got.checksum, got.usable, got.pods, got.error_count) == (
        "mismatch", False, {}, 1)
    assert "refuse" in got.error


def test_current_one_changed_byte_is_refused() -> None:
    # dev-1 -> dev-9 inside Data, the kubelet's checksum kept
    got = parse_dra_manager_state(SINGLE.replace("dev-1", "dev-9").encode())
    assert (got.checksum, got.pods) == ("mismatch", {})


def test_current_checksum_is_crc32_ieee_of_data() -> None:
    # a checkpoint written the way NewCheckpoint writes one (zlib's CRC-32 is IEEE)
    device = {"PoolName": "node-a", "DeviceName": "gpu-1", "ShareID": "s-1",
              "RequestNames": ["r"], "CDIDeviceIDs": ["example.com/gpu=gpu1"]}
    claim = {"ClaimUID": "u", "ClaimName": "gpu", "Namespace": "ml", "PodUIDs": {"p": {}},
             "DriverState": {"gpu.example.com": {"Devices": [device]}}}
    data = json.dumps({"kind": "DRACheckpoint",
                       "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "Entries": [claim]},
                      separators=(",", ":"))
    blob = json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())}).encode()
    got = parse_dra_manager_state(blob)
    assert got.checksum == "verified"
    assert got.pods == {"p": (DraDevice("u", "gpu", "ml", "gpu.example.com", "node-a", "gpu-1",
                                        ("example.com/gpu=gpu1",)),)}


@pytest.mark.parametrize("text", [LEGACY_HANDLES, LEGACY_TWO_DRIVERS, LEGACY_TWO_CLAIMS,
                                  LEGACY_OLD, LEGACY_NULL_HANDLES])
def test_legacy_kubelet_vectors_verify_by_the_fnv_rule(text: str) -> None:
    got = parse_dra_manager_state(text.encode())
    assert (got.version, got.checksum, got.error_count) == ("legacy-v1", "verified", 0)


def test_legacy_devices_are_known_by_their_cdi_names() -> None:
    got = parse_dra_manager_state(LEGACY_TWO_DRIVERS.encode())
    assert got.pods == {POD: (
        DraDevice(CLAIM, "example", "default", "test-driver-1.cdi.k8s.io", "",
                  "cdi-example-1", ("example-1.com/example-1=cdi-example-1",)),
        DraDevice(CLAIM, "example", "default", "test-driver-2.cdi.k8s.io", "",
                  "cdi-example-2", ("example-2.com/example-2=cdi-example-2",)))}


def test_legacy_invalid_checksum_is_refused_and_counted() -> None:
    got = parse_dra_manager_state(LEGACY_INVALID.encode())
    assert (got.checksum, got.usable, got.pods, got.error_count) == (
        "mismatch", False, {}, 1)


def test_legacy_structured_handle_is_unverifiable_not_refused() -> None:
    text = LEGACY_HANDLES.replace(r'"data":"{\"a\": \"b\"}"',
                                  r'"data":"","structuredData":{"nodeName":"n1"}')
    got = parse_dra_manager_state(text.encode())
    assert (got.checksum, got.usable, got.error_count) == ("unverifiable", True, 0)


@pytest.mark.parametrize("data, fragment", [
    (b"{", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"foo": 1}', "neither"),
    (b'{"Data": 5, "Checksum": 1}', "string"),
    (b'{"Data": "", "Checksum": 4294967296}', "uint32"),
    (b'{"Data": "{", "Checksum": 366298937}', "not JSON"),  # CRC-32 of "{": then Data fails
])
def test_garbage_is_an_error_not_an_exception(data: bytes, fragment: str) -> None:
    got = parse_dra_manager_state(data)
    assert (got.version, got.pods, got.error_count) == ("", {}, 1)
    assert fragment in got.error


def test_too_large_and_too_deep_are_refused() -> None:
    assert "larger than" in parse_dra_manager_state(b" " * (MAX_BYTES + 1)).error
    deep = '{"Data":"' + "[" * 5000 + '","Checksum":0}'
    assert parse_dra_manager_state(deep.encode()).error_count == 1
    inner = "[" * 100 + "]" * 100
    text = json.dumps({"kind": "x", "Entries": [{"DriverState": {"d": {"Devices": [
        {"CDIDeviceIDs": json.loads(inner)}]}}}]})
    got = parse_dra_manager_state(json.dumps(
        {"Data": text, "Checksum": zlib.crc32(text.encode())}).encode())
    assert (got.version, got.error_count) == ("", 1)


def test_control_characters_are_kept_as_data() -> None:
    text = json.dumps({"Entries": [{"ClaimName": "a\x1b[2Jb\n", "PodUIDs": {"p\x00": {}},
                                    "DriverState": {"d\x07": {"Devices": [
                                        {"DeviceName": "g\r"}]}}}]})
    got = parse_dra_manager_state(json.dumps(
        {"Data": text, "Checksum": zlib.crc32(text.encode())}).encode())
    assert got.checksum == "verified"
    assert got.pods["p\x00"][0].claim == "a\x1b[2Jb\n"  # labels escape it, not the parser


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_total_on_bytes(data: bytes) -> None:
    got = parse_dra_manager_state(data)
    assert got.error_count >= 0
