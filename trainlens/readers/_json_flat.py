"""One JSON object as a flat row, the way the JSONL reader's line-by-line path reads a
line that polars refused: nested objects flattened with '/', a step kept as its text (read
exactly later), integers beyond 64 bits as floats, other values as text."""

from __future__ import annotations

import json
import math

from trainlens.readers._wide import STEP_KEYS

_STEP_KEYS_LOWER = frozenset(k.lower() for k in STEP_KEYS)


def _big_int(v: int) -> float:
    try:
        return float(v)
    except OverflowError:  # beyond a float too
        return math.inf if v > 0 else -math.inf


def _escaped(text: str) -> str:
    """``text`` itself, or with its lone surrogates (JSON's ``"\\ud800"``, which no UTF-8
    holds and polars refuses) as the escape text ``\\ud800``: two keys that differ only
    there stay two metrics."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def flat_object(obj: dict[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in obj.items():
        key = _escaped(f"{prefix}{k}")
        if isinstance(v, dict):
            out.update(flat_object(v, key + "/"))
        elif key.lower() in _STEP_KEYS_LOWER and not isinstance(v, (str, type(None))):
            # a step as its text, parsed exactly later (polars would make true 1 beside
            # integers, and an integer beyond 64 bits a float)
            out[key] = json.dumps(v)
        elif isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
            out[key] = _big_int(v)  # polars builds no column from a 128-bit integer
        elif isinstance(v, (int, float)) or v is None:
            out[key] = v
        else:
            out[key] = _escaped(str(v))
    return out
