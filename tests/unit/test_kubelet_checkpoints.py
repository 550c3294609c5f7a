"""Kubelet checkpoints: CPU Manager, Memory Manager, device manager, every format.

Checksums are checked against values the kubelet computed, never against this project's
own output: the vectors come from the kubelet's unit tests (file named at each) and from
files real kubelets wrote (tests/fixtures/kubelet/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numa_exporter.parsers import _kubelet_checksum as gj
from numa_exporter.parsers.cpu_manager_state import parse_cpu_manager_state
from numa_exporter.parsers.kubelet_internal_checkpoint import (
    DeviceAssignment,
    parse_kubelet_internal_checkpoint,
)
from numa_exporter.parsers.memory_manager_state import (
    MemoryBlock,
    parse_memory_manager_state,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
REAL = FIX / "containerd-systemd-v2" / "var" / "lib" / "kubelet"
REAL_ONE_GPU = (
    b'{"Data":{"PodDeviceEntries":[{"PodUID":"513cb897-0262-4868-826f-aa943ee45a38","Container'
    b'Name":"app","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-77a702db-e37f-3a74-d4'
    b'6d-c5713f66058c"]},"AllocResp":"CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS03N2E3MDJkYi1l'
    b'MzdmLTNhNzQtZDQ2ZC1jNTcxM2Y2NjA1OGMaJAoOL2Rldi9udmlkaWFjdGwSDi9kZXYvbnZpZGlhY3RsGgJydxom'
    b'Cg8vZGV2L252aWRpYS11dm0SDy9kZXYvbnZpZGlhLXV2bRoCcncaMgoVL2Rldi9udmlkaWEtdXZtLXRvb2xzEhUv'
    b'ZGV2L252aWRpYS11dm0tdG9vbHMaAnJ3Gi4KEy9kZXYvbnZpZGlhLW1vZGVzZXQSEy9kZXYvbnZpZGlhLW1vZGVz'
    b'ZXQaAnJ3GiAKDC9kZXYvbnZpZGlhMBIML2Rldi9udmlkaWEwGgJydw=="}],"RegisteredDevices":{"nvidia'
    b'.com/gpu":["GPU-77a702db-e37f-3a74-d46d-c5713f66058c","GPU-9b341c59-f96b-ba85-c137-78c36'
    b'52fea65","GPU-c1e9f249-b37b-81c2-a8d9-ba5ca0294841"]}},"Checksum":133412836}'
)

# --- CPU Manager ------------------------------------------------------------------------

# pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go (kubelet 1.18-1.31): v2 files
CPU_V2 = [
    ('{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 354655845}',
     {}),
    ('{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6",'
     ' "container2": "1-3"}}, "checksum": 3610638499}',
     {("pod", "container1"): {4, 5, 6}, ("pod", "container2"): {1, 2, 3}}),
    # the same test file after pod-level resource managers (v3 kubelets hash v2 files with
    # the type name CPUManagerCheckpointV3 and an empty PodEntries map)
    ('{"policyName": "static", "defaultCPUSet": "7-9", "entries": {"pod": {"container1": '
     '"4-6", "container2": "1-3"}}, "checksum": 1942532442}',
     {("pod", "container1"): {4, 5, 6}, ("pod", "container2"): {1, 2, 3}}),
]
# the same file, kubelet <= 1.17: entries keyed by container ID
CPU_V1 = [
    ('{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"container1": "4-6", '
     '"container2": "1-3"}, "checksum": 1535905563}',
     {"container1": {4, 5, 6}, "container2": {1, 2, 3}}),
    ('{"policyName": "static", "defaultCPUSet": "7-9", "entries": {"containerID1": "4-6", '
     '"containerID2": "1-3"}, "checksum": 2026311253}',
     {"containerID1": {4, 5, 6}, "containerID2": {1, 2, 3}}),
]


@pytest.mark.parametrize("text,want", CPU_V2)
def test_cpu_v2_kubelet_vectors(text: str, want: dict[tuple[str, str], set[int]]) -> None:
    s = parse_cpu_manager_state(text.encode())
    assert (s.version, s.checksum, s.error) == ("v2", "verified", "")
    assert s.containers == {k: frozenset(v) for k, v in want.items()}
    assert s.usable


@pytest.mark.parametrize("text,want", CPU_V1)
def test_cpu_v1_by_container_id(text: str, want: dict[str, set[int]]) -> None:
    s = parse_cpu_manager_state(text.encode())
    assert (s.version, s.checksum) == ("v1", "verified")
    assert s.by_container_id == {k: frozenset(v) for k, v in want.items()}
    assert s.containers == {}


def test_cpu_v1_checksum_without_entries() -> None:
    # state_checkpoint_test.go "Fail to restore checkpoint from checkpoint with v1 checksum":
    # a v1 kubelet's hash; today's kubelet refuses it, this parser accepts the v1 layout
    s = parse_cpu_manager_state(
        b'{"policyName": "none", "defaultCPUSet": "1-3", "checksum": 1694838852}')
    assert s.checksum == "verified" and s.containers == {}


def test_cpu_v4_default_set_only() -> None:
    # state_checkpoint_test.go "Restore default CPU set" (v4; outer v2 part corrupted)
    s = parse_cpu_manager_state(json.dumps({
        "policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
        "data": '{"policyName":"none","defaultCPUSet":"4-6"}',
        "dataChecksum": 657950972}).encode())
    assert (s.version, s.checksum, s.policy) == ("v4", "verified", "none")
    assert s.default_cpus == frozenset({4, 5, 6})


def test_cpu_v1_empty_entries_verified() -> None:
    # state_checkpoint_test.go (1.12-1.17): v1 with no entries; nothing tells it from v2
    s = parse_cpu_manager_state(
        b'{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 2912033808}')
    assert s.checksum == "verified" and s.default_cpus == frozenset({4, 5, 6})


def test_cpu_v3_pod_entries() -> None:
    # state_checkpoint_test.go "Restore checkpoint from v3 (migration)": podEntries
    s = parse_cpu_manager_state(
        b'{"policyName": "static", "defaultCPUSet": "1-2", "entries": {"pod1": {"container1":'
        b' "5-6", "container2": "3-4"}}, "podEntries": {"pod2": {"cpuSet":"7-9"}},'
        b' "checksum": 766259872}')
    assert (s.version, s.checksum) == ("v3", "verified")
    assert s.pods == {"pod2": frozenset({7, 8, 9})}
    assert s.containers[("pod1", "container1")] == frozenset({5, 6})


def test_cpu_v4_data_is_authoritative() -> None:
    # state_checkpoint_test.go "Restore valid checkpoint ...": the outer v2 part is
    # deliberately wrong (policy "other", checksum 1234); data + dataChecksum rule
    s = parse_cpu_manager_state(json.dumps({
        "policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
        "data": '{"policyName":"static","defaultCPUSet":"7-9","entries":{"pod":'
                '{"container1":"4-6","container2":"1-3"}}}',
        "dataChecksum": 1420829534}).encode())
    assert (s.version, s.checksum, s.policy) == ("v4", "verified", "static")
    assert s.default_cpus == frozenset({7, 8, 9})
    assert s.containers[("pod", "container2")] == frozenset({1, 2, 3})


def test_cpu_v4_wrong_data_checksum_is_refused() -> None:
    # state_checkpoint_test.go "Fail to restore checkpoint with invalid checksum"
    s = parse_cpu_manager_state(json.dumps({
        "policyName": "static", "defaultCPUSet": "7-9", "checksum": 1942532442,
        "data": '{"policyName":"static","defaultCPUSet":"7-9"}', "dataChecksum": 1234,
    }).encode())
    assert s.checksum == "mismatch" and not s.usable and "refuse" in s.error


@pytest.mark.parametrize("text,containers", [
    ('{"policyName":"static","defaultCpuSet":"0,4-13,17-27","entries":{"513cb897-0262-4868-'
     '826f-aa943ee45a38":{"app":"1-3"},"94283d1b-ce5a-4797-bff8-0cf0c7143b2b":{"app":"14-16"}}'
     ',"checksum":1623972425}', 2),
    ('{"policyName":"static","defaultCpuSet":"0-27","checksum":273146150}', 0),
    ('{"policyName":"static","defaultCpuSet":"0,4-27","entries":{"39b37746-7f5e-4064-b8e1-'
     'eebd2bfaa003":{"app":"1-3"}},"checksum":3300516549}', 1),
    ('{"policyName":"static","defaultCpuSet":"0,13","entries":{"55784671-0e4e-49e2-b4d6-'
     'c0377ca14c81":{"app":"1-12"},"6c5f3038-adfc-485d-9943-3fd5e825300d":{"app":"14-27"}},'
     '"checksum":3558029577}', 2),
    ('{"policyName":"static","defaultCpuSet":"0,20-27","entries":{"9388acc6-a396-4f03-a353-'
     'ce153da46aaf":{"app":"1-13,17-19"},"f21fe02b-e6e2-4d04-9a4a-9e57367fa324":{"app":'
     '"14-16"}},"checksum":4055801500}', 2),
    ('{"policyName":"none","defaultCpuSet":"","checksum":1353318690}', 0),
])
def test_cpu_real_kubelet_1_20_files(text: str, containers: int) -> None:
    """Files a 1.20 kubelet wrote (tests/fixtures/kubelet/README.md, same source)."""
    s = parse_cpu_manager_state(text.encode())
    assert (s.version, s.checksum) == ("v2", "verified")
    assert len(s.containers) == containers


def test_cpu_checksum_catches_one_changed_cpu() -> None:
    good = (REAL / "cpu_manager_state").read_bytes()
    assert parse_cpu_manager_state(good).checksum == "verified"
    bad = good.replace(b'"1-3"', b'"1-4"')
    s = parse_cpu_manager_state(bad)
    assert s.checksum == "mismatch" and not s.usable and s.error_count >= 1


def test_cpu_zero_checksum_is_absent_not_verified() -> None:
    s = parse_cpu_manager_state(b'{"policyName":"static","defaultCpuSet":"0-3","checksum":0}')
    assert s.checksum == "absent" and s.usable


def test_cpu_unknown_fields_make_it_unverifiable_not_refused() -> None:
    s = parse_cpu_manager_state(b'{"policyName":"static","defaultCpuSet":"0-3",'
                                b'"globalEntries":{},"checksum":99}')
    assert s.checksum == "unverifiable" and s.usable


@pytest.mark.parametrize("data,fragment", [
    (b"", "not JSON"),
    (b"{", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"policyName": 5}', "where a string is expected"),
    (b'{"entries": {"p": {"c": 5}}}', "where a string is expected"),
    (b'{"checksum": -1}', "is not a checksum"),
    (b'{"checksum": 1.5}', "is not a checksum"),
    (b'{"checksum": NaN}', "not JSON"),
    (b'{"data": 5, "dataChecksum": 1}', "data is not a string"),
    (b'{"data": "{", "dataChecksum": 1}', "not JSON"),
    (b'{"podEntries": {"p": {"cpuSet": "x"}}}', "is not a CPU list"),
    (b"[" * 100_000, "not JSON"),
    (b"\xff\xfe{}", "not JSON"),
    (b'{"a": 1' + b"0" * 5000 + b"}", "not JSON"),
])
def test_cpu_garbage_is_an_error_not_an_exception(data: bytes, fragment: str) -> None:
    s = parse_cpu_manager_state(data)
    assert not s.version and not s.usable and s.error_count == 1
    assert fragment in s.error


def test_cpu_too_large() -> None:
    s = parse_cpu_manager_state(b" " * (1 << 20) + b"{}")
    assert not s.usable and "larger than" in s.error


def test_cpu_ids_beyond_nr_cpus_are_counted_and_dropped() -> None:
    s = parse_cpu_manager_state(b'{"policyName":"static","defaultCpuSet":"0-3","entries":'
                                b'{"u":{"a":"1","b":"8192","c":"1-"}},"checksum":0}')
    assert s.containers == {("u", "a"): frozenset({1})}
    assert s.error_count == 2 and s.usable


def test_go_field_matching_is_case_insensitive_and_last_key_wins() -> None:
    # encoding/json: exact match preferred, case-insensitive accepted; later keys overwrite
    s = parse_cpu_manager_state(b'{"POLICYNAME":"static","policyName":"none",'
                                b'"defaultcpuset":"0-1","checksum":0}')
    assert s.policy == "none" and s.default_cpus == frozenset({0, 1})


# --- Memory Manager ---------------------------------------------------------------------

# pkg/kubelet/cm/memorymanager/state/state_checkpoint_test.go
MACHINE = ('"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,'
           '"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}}')
ENTRIES = '"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}}'


def test_memory_v1_kubelet_vector() -> None:
    s = parse_memory_manager_state(
        f'{{"policyName":"static",{MACHINE},{ENTRIES},"checksum": 4215593881}}'.encode())
    assert (s.version, s.checksum, s.policy) == ("v1", "verified", "static")
    assert s.machine_nodes == frozenset({0})
    assert s.containers == {("pod", "container1"): (MemoryBlock(frozenset({0}), "memory", 512),)}
    assert s.reserved == {(0, "memory"): 512}  # machineState's memoryMap.memory.reserved


def test_memory_v2_pod_entries_kubelet_vector() -> None:
    s = parse_memory_manager_state(
        (f'{{"policyName":"static",{MACHINE},{ENTRIES},"podEntries":{{"pod":{{"memoryBlocks":'
         '[{"numaAffinity":[0],"type":"memory","size":512}]}},"checksum": 1278640530}')
        .encode())
    assert (s.version, s.checksum) == ("v2", "verified")
    assert s.pods == {"pod": (MemoryBlock(frozenset({0}), "memory", 512),)}


def test_memory_v3_data_kubelet_vector() -> None:
    data = '{"policyName":"static",' + MACHINE + "," + ENTRIES + "}"
    s = parse_memory_manager_state(json.dumps({
        "policyName": "other", "checksum": 1234, "data": data,
        "dataChecksum": 1849615440}).encode())
    assert (s.version, s.checksum, s.policy) == ("v3", "verified", "static")
    assert ("pod", "container1") in s.containers


def test_memory_checksum_catches_a_moved_block() -> None:
    text = f'{{"policyName":"static",{MACHINE},{ENTRIES},"checksum": 4215593881}}'
    s = parse_memory_manager_state(text.replace('"numaAffinity":[0]', '"numaAffinity":[1]')
                                   .encode())
    assert s.checksum == "mismatch" and not s.usable and "refuse" in s.error


def test_memory_nodes_out_of_range_are_dropped_and_counted() -> None:
    s = parse_memory_manager_state(
        b'{"policyName":"Static","machineState":{"0":{},"5000":{}},"entries":{"u":{"c":['
        b'{"numaAffinity":[0,1],"type":"memory","size":1},'
        b'{"numaAffinity":[1024],"type":"memory","size":1},'
        b'{"numaAffinity":[-1],"type":"memory","size":1}]}},"checksum":0}')
    assert s.containers == {("u", "c"): (MemoryBlock(frozenset({0, 1}), "memory", 1),)}
    assert s.machine_nodes == frozenset({0})
    assert s.error_count == 3 and s.usable


def test_memory_reserved_per_node_and_type_from_machine_state() -> None:
    # two nodes, memory and 2 MiB hugepages; a node with a null table and one out of range
    s = parse_memory_manager_state(
        b'{"policyName":"Static","machineState":{'
        b'"0":{"memoryMap":{"memory":{"total":8,"reserved":3},'
        b'"hugepages-2Mi":{"total":4,"reserved":2097152}}},'
        b'"1":{"memoryMap":{"memory":{"total":8,"reserved":5},"hugepages-1Gi":null}},'
        b'"4096":{"memoryMap":{"memory":{"reserved":7}}},"2":{}},"entries":{},"checksum":0}')
    assert s.reserved == {(0, "hugepages-2Mi"): 2097152, (0, "memory"): 3, (1, "memory"): 5}
    assert s.machine_nodes == frozenset({0, 1, 2})


@pytest.mark.parametrize("data", [
    b"", b"null", b'{"machineState": []}', b'{"machineState": {"x": {}}}',
    b'{"entries": {"u": {"c": [{"size": -1}]}}}', b'{"entries": {"u": {"c": [{"size": 1e3}]}}}',
    b'{"data": "[", "dataChecksum": 0}', b"{" * 50 + b"}" * 50,
])
def test_memory_garbage(data: bytes) -> None:
    s = parse_memory_manager_state(data)
    assert not s.version and s.error_count == 1 and s.error


# --- device manager ---------------------------------------------------------------------

def test_device_real_kubelet_file_with_nodes() -> None:
    s = parse_kubelet_internal_checkpoint((REAL / "device-plugins" /
                                           "kubelet_internal_checkpoint").read_bytes())
    assert (s.version, s.checksum) == ("v2", "verified")
    assert [(e.pod_uid[:8], e.container, e.resource, e.nodes) for e in s.entries] == [
        ("513cb897", "app", "nvidia.com/gpu", frozenset({0})),
        ("94283d1b", "app", "nvidia.com/gpu", frozenset({1}))]
    assert len(s.registered["nvidia.com/gpu"]) == 3


def test_device_real_kubelet_file_one_gpu() -> None:
    # the same 1.20 node (tests/fixtures/kubelet/README.md): one GPU on node 0
    s = parse_kubelet_internal_checkpoint(REAL_ONE_GPU)
    assert (s.version, s.checksum) == ("v2", "verified")
    assert [(e.container, e.nodes) for e in s.entries] == [("app", frozenset({0}))]


def test_device_real_file_without_entries() -> None:
    # a GPU node's kubelet with no pod holding a GPU (PodDeviceEntries null)
    s = parse_kubelet_internal_checkpoint(
        b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":'
        b'["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}')
    assert (s.version, s.checksum, s.entries) == ("v2", "verified", ())


def test_device_without_topology_is_node_minus_one() -> None:
    # a kind node's kubelet; the plugin gave no topology: DeviceIDs keyed "-1"
    s = parse_kubelet_internal_checkpoint(
        b'{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3",'
        b'"ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},'
        b'"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":'
        b'{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}')
    assert s.checksum == "verified"
    assert s.entries == (DeviceAssignment("bf52b2cd-b611-4e79-86b1-280b283185c3", "check",
                                          "nvidia.com/gpu", {-1: ("tegra",)}),)
    assert s.entries[0].nodes == frozenset()


def test_device_v1_plain_list_has_no_nodes() -> None:
    # checkpointv1.go: kubelet <= 1.19 wrote DeviceIDs as a list (no NUMA node)
    s = parse_kubelet_internal_checkpoint(
        b'{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r",'
        b'"DeviceIDs":["d1","d2"],"AllocResp":""}],"RegisteredDevices":{"r":["d1","d2"]}},'
        b'"Checksum":1}')
    assert s.version == "v1" and s.checksum == "mismatch"
    assert s.entries[0].devices == {-1: ("d1", "d2")} and s.entries[0].nodes == frozenset()


def test_device_checksum_catches_a_moved_device() -> None:
    good = (REAL / "device-plugins" / "kubelet_internal_checkpoint").read_bytes()
    s = parse_kubelet_internal_checkpoint(good.replace(b'{"0":["GPU-77a7', b'{"1":["GPU-77a7'))
    assert s.checksum == "mismatch" and not s.usable


def test_device_boot_id_is_outside_the_checksum() -> None:
    good = json.loads((REAL / "device-plugins" / "kubelet_internal_checkpoint").read_bytes())
    good["BootID"] = "0b9ad4ae-d2a4-4a25-a3c5-cf1e9e67c8e1"
    s = parse_kubelet_internal_checkpoint(json.dumps(good).encode())
    assert s.checksum == "verified"


@pytest.mark.parametrize("data", [
    b"", b"{", b'"x"', b'{"Data":{"PodDeviceEntries":{}}}',
    b'{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"zero":["a"]}}]}}',
    b'{"Data":{"PodDeviceEntries":[{"DeviceIDs":{"99999999999999999999":["a"]}}]}}',
    b'{"Data":{"PodDeviceEntries":[{"AllocResp":"!!!"}]}}',
    b'{"Data":{"PodDeviceEntries":[{"PodUID":7}]}}',
])
def test_device_garbage(data: bytes) -> None:
    s = parse_kubelet_internal_checkpoint(data)
    assert not s.version and not s.usable and s.error_count == 1


def test_device_node_ids_out_of_range_dropped() -> None:
    s = parse_kubelet_internal_checkpoint(
        b'{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r",'
        b'"DeviceIDs":{"0":["a"],"4096":["b"],"-2":["c"]}}]},"Checksum":5}')
    assert s.entries[0].devices == {0: ("a",)} and s.error_count >= 1


# --- the checksum engine itself ---------------------------------------------------------

def test_fnv32a_reference_values() -> None:
    # FNV-1a test vectors (Fowler, Noll, Vo: "a" and "foobar")
    assert gj.fnv32a(b"") == 0x811C9DC5
    assert gj.fnv32a(b"a") == 0xE40C292C
    assert gj.fnv32a(b"foobar") == 0xBF9CF968


def test_go_strings_hash_as_utf8_with_replacement() -> None:
    assert gj.go_bytes("\ud800x") == "\ufffdx".encode()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_parsers_are_total_on_bytes(data: bytes) -> None:
    for parse in (parse_cpu_manager_state, parse_memory_manager_state,
                  parse_kubelet_internal_checkpoint):
        r = parse(data)
        assert r.version or r.error


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["policyName", "defaultCpuSet", "entries", "podEntries", "checksum",
                         "data", "dataChecksum", "machineState", "numaAffinity", "type",
                         "size", "Data", "PodDeviceEntries", "DeviceIDs", "0", "-1", "c"]),
        kids, max_size=5),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(JSONISH)
def test_parsers_are_total_on_json_shaped_garbage(value: object) -> None:
    data = json.dumps(value).encode()
    for parse in (parse_cpu_manager_state, parse_memory_manager_state,
                  parse_kubelet_internal_checkpoint):
        r = parse(data)
        assert r.version or r.error
