from typing import Any

def scan(
    buffer: object,
    threads: int = 1,
) -> (
    tuple[
        list[str],
        list[Any],
        list[tuple[int, int] | Any],
        Any,
        Any,
        Any,
        list[tuple[int, bytes]],
    ]
    | str
): ...
def parse_double(text: bytes) -> float | None: ...
def crc32(data: bytes, crc: int = 0) -> int: ...
