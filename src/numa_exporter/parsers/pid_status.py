"""Parser for ``/proc/<pid>/status``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from numa_exporter.parsers._kv import to_uint
from numa_exporter.parsers.cpulist import MAX_CPU_ID, MAX_NODE_ID, parse_cpulist
from numa_exporter.parsers.text import label_text


@dataclass(frozen=True, slots=True)
class PidStatus:
    """Fields of status the exporter uses; sizes in bytes, None where the kernel omits them.

    ``name`` is safe text (see ``_text.label_text``): valid UTF-8, no control characters.
    """

    name: str
    tgid: int | None
    uid: int | None
    threads: int | None
    vm_rss: int | None  # absent for kernel threads
    rss_anon: int | None
    rss_file: int | None
    rss_shmem: int | None
    hugetlb: int | None
    cpus_allowed: frozenset[int] | None
    mems_allowed: frozenset[int] | None
    error_count: int = 0
    kthread: bool | None = None  # the Kthread line (PF_KTHREAD; kernels since 6.x), else None


#: The lines parse_pid_status uses, at the start of a line (after blanks), and their values.
_USED = re.compile(rb"^[ \t\r\f\v]*(Tgid|Uid|Threads|VmRSS|RssAnon|RssFile|RssShmem|"
                   rb"HugetlbPages|Cpus_allowed_list|Mems_allowed_list|Kthread):([^\n]*)",
                   re.M)

_KB = {"VmRSS": "vm_rss", "RssAnon": "rss_anon", "RssFile": "rss_file",
       "RssShmem": "rss_shmem", "HugetlbPages": "hugetlb"}


def parse_pid_status(data: bytes) -> PidStatus:
    """Return the fields of a status file; malformed known lines are counted in error_count.

    Never raises: numbers are ASCII decimal only, id lists are bounded (CPUs below 8192,
    nodes below 1024).
    """
    # only the lines used, found by one regular expression (a status file has ~60 lines and
    # every watched process's is parsed each scan); the last of a repeated key counts
    f = {m[1].decode("ascii"): m[2].decode("utf-8", "replace").strip()
         for m in _USED.finditer(data)}
    errors = 0

    def num(key: str) -> int | None:
        nonlocal errors
        if key not in f:
            return None
        parts = f[key].split()
        v = to_uint(parts[0]) if parts else None
        if v is None:
            errors += 1
        return v

    def kb(key: str) -> int | None:
        nonlocal errors
        if key not in f:
            return None
        parts = f[key].split()
        v = to_uint(parts[0]) if len(parts) == 2 and parts[1] == "kB" else None
        if v is None:
            errors += 1
            return None
        return v * 1024

    def cpulist(key: str, max_id: int) -> frozenset[int] | None:
        nonlocal errors
        if key not in f:
            return None
        v = parse_cpulist(f[key], max_id)
        if v is None:
            errors += 1
        return v

    sizes = {attr: kb(key) for key, attr in _KB.items()}
    kthread = f.get("Kthread")
    if kthread not in (None, "0", "1"):
        errors += 1
    return PidStatus(
        name=parse_pid_status_name(data),
        tgid=num("Tgid"),
        uid=num("Uid"),
        threads=num("Threads"),
        vm_rss=sizes["vm_rss"],
        rss_anon=sizes["rss_anon"],
        rss_file=sizes["rss_file"],
        rss_shmem=sizes["rss_shmem"],
        hugetlb=sizes["hugetlb"],
        cpus_allowed=cpulist("Cpus_allowed_list", MAX_CPU_ID),
        mems_allowed=cpulist("Mems_allowed_list", MAX_NODE_ID),
        error_count=errors,
        kthread=None if kthread not in ("0", "1") else kthread == "1",
    )


_MAX_KB_DIGITS = 16  # 10^16 kB is far beyond any machine: longer numbers are malformed


def _kb_field(data: bytes, key: bytes) -> int | None:
    """Return the bytes of a ``key:   N kB`` line of status, None when absent or malformed."""
    i = data.find(key)
    if i < 0 or (i and data[i - 1:i] != b"\n"):
        return None
    j = data.find(b"\n", i)
    parts = data[i + len(key): j if j >= 0 else len(data)].split()
    if len(parts) != 2 or parts[1] != b"kB" or not parts[0].isdigit():
        return None
    if len(parts[0]) > _MAX_KB_DIGITS:
        return None
    return int(parts[0]) * 1024


def parse_pid_status_resident(data: bytes) -> tuple[int | None, int]:
    """Return (VmRSS, HugetlbPages) in bytes for screening; VmRSS None for kernel threads.

    Cheap enough to run on every process each scan: it looks at two lines only. A
    malformed VmRSS reads as None here; the full :func:`parse_pid_status` counts it.
    """
    return _kb_field(data, b"VmRSS:"), _kb_field(data, b"HugetlbPages:") or 0


def parse_pid_status_name(data: bytes) -> str:
    """Return the ``Name:`` of a status file as safe text ("" when absent), exactly as
    :func:`parse_pid_status` gives it, without parsing the rest (for screening by pattern)."""
    if data.startswith(b"Name:"):
        i = 0
    else:
        i = data.find(b"\nName:")
        if i < 0:
            return label_text(b"")
        i += 1
    j = data.find(b"\n", i)
    # the raw bytes: a process may name itself anything
    return label_text(data[i + 5: j if j >= 0 else len(data)].strip(b" \t"))


def parse_pid_status_cpus_allowed(data: bytes) -> frozenset[int] | None:
    """Return the ``Cpus_allowed_list`` of a (thread's) status file, without parsing the
    rest; None when the line is absent or malformed."""
    key = b"\nCpus_allowed_list:"
    i = data.find(key)
    if i < 0:
        return None
    j = data.find(b"\n", i + 1)
    return parse_cpulist(data[i + len(key): j if j >= 0 else len(data)].strip(), MAX_CPU_ID)
