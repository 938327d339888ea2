def scan(
    buffer: object,
) -> (
    tuple[list[str], list[int], bytes, bytes, bytes, bytes, bytes, bytes, list[tuple[int, bytes]]]
    | str
): ...
