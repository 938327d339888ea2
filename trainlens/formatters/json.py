"""``trainlens analyze --json``: one object, keys documented in docs/json.md."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis

#: 2: each run gains `incidents`, each finding the id of its `incident` (docs/json.md)
SCHEMA_VERSION = 2


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON can carry it: string keys, lists for tuples, and null for
    a non-finite float (analyze's and the gate's JSON alike)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def render(analyses: Sequence[Analysis]) -> str:
    doc = {"version": SCHEMA_VERSION, "runs": [a.to_dict() for a in analyses]}
    return json.dumps(json_safe(doc), indent=2, allow_nan=False) + "\n"
