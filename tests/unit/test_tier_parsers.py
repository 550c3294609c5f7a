"""Parsers for osrelease, demotion_enabled and a node's HMAT access attributes."""

from __future__ import annotations

from pathlib import Path

import pytest

from numa_exporter.parsers.demotion_enabled import parse_demotion_enabled
from numa_exporter.parsers.node_access import initiator_nodes, parse_node_access
from numa_exporter.parsers.osrelease import KernelRelease, parse_osrelease

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "source" / "real-kernel-2node"


@pytest.mark.parametrize(("data", "expect"), [
    (b"6.1.0-50-amd64\n", KernelRelease(6, 1, 0, "6.1.0-50-amd64")),
    (b"4.18.0-553.el8_10.x86_64\n", KernelRelease(4, 18, 0, "4.18.0-553.el8_10.x86_64")),
    (b"6.8.0-1013-nvidia-64k\n", KernelRelease(6, 8, 0, "6.8.0-1013-nvidia-64k")),
    (b"6.10\n", KernelRelease(6, 10, None, "6.10")),
    (b"6.10-rc1", KernelRelease(6, 10, None, "6.10-rc1")),
    (b"", None),
    (b"\n", None),
    (b"linux\n", None),
    (b"6.1 x\n", None),  # a space: not one token
    (b"6.12345\n", None),  # minor beyond 4 digits
    (b"6.1.0\n\n", None),
    (b"6.1.0-\xff\n", None),
    (b"6.1.0-" + b"x" * 60 + b"\n", None),  # longer than the kernel keeps
])
def test_parse_osrelease(data: bytes, expect: KernelRelease | None) -> None:
    assert parse_osrelease(data) == expect


def test_osrelease_of_the_capture() -> None:
    r = parse_osrelease(b"6.1.0-50-amd64\n")
    assert r is not None and r.at_least(4, 19) and r.at_least(6, 1) and not r.at_least(6, 2)
    assert not KernelRelease(4, 18, 0, "4.18.0").at_least(4, 19)
    assert KernelRelease(5, 0, 0, "5.0.0").at_least(4, 19)


@pytest.mark.parametrize(("data", "expect"), [
    (b"true\n", True), (b"false\n", False), (b"false", False),
    (b"1\n", None), (b"True\n", None), (b"", None), (b"true\n\n", None), (b" true\n", None),
])
def test_parse_demotion_enabled(data: bytes, expect: bool | None) -> None:
    assert parse_demotion_enabled(data) is expect


def test_demotion_enabled_of_the_capture() -> None:
    data = (REAL / "common/sys/kernel/mm/numa/demotion_enabled").read_bytes()
    assert data == b"false\n" and parse_demotion_enabled(data) is False


def test_node_access_in_base_units() -> None:
    r = parse_node_access(0, {
        "read_latency": b"120\n", "write_latency": b"140\n",
        "read_bandwidth": b"262144\n", "write_bandwidth": b"131072\n",
    }, ["node0", "node2", "read_latency", "write_latency", "power", "uevent"])
    assert r.access_class == 0 and r.initiators == frozenset({0, 2})
    # 120 ns = 1.2e-7 s; 262144 MiB/s = 262144 * 1048576 = 274877906944 B/s
    assert r.read_latency_seconds == pytest.approx(1.2e-7)
    assert r.write_latency_seconds == pytest.approx(1.4e-7)
    assert r.read_bandwidth_bytes_per_second == 274877906944
    assert r.write_bandwidth_bytes_per_second == 137438953472
    assert r.error_count == 0


def test_node_access_zero_is_unknown_and_junk_is_counted() -> None:
    r = parse_node_access(1, {
        "read_latency": b"0\n", "write_latency": b"-5\n",
        "read_bandwidth": b"4294967296\n",  # above u32
        "write_bandwidth": b"\xd9\xa3\n",  # an Arabic-Indic digit is not a number here
    }, [])
    assert r.read_latency_seconds is None and r.error_count == 3
    assert r.write_latency_seconds is None
    assert r.read_bandwidth_bytes_per_second is None
    assert r.write_bandwidth_bytes_per_second is None


def test_node_access_without_attributes() -> None:
    # an access class whose initiators are linked but the table gave no numbers
    r = parse_node_access(0, {}, ["node0"])
    assert r.initiators == frozenset({0}) and r.read_latency_seconds is None
    assert r.error_count == 0


def test_initiator_names() -> None:
    assert initiator_nodes(["node0", "node1023", "node1024", "node", "node-1", "nodeX",
                            "node٣", "node00007", "read_latency"]) == frozenset({0, 1023})
