"""Report options, checked in one place: ``[tool.trainlens.report]`` and the smoothing weight.

The command line (``trainlens report``, ``analyze --report``) and the library's
:func:`trainlens.report.write_report` call these, so a bad smoothing value is the same
sentence from Python as from the shell. Nothing here imports matplotlib.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

from trainlens.core.errors import ConfigError, UsageError

REPORT_KEYS = {"smoothing": "α of a debiased EMA drawn over the raw values (0 < α ≤ 1)"}


def check_smoothing(value: float | None, where: str = "smoothing") -> float | None:
    """``value`` as the EMA weight α, or None (raw values only); out of (0, 1] is a
    UsageError that names ``where`` it came from."""
    if value is None:
        return None
    # numbers.Real: a numpy float from a caller's own computation is a number too
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UsageError(f"{where} must be a number in (0, 1], not {value!r}")
    if not 0 < value <= 1:
        raise UsageError(
            f"{where} must be in (0, 1] (the weight of the newest value in the "
            f"EMA; 0.05 ≈ TensorBoard's 0.95 slider), not {value:g}"
        )
    return float(value)


def report_smoothing(flag: float | None, table: dict[str, Any], origin: str) -> float | None:
    """--smooth, else [tool.trainlens.report] smoothing, else raw only; ``table`` is the
    config's report table (unknown keys are a ConfigError), ``origin`` the config's path."""
    for key in table:
        if key not in REPORT_KEYS:
            raise ConfigError(
                f"{origin}: unknown key {key!r} in [tool.trainlens.report]; "
                f"known: {', '.join(REPORT_KEYS)}"
            )
    if flag is not None:
        return check_smoothing(flag, "--smooth")
    raw = table.get("smoothing")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(f"{origin}: report.smoothing must be a number in (0, 1]")
    return check_smoothing(float(raw), f"{origin}: report.smoothing")
