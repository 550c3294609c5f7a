"""A process's identity across exec() (issue 23 #2): the image fields of ``stat`` and the
process table's answer when they change."""

from __future__ import annotations

from numa_exporter.model.drift import WarmupRule
from numa_exporter.model.process_state import ProcessKey, ProcessTable
from numa_exporter.parsers.pid_stat import parse_pid_stat

# A stat line as Linux 6.x prints it for a python3 process (fields 1-52), comm hostile.
LINE = (b"4242 (a) 1 2 (x) S 1 4242 4242 0 -1 4194560 300 0 0 0 5 2 0 0 20 0 1 0 "
        b"123456 26214400 1500 18446744073709551615 94013577728000 94013577747881 "
        b"140723386211200 0 0 0 0 16781312 134217730 0 0 0 17 1 0 0 0 0 0 "
        b"94013577765504 94013577766000 94013956329472 140723386219218 140723386219238 "
        b"140723386219238 140723386220523 0\n")


def _with(line: bytes, **fields: int) -> bytes:
    """Return ``line`` with stat fields (1-based, counted after comm) set."""
    head, tail = line.rsplit(b")", 1)
    rest = tail.split()
    for name, value in fields.items():
        rest[int(name[1:]) - 3] = str(value).encode()
    return head + b") " + b" ".join(rest) + b"\n"


def test_image_is_read_after_the_last_paren() -> None:
    st = parse_pid_stat(LINE)
    assert st is not None and st.comm == "a) 1 2 (x"
    assert st.image == (94013577728000, 94013577747881, 140723386211200)


def test_image_hidden_without_mm_or_ptrace_access() -> None:
    zeros = {f"f{n}": 0 for n in (26, 27, 28, 48, 49, 50, 51)}
    st = parse_pid_stat(_with(LINE, **zeros))  # a zombie leader: no mm
    assert st is not None and st.image is None
    st = parse_pid_stat(_with(LINE, **{**zeros, "f26": 1, "f27": 1}))  # not permitted
    assert st is not None and st.image is None


def test_a_rename_that_moves_the_argument_area_is_no_exec() -> None:
    # systemd's rename_process moves arg_start/arg_end with prctl(PR_SET_MM_ARG_*)
    moved = parse_pid_stat(_with(LINE, f48=140723386300000, f49=140723386300040))
    assert moved is not None and moved.image == parse_pid_stat(LINE).image  # type: ignore[union-attr]
    short = b" ".join(LINE.split()[:31]) + b"\n"  # cut after field 28 (comm is 4 words)
    st = parse_pid_stat(short)
    assert st is not None and st.image == (94013577728000, 94013577747881, 140723386211200)


def test_exec_starts_a_new_state_and_an_unknown_image_does_not() -> None:
    table = ProcessTable(WarmupRule())
    old = table.get(ProcessKey(7, 100, (1, 2, 3)))
    old.reads = 5
    assert table.get(ProcessKey(7, 100, None)) is old  # leader a zombie: image hidden
    assert table.peek(ProcessKey(7, 100, (1, 2, 3))) is old
    assert table.peek(ProcessKey(7, 100, (4, 5, 6))) is None
    new = table.get(ProcessKey(7, 100, (4, 5, 6)))
    assert new is not old and new.reads == 0 and new.execd
    assert table.get(ProcessKey(7, 100, (4, 5, 6))) is new
    assert not table.get(ProcessKey(7, 101, (4, 5, 6))).execd  # a new process, not an exec


def test_state_first_seen_without_image_adopts_it() -> None:
    table = ProcessTable(WarmupRule())
    st = table.get(ProcessKey(7, 100, None))
    assert table.get(ProcessKey(7, 100, (1, 2, 3))) is st
    assert table.get(ProcessKey(7, 100, (9, 9, 9))) is not st


def test_an_execd_program_ages_from_when_it_was_first_read() -> None:
    table = ProcessTable(WarmupRule())
    table.get(ProcessKey(7, 100, (1, 2, 3)))
    st = table.get(ProcessKey(7, 100, (4, 5, 6)))
    assert st.program_start(10.0, 500.0) == 500.0
    assert st.program_start(10.0, 900.0) == 500.0
    assert table.get(ProcessKey(8, 1, (1,))).program_start(10.0, 500.0) == 10.0


def test_a_new_address_space_is_an_exec_even_with_the_same_image() -> None:
    # issue 37 #8: without address randomisation a self re-exec keeps the image
    table = ProcessTable(WarmupRule())
    old = table.get(ProcessKey(7, 100, (1, 2, 3), 0))
    old.reads = 5
    assert table.get(ProcessKey(7, 100, (1, 2, 3), None)) is old  # the probe cannot tell
    assert table.get(ProcessKey(7, 100, (1, 2, 3), 0)) is old
    new = table.get(ProcessKey(7, 100, (1, 2, 3), 1))
    assert new is not old and new.execd and new.reads == 0
    assert table.peek(ProcessKey(7, 100, (1, 2, 3), 0)) is None
    # the image still decides where the generation is unknown on either side
    assert table.get(ProcessKey(7, 100, (4, 5, 6), None)) is not new


def test_a_generation_first_known_later_is_adopted_not_taken_for_an_exec() -> None:
    table = ProcessTable(WarmupRule())
    st = table.get(ProcessKey(8, 100, (1, 2, 3), None))
    assert table.get(ProcessKey(8, 100, (1, 2, 3), 4)) is st
    assert st.key.mm == 4 and st.key.image == (1, 2, 3)
    assert table.get(ProcessKey(8, 100, (1, 2, 3), 5)) is not st
