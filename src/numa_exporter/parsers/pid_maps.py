"""Parser for ``/proc/<pid>/maps`` (``show_map_vma`` in fs/proc/task_mmu.c).

One line per mapping (VMA)::

    7f2c1a000000-7f2c2a000000 rw-p 00000000 00:00 0
    55d0c2a4e000-55d0c2a6f000 rw-p 00000000 00:00 0                          [heap]
    7f2c2a1f2000-7f2c2a214000 r-xp 00028000 fd:01 1315373                    /usr/lib/x.so
    7f2c00000000-7f2c04000000 rw-s 00000000 00:01 4097                       /dev/zero (deleted)

Reading maps does not walk page tables (unlike numa_maps and smaps): the kernel prints the
VMA list only. The path is printed by ``seq_file_path(m, file, "\\n")``: only a newline is
escaped (as ``\\012``); spaces and backslashes appear raw, and an unlinked file ends in
`` (deleted)``. A file really named ``x (deleted)`` is therefore indistinguishable from an
unlinked ``x``; kinds only depend on path prefixes, so that does not matter here.

Every byte comes from the watched process (it names its files and anonymous mappings), so
:func:`parse_pid_maps` is total: malformed lines are counted, never raised, and at most
:data:`MAX_ENTRIES` mappings are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from numa_exporter.parsers.numa_maps import Kind, classify

#: Mappings kept per file: four times the kernel's default vm.max_map_count (65530).
MAX_ENTRIES = 1 << 18
MAX_KEPT_ERRORS = 5
_DELETED = " (deleted)"
#: How ``seq_file_path`` prints a newline in a path (octal escape).
NEWLINE_ESCAPE = b"\\012"
#: Paths of anonymous shared memory named with PR_SET_VMA_ANON_NAME (shmem, not anon).
ANON_SHMEM_PREFIX = "[anon_shmem:"
_LINE_RE = re.compile(
    rb"([0-9a-f]{1,16})-([0-9a-f]{1,16}) ([r-][w-][x-][ps]) ([0-9a-f]{1,16}) "
    rb"([0-9a-f]{1,8}):([0-9a-f]{1,8}) ([0-9]{1,20})(?: +(.*))?"
)
#: Paths of hugetlbfs-backed mappings the kernel creates itself (MAP_HUGETLB).
HUGETLB_ANON_PATH = "/anon_hugepage"
#: Where hugetlbfs is usually mounted (systemd's dev-hugepages.mount).
DEFAULT_HUGETLBFS_MOUNTS: tuple[str, ...] = ("/dev/hugepages",)
#: Pseudo mappings of the kernel that hold no pages numa_maps would count.
PSEUDO_PATHS = frozenset({"[vvar]", "[vvar_vclock]", "[vdso]", "[vsyscall]", "[uprobes]"})


@dataclass(frozen=True, slots=True)
class MapsEntry:
    """One mapping: [start, end) virtual addresses, permissions ``rwxp``/``rwxs``, file
    offset, device, inode and path (None: anonymous; ``[heap]``, ``[stack]``, ``[anon:x]``
    are kept as printed; `` (deleted)`` removed and reported in ``deleted``)."""

    start: int
    end: int
    perms: str
    offset: int
    dev_major: int
    dev_minor: int
    inode: int
    path: str | None
    deleted: bool = False

    @property
    def size(self) -> int:
        """Return the virtual size of the mapping in bytes."""
        return self.end - self.start

    @property
    def shared(self) -> bool:
        """Return True for a MAP_SHARED mapping (``s`` in the permissions)."""
        return self.perms[3] == "s"

    @property
    def accessible(self) -> bool:
        """Return False for a PROT_NONE mapping (``---``: guard pages, reservations)."""
        return self.perms[:3] != "---"


@dataclass(frozen=True, slots=True)
class ParseError:
    """A line the parser could not read: 1-based line number, reason, start of the line."""

    lineno: int
    reason: str
    text: str


@dataclass(frozen=True, slots=True)
class PidMaps:
    """The mappings of one maps file, in address order as the kernel prints them.

    ``truncated`` is True when more than :data:`MAX_ENTRIES` well-formed lines were given
    (the rest are dropped, not counted as errors).
    """

    entries: tuple[MapsEntry, ...] = ()
    errors: tuple[ParseError, ...] = ()
    error_count: int = 0
    truncated: bool = False


def _path(raw: bytes | None) -> tuple[str | None, bool]:
    """Return (path, deleted) of the raw path column; None for an anonymous mapping."""
    if raw is None:
        return None, False
    text = raw.replace(NEWLINE_ESCAPE, b"\n").decode("utf-8", "surrogateescape").rstrip(" ")
    if not text:
        return None, False
    deleted = text.endswith(_DELETED) and len(text) > len(_DELETED)
    if deleted:
        text = text[: -len(_DELETED)]
    return text, deleted


def parse_maps_line(line: bytes) -> MapsEntry | None:
    """Return the mapping of one maps line, or None when the line is malformed."""
    m = _LINE_RE.fullmatch(line.rstrip(b"\n"))
    if m is None:
        return None
    start, end = int(m.group(1), 16), int(m.group(2), 16)
    if end <= start:
        return None
    path, deleted = _path(m.group(8))
    return MapsEntry(
        start=start,
        end=end,
        perms=m.group(3).decode("ascii"),
        offset=int(m.group(4), 16),
        dev_major=int(m.group(5), 16),
        dev_minor=int(m.group(6), 16),
        inode=int(m.group(7)),
        path=path,
        deleted=deleted,
    )


_RANGE_RE = re.compile(rb"([0-9a-f]{1,16})-([0-9a-f]{1,16}) ")


def parse_maps_range(line: bytes) -> tuple[int, int] | None:
    """Return the [start, end) addresses of one maps line (the first column only: cheaper
    than :func:`parse_maps_line` where only sizes matter), or None when it is malformed."""
    m = _RANGE_RE.match(line)
    if m is None:
        return None
    start, end = int(m.group(1), 16), int(m.group(2), 16)
    return (start, end) if end > start else None


def parse_pid_maps(lines: Iterable[bytes]) -> PidMaps:
    """Return the mappings of a maps text given line by line; malformed lines are counted."""
    entries: list[MapsEntry] = []
    errors: list[ParseError] = []
    n_err = 0
    truncated = False
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        entry = parse_maps_line(raw)
        if entry is None:
            n_err += 1
            if len(errors) < MAX_KEPT_ERRORS:
                errors.append(ParseError(lineno, "malformed maps line",
                                         raw[:80].decode("ascii", "backslashreplace")))
            continue
        if len(entries) >= MAX_ENTRIES:
            truncated = True
            continue
        entries.append(entry)
    return PidMaps(tuple(entries), tuple(errors), n_err, truncated)


def mapping_kind(entry: MapsEntry,
                 hugetlbfs_mounts: tuple[str, ...] = DEFAULT_HUGETLBFS_MOUNTS) -> Kind:
    """Return the numa_maps kind (see :func:`numa_maps.classify`) of a maps entry.

    numa_maps knows hugetlb from the VMA flags; maps does not show them, so hugetlb is
    recognised by path only: ``/anon_hugepage`` (MAP_HUGETLB) and files under
    ``hugetlbfs_mounts``. SysV segments made with SHM_HUGETLB and memfds made with
    MFD_HUGETLB look like ordinary shmem here (``/SYSV…``, ``/memfd:…``): approximate.
    """
    path = entry.path
    huge = path is not None and (
        path == HUGETLB_ANON_PATH
        or any(path.startswith(m.rstrip("/") + "/") for m in hugetlbfs_mounts if m)
    )
    if path is not None and path.startswith("["):
        # [heap], [stack], [anon:name] are anonymous; [anon_shmem:name] is shared memory.
        return Kind.SHMEM if path.startswith(ANON_SHMEM_PREFIX) else Kind.ANON
    return classify(path, huge)
