"""Parser for ``/proc/<pid>/comm`` (``comm_show`` in fs/proc/base.c).

The task's name and a newline, as ``proc_task_name`` writes it unescaped. ``status`` shows
the same name on its ``Name:`` line with ``\\`` and newline escaped (``\\\\``, ``\\n``); the
kernel writes ``comm`` for a fraction of ``status``' cost, so the scan matches the
include/exclude patterns on it where the resident size decides nothing.
"""

from __future__ import annotations

from numa_exporter.parsers.text import label_text


def parse_pid_comm(data: bytes) -> str:
    """Return the name as safe text, exactly as :func:`parse_pid_status_name` gives it for
    the same task: the kernel's newline dropped, ``\\`` and newlines escaped as status
    escapes them, surrounding blanks stripped as that parser strips them."""
    if data.endswith(b"\n"):
        data = data[:-1]
    data = data.replace(b"\\", b"\\\\").replace(b"\n", b"\\n")
    return label_text(data.strip(b" \t"))
