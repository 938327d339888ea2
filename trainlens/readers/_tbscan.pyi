"""Types of the compiled TensorBoard lane (``_tbscan.c``)."""

from typing import Any, Final, NamedTuple

from typing_extensions import Buffer

# the TFRecord format as the C code has it (a test checks them against _tfrecord_format)
CRC32C_POLY: Final[int]
MASK_DELTA: Final[int]
HEADER: Final[int]
OVERHEAD: Final[int]

class Column:
    """One decoded column; exported to Arrow (e.g. ``polars.Series(column)``) once."""

    def __len__(self) -> int: ...
    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[Any, Any]: ...

class ScanResult(NamedTuple):
    """What :func:`scan` decoded (a struct sequence in C: a tuple with field names)."""

    records: int
    file_version: bytes | None
    tags: list[bytes]
    counts: list[int]
    grouped: bool  # rows one block per tag (then code is None), else in file order
    step: Column
    wall: Column
    value: Column
    code: Column | None

def scan(buffer: Buffer, /) -> ScanResult | str:
    """The file's columns, or why this lane leaves the file to the numpy reader."""

def crc32c(buffer: Buffer, soft: bool = False, /) -> int:
    """CRC-32C as the lane computes it (``soft``: the table loop, not the CPU's)."""
