"""Numbers as people type them: 1.3e9, 1.3B, 40k, 7_000."""

from __future__ import annotations

import math

from trainlens.core.errors import UsageError

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_number(text: str | float | int, what: str) -> float:
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = text.strip().replace("_", "").replace(",", "")
        mult = 1.0
        if s and s[-1].lower() in _SUFFIX:
            mult = _SUFFIX[s[-1].lower()]
            s = s[:-1]
        try:
            value = float(s) * mult
        except ValueError:
            raise UsageError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{what}: {text!r} is not a finite number")
    return value


def parse_positive(text: str | float | int, what: str) -> float:
    value = parse_number(text, what)
    if value <= 0:
        raise UsageError(f"{what} must be greater than zero, got {text!r}")
    return value
