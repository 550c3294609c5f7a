from array import array

Buffer = bytes | array[int] | memoryview

SHMEM_PREFIXES: tuple[bytes, ...]
PSEUDO_PATHS: tuple[bytes, ...]
DELETED: bytes
NEWLINE_ESCAPE: bytes
HUGETLB_ANON_PATH: bytes
DEV_PREFIX: bytes
ANON_SHMEM_PREFIX: bytes
MAX_MOUNTS: int

KNOWN_FIELDS: int

def maps_frame(
    text: Buffer, page_size: int, mounts: tuple[bytes, ...], max_entries: int,
    bases: tuple[int, int, int, int], want_known: bool = False, /
) -> tuple[int, int, list[tuple[bytes, bytes, int] | None], list[int]] | tuple[
    int, int, list[tuple[bytes, bytes, int] | None], list[int], bytes]: ...
def query_frame(
    fd: int, addr: int, max_vmas: int, page_size: int, mounts: tuple[bytes, ...],
    max_entries: int, bases: tuple[int, int, int, int], known: Buffer, pos: int, /
) -> tuple[int, list[tuple[bytes, bytes, int] | None], list[int], int, int, bytes, int, int]: ...
def path_kind(raw: bytes, mounts: tuple[bytes, ...], /) -> int: ...
def draw(
    fractions: array[float], starts: Buffer, cumulative: Buffer, page_size: int, /
) -> bytes: ...
def pages(starts: Buffer, cumulative: Buffer, page_size: int, /) -> bytes: ...
def query(
    nr: int, pid: int, addresses: Buffer, lo: int, hi: int, max_node: int, /
) -> tuple[int, int, int, int, list[tuple[int, int]]]: ...
