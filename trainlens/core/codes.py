"""Finding codes that do not come from a detector: the gate's outcome and baseline checks.

Kept in core so configuration (``[tool.trainlens.severity]``) can be validated the same
way for ``analyze`` and ``gate``; documented in docs/gate.md.
"""

from __future__ import annotations

GATE_CODES: dict[str, str] = {
    "VAL002": "val-loss-regression",
    "VAL003": "time-to-target-regression",
    "VAL004": "val-loss-above-limit",
    "VAL005": "target-not-reached-in-budget",
    "TPUT003": "throughput-regression",
    "MEM002": "memory-regression",
    "MFU001": "mfu-below-limit",
    "DATA005": "restart-not-allowed",
    "CKPT008": "no-intact-checkpoint-at-end",
    "CKPT009": "best-val-checkpoint-missing",
    # golden curves (--reference): trainlens/gate/reference.py
    "REF001": "curve-departs",
    "REF002": "curve-identical",
    "REF003": "curve-not-compared",
}
