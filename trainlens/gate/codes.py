"""The finding codes the gate's own checks emit (documented in docs/gate.md).

Detector codes live with their detectors; these come from outcome checks (limits a run
must meet) and baseline checks (a regression against a reference run).
"""

from __future__ import annotations

from trainlens.core.codes import GATE_CODES  # noqa: F401  (re-exported)

DEFAULT_SEVERITY = "error"

# the code each outcome / baseline check raises when it fails
CHECK_CODES: dict[str, str] = {
    "check:max_final_val_loss": "VAL004",
    "check:max_best_val_loss": "VAL004",
    "check:target_val_loss": "VAL005",
    "check:max_steps_to_target": "VAL005",
    "check:max_tokens_to_target": "VAL005",
    "check:max_seconds_to_target": "VAL005",
    "check:min_mfu": "MFU001",
    "check:no_restarts": "DATA005",
    "check:checkpoint_at_end": "CKPT008",
    "check:best_val_checkpoint": "CKPT009",
    "baseline:throughput": "TPUT003",
    "baseline:val_loss": "VAL002",
    "baseline:time_to_target": "VAL003",
    "baseline:memory": "MEM002",
}
