from array import array
from collections.abc import Callable

Buffer = bytes | array[int] | memoryview

def maps_frame(
    text: bytes, page_size: int, classify: Callable[[bytes], int], max_entries: int,
    bases: tuple[int, int, int, int], /
) -> tuple[int, int, list[tuple[bytes, bytes, int] | None], list[int]]: ...
def draw(
    state: tuple[int, ...], starts: Buffer, cumulative: Buffer, page_size: int, n: int, /
) -> tuple[tuple[int, ...], bytes]: ...
def pages(starts: Buffer, cumulative: Buffer, page_size: int, /) -> bytes: ...
def query(
    nr: int, pid: int, addresses: Buffer, lo: int, hi: int, max_node: int, /
) -> tuple[int, int, int, int, list[tuple[int, int]]]: ...
