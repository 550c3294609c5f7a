"""The NUMA fault block of ``sched``: real 6.1 captures, hand-made legacy and swapped forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from numa_exporter.parsers.pid_sched import (
    NumaFaultsLine,
    find_numa_faults,
    find_pages_migrated,
    parse_pid_sched,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIX / "realkernel"
HAND = FIX / "sched"


def test_real_capture_with_faults() -> None:
    # Debian 6.1 guest, numa_balancing=1, memory first touched on node 1 and migrated to 0
    r = parse_pid_sched((REAL / "balancing_on" / "proc" / "169" / "sched").read_bytes())
    assert r.numa_format == "current"
    assert r.error_count == 0
    assert r.current_node == 0 and r.numa_group_id == 0
    assert r.fault_lines == (NumaFaultsLine(0, 4837, 0, 0, 0), NumaFaultsLine(1, 0, 0, 0, 0))
    assert r.numa_faults == {0: 4837, 1: 0}
    assert r.numa_pages_migrated == 32772 and r.total_numa_faults == 4837


def test_real_capture_without_faults_yet() -> None:
    r = parse_pid_sched((REAL / "split_threads" / "proc" / "150" / "task" / "151" / "sched")
                        .read_bytes())
    assert r.numa_format == "current" and r.error_count == 0
    assert r.numa_faults == {0: 0, 1: 0}


def test_real_capture_without_balancing_lines() -> None:
    data = (FIX / "roots" / "no_balancing" / "proc" / "500" / "sched").read_bytes()
    block = find_numa_faults(data)
    assert block.numa_format == "absent" and block.lines == () and block.error_count == 0
    assert parse_pid_sched(data).numa_format == "absent"


@pytest.mark.parametrize("name", ["legacy-3.13.sched", "legacy-3.15.sched"])
def test_legacy_form_is_refused_whole(name: str) -> None:
    data = (HAND / name).read_bytes()
    r = parse_pid_sched(data)
    assert r.numa_format == "legacy"
    assert r.fault_lines == () and r.numa_faults == {}
    assert r.numa_pages_migrated is None and r.current_node is None
    assert r.error_count == 0  # valid kernel output, refused, not malformed


def test_swapped_form_keeps_the_printed_labels() -> None:
    r = parse_pid_sched((HAND / "swapped-4.15.sched").read_bytes())
    assert r.numa_format == "current" and r.error_count == 0
    assert r.fault_lines == (NumaFaultsLine(0, 0, 12, 0, 0), NumaFaultsLine(1, 0, 800, 0, 0))
    assert r.numa_faults == {0: 12, 1: 800}  # totals do not depend on the labels
    assert r.current_node == 1 and r.numa_pages_migrated == 8192


def _block(*lines: str) -> bytes:
    head = "numa_pages_migrated                          :                    5\n"
    return (head + "\n".join(lines) + "\n").encode()


def test_group_and_several_nodes() -> None:
    r = find_numa_faults(_block(
        "current_node=3, numa_group_id=4021",
        "numa_faults node=0 task_private=10 task_shared=2 group_private=40 group_shared=9",
        "numa_faults node=3 task_private=7 task_shared=0 group_private=70 group_shared=1",
    ))
    assert r.current_node == 3 and r.numa_group_id == 4021
    assert [(x.node, x.task_total, x.group_total) for x in r.lines] == [(0, 12, 49), (3, 7, 71)]
    assert r.task_faults() == {0: 12, 3: 7}


@pytest.mark.parametrize("bad", [
    "numa_faults node=0 task_private=1 task_shared=0 group_private=0",  # field missing
    "numa_faults node=0 task_shared=0 task_private=1 group_private=0 group_shared=0",  # order
    "numa_faults node=0, task_private=1, task_shared=0, group_private=0, group_shared=0",
    "numa_faults node=1024 task_private=1 task_shared=0 group_private=0 group_shared=0",
    "numa_faults node=-1 task_private=1 task_shared=0 group_private=0 group_shared=0",
    "numa_faults node=0 task_private=-1 task_shared=0 group_private=0 group_shared=0",
    "numa_faults node=0 task_private=1 task_shared=0 group_private=0 group_shared=0 x=1",
    "numa_faults node=0 task_private=\uff11 task_shared=0 group_private=0 group_shared=0",
    "numa_faults node=0 task_private=" + "9" * 21 + " task_shared=0 group_private=0 "
    "group_shared=0",
])
def test_malformed_fault_line_is_counted_and_left_out(bad: str) -> None:
    good = "numa_faults node=1 task_private=3 task_shared=4 group_private=0 group_shared=0"
    r = find_numa_faults(_block("current_node=0, numa_group_id=0", bad, good))
    assert r.error_count == 1
    assert r.task_faults() == {1: 7}


def test_node_listed_twice_keeps_the_first() -> None:
    r = find_numa_faults(_block(
        "current_node=0, numa_group_id=0",
        "numa_faults node=0 task_private=1 task_shared=0 group_private=0 group_shared=0",
        "numa_faults node=0 task_private=9 task_shared=9 group_private=0 group_shared=0",
    ))
    assert r.task_faults() == {0: 1} and r.error_count == 1


@pytest.mark.parametrize(("line", "node", "group", "errors"), [
    ("current_node=2, numa_group_id=0", 2, 0, 0),
    ("current_node=x, numa_group_id=7", None, 7, 1),
    ("current_node=1024, numa_group_id=7", None, 7, 1),
    ("current_node=1, numa_group_id=-1", 1, None, 1),
    ("current_node=1, numa_group_id=4194305", 1, None, 1),  # above PID_MAX_LIMIT
    ("current_node=1 numa_group_id=3", None, None, 2),
])
def test_current_node_line(line: str, node: int | None, group: int | None,
                           errors: int) -> None:
    r = find_numa_faults(_block(line))
    assert (r.current_node, r.numa_group_id, r.error_count) == (node, group, errors)


def test_lines_after_the_block_that_are_not_fault_lines_are_passed_over() -> None:
    r = find_numa_faults(_block(
        "current_node=0, numa_group_id=0",
        "numa_faults node=0 task_private=1 task_shared=0 group_private=0 group_shared=0",
        "some_future_field                            :                    1",
    ))
    assert r.error_count == 0 and r.task_faults() == {0: 1}


RULE = b"-" * 67 + b"\n"
BODY = (b"nr_switches                                  :                   88\n"
        b"current_node=0, numa_group_id=0\n"
        b"numa_faults node=0 task_private=4 task_shared=1 group_private=0 group_shared=0\n")


@pytest.mark.parametrize("comm", [
    b"\ncurrent_node=9",  # 15 bytes: a comm can hold it, newline included
    b"x\nnuma_faults, 1",
    b"\nnuma_faults no",
    b"------------\n--",
])
def test_a_comm_cannot_forge_or_hide_the_block(comm: bytes) -> None:
    header = comm + b" (7, #threads: 1)\n" + RULE
    r = find_numa_faults(header + BODY)
    assert (r.numa_format, r.current_node, r.error_count) == ("current", 0, 0)
    assert r.task_faults() == {0: 5}
    absent = find_numa_faults(header + b"nr_switches          :    88\n")
    assert absent.numa_format == "absent" and absent.error_count == 0


def test_line_must_start_with_the_name() -> None:
    data = RULE + b"x current_node=5, numa_group_id=0\n" + BODY[-82:]
    assert find_numa_faults(data).numa_format == "absent"
    assert find_pages_migrated(RULE + b"x numa_pages_migrated : 4\n") == (None, False)
