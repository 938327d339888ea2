"""Types of the compiled TensorBoard lane (``_tbscan.c``)."""

from typing import Any

from typing_extensions import Buffer

class Column:
    """One decoded column; exported to Arrow (e.g. ``polars.Series(column)``) once."""

    def __len__(self) -> int: ...
    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[Any, Any]: ...

def scan(
    buffer: Buffer, /
) -> (
    tuple[int, bytes | None, list[bytes], list[int], bool, Column, Column, Column, Column | None]
    | str
): ...
