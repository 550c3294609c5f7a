from collections.abc import Callable

def scan(
    text: bytes, end: int, lineno: int, check: Callable[[bytes], bool], /
) -> tuple[
    int,
    int,
    int,
    list[tuple[int, int, int]],
    list[tuple[bytes, int, int, int, int]],
    list[bytes],
]: ...
