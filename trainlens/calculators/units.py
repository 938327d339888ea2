"""Numbers as people type them: ``1.3e9``, ``1.3B``, ``40k``, ``2_000``; durations like ``36h``.

Every parser raises :class:`~trainlens.core.errors.UsageError` with one sentence that names
the option and repeats what was given, so the CLI can print it and exit 2.
"""

from __future__ import annotations

import math
import re

from trainlens.core.errors import UsageError

# Counts: k, M (million), B/G (billion), T (trillion), P (peta). Case-insensitive because
# "124m" and "1.3b" are how model sizes are written in practice.
_MULTIPLIERS = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_NUMBER = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([kKmMbBgGtTpP]?)$")

_DURATION_UNITS = {
    "s": 1 / 3600,
    "sec": 1 / 3600,
    "min": 1 / 60,
    "m": 1 / 60,
    "h": 1.0,
    "hr": 1.0,
    "hours": 1.0,
    "d": 24.0,
    "days": 24.0,
}
_DURATION = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)$")


def _check(value: float, what: str, shown: str, *, allow_zero: bool) -> float:
    if math.isnan(value) or math.isinf(value):
        raise UsageError(f"{what} must be a finite number; got {shown!r}.")
    if value < 0:
        raise UsageError(f"{what} must be positive; got {shown!r}.")
    if value == 0 and not allow_zero:
        raise UsageError(f"{what} must be greater than zero; got {shown!r}.")
    return value


def parse_number(
    text: str | float | int,
    what: str,
    *,
    allow_zero: bool = False,
    integer: bool = False,
) -> float:
    """Parse a positive number written as ``1.3e9``, ``1.3B``, ``40k``, ``2_000`` or ``2,000``.

    ``what`` names the quantity in the message (usually the CLI option, e.g. ``--params``).
    Zero is refused unless ``allow_zero``; NaN, infinities and negatives always are.
    """
    if isinstance(text, bool):
        raise UsageError(f"{what} must be a number; got {text!r}.")
    if isinstance(text, int | float):
        value = float(text)
        shown = repr(text)
    else:
        shown = str(text)
        cleaned = shown.strip().replace("_", "").replace(",", "")
        lowered = cleaned.lower()
        if lowered in {"nan", "+nan", "-nan"}:
            raise UsageError(f"{what} must be a finite number; got {shown!r}.")
        if lowered.lstrip("+-") in {"inf", "infinity"}:
            raise UsageError(f"{what} must be a finite number; got {shown!r}.")
        match = _NUMBER.match(cleaned)
        if match is None:
            raise UsageError(f"{what} must be a number such as 1.3e9, 1.3B or 40k; got {shown!r}.")
        value = float(match.group(1)) * _MULTIPLIERS.get(match.group(2).lower(), 1.0)
    value = _check(value, what, shown, allow_zero=allow_zero)
    if integer and value != round(value):
        raise UsageError(f"{what} must be a whole number; got {shown!r}.")
    return value


def parse_int(text: str | int, what: str, *, allow_zero: bool = False) -> int:
    """A positive whole number (``8``, ``1k``); see :func:`parse_number`."""
    return int(parse_number(text, what, allow_zero=allow_zero, integer=True))


def parse_fraction(text: str | float, what: str) -> float:
    """A utilization given as ``0.4`` or ``40%``; must be in (0, 1]."""
    shown = str(text).strip()
    percent = shown.endswith("%")
    value = parse_number(shown.rstrip("%").strip() if percent else text, what)
    if percent or value > 1.0:
        # "40" almost always means 40 %, never 4000 %
        value /= 100.0
    if value > 1.0:
        raise UsageError(f"{what} must be at most 100 %; got {shown!r}.")
    return value


def parse_duration_hours(text: str | float, what: str) -> float:
    """A duration in hours: ``36``, ``36h``, ``2.5d``, ``90min``, ``5400s``."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return parse_number(text, what)
    shown = str(text)
    match = _DURATION.match(shown.strip().replace("_", ""))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in {*_DURATION_UNITS, ""}:
        raise UsageError(
            f"{what} must be a duration such as 36 (hours), 36h, 2.5d, 90min or 5400s; "
            f"got {shown!r}."
        )
    value = parse_number(match.group(1), what) if unit else parse_number(shown, what)
    return value * _DURATION_UNITS.get(unit, 1.0)


def require_positive(value: float, what: str, *, allow_zero: bool = False) -> float:
    """Library-side check for numbers passed in directly (not parsed from text)."""
    return parse_number(value, what, allow_zero=allow_zero)


def format_number(value: float, digits: int = 4) -> str:
    """``1.3e9`` rather than ``1.3e+09``; plain digits below 100,000."""
    if value != value:  # NaN
        return "nan"
    if abs(value) >= 1e5 or (value != 0 and abs(value) < 1e-3):
        mantissa, _, exponent = f"{value:.{digits}g}".partition("e")
        if not exponent:
            return mantissa
        return f"{mantissa}e{int(exponent)}"
    if abs(value) >= 1000:
        return f"{value:,.0f}" if value == round(value) else f"{value:,.1f}"
    return f"{value:.{digits}g}"
