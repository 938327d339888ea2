"""The cause step's catalogue: the signals it reads, their labels, the advice that fits
each first mover, its thresholds (:class:`CauseParams`) and a move (:class:`Move`); see
:mod:`trainlens.detectors._causes` for the rules. Not a detector."""

from __future__ import annotations

from typing import Any

from trainlens.core.dataclass import dataclass

LR, SCALE, GRAD, UPDATE, LOSS = "lr", "loss_scale", "grad_norm", "update_ratio", "train/loss"
#: the optimizer-side signals, in their order at one step
CANDIDATES = (LR, SCALE, GRAD, UPDATE)
LABEL = {LR: "lr", SCALE: "loss scale", GRAD: "grad norm", UPDATE: "update ratio", LOSS: "loss"}


#: the default advice clauses of grad_spikes' loss events, replaced by the advice
#: that fits what moved first by _causes (one place: grad_spikes builds its messages from these)
DATA_ADVICE = "look at the batches at that step (corrupt or out-of-domain data)"
GRAD_ADVICE = "if it recurs, lower the LR or tighten gradient clipping"
AFTER_LOSS_NOTE = " (a bad batch or data, not an optimizer blow-up)"


ADVICE = {
    LR: "check the scheduler and the LR the optimizer actually used at that step",
    SCALE: (
        "an fp16 overflow: look for inf/NaN gradients at that step, keep the loss scale from "
        "growing so fast, or train in bf16"
    ),
    GRAD: "tighten gradient clipping or lower the LR",
    UPDATE: (
        "the update grew before the gradient did: check the optimizer state (e.g. Adam's "
        "moments after a reset or resume) and the LR"
    ),
}


@dataclass(frozen=True)
class CauseParams:
    lookback_steps: int = 50
    lookback_points: int = 10
    #: a slow rise (LOSS003) looks back this share of the run at least
    slow_lookback_frac: float = 0.05
    #: the tail: median and MAD of this many logged points before a point
    window: int = 50
    min_baseline: int = 2
    #: an excursion leaves the band; it is real when it reaches the confirmation
    band_k: float = 3.0
    band_ratio: float = 1.5
    confirm_k: float = 6.0
    confirm_ratio: float = 3.0
    sigma_floor: float = 0.05
    #: the loss itself (its onset): relative bounds as grad_spikes' loss spikes
    loss_band_rel: float = 0.02
    loss_confirm_rel: float = 0.05
    loss_sigma_floor: float = 0.005
    #: LR against its declared plan
    plan_band: float = 1.1
    plan_confirm: float = 1.5
    #: LR against its own history: a jump in one logged interval
    lr_jump: float = 1.5
    lr_sigma_floor: float = 0.01
    #: LR still climbing before a sustained rise: this factor since its last low
    ramp_factor: float = 2.0
    #: ... when the loss stays up this many logged points or more (or LOSS003)
    sustain_points: int = 50
    #: routine loss-scale drops: one in the window counts below this chance probability
    scale_alpha: float = 0.01


@dataclass(frozen=True)
class Move:
    metric: str
    step: int
    what: str
    planned: bool = False
    #: the advice when this move is the first, if not the metric's usual one
    advice: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "step": self.step, "what": self.what}
