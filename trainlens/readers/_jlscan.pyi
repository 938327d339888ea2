from typing import Any

def scan(
    buffer: object, stop: int, step_names: tuple[bytes, ...], every_int: bool = False, /
) -> tuple[list[str], list[Any], list[Any | None], int] | str: ...
