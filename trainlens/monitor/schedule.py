"""The declared LR schedule, read from the scheduler object the run built.

What trainlens' run config (trainlens.runconfig) understands: ``shape`` (constant,
linear, cosine, step, warmup-stable-decay, ...), ``warmup_steps``, ``peak_lr``,
``min_lr``, ``total_steps``, ``step_size``, ``gamma``. Read from torch's own schedulers
(CosineAnnealingLR, StepLR, ConstantLR, a SequentialLR of a LinearLR warmup and one of
those) and from HF's ``get_*_schedule_with_warmup`` (a LambdaLR whose function is a
``functools.partial`` of a named function, so its arguments can be read). Any other
LambdaLR holds a Python function that cannot be read: that is said, not guessed.
"""

from __future__ import annotations

import functools
import re
from typing import Any

#: HF's lr-lambda functions: transformers.optimization._get_<name>_schedule..._lr_lambda
_HF_LAMBDA = re.compile(r"_get_(\w+?)_schedule(?:_with_warmup)?_lr_lambda")
_HF_SHAPES = {
    "cosine": "cosine",
    "linear": "linear",
    "constant": "constant",
    "inverse_sqrt": "inverse-sqrt",
}


def _peak(sched: Any) -> float | None:
    base = getattr(sched, "base_lrs", None)
    return float(base[0]) if base else None


def _hf_lambda(sched: Any) -> dict[str, Any] | None:
    fns = getattr(sched, "lr_lambdas", None) or []
    fn = fns[0] if fns else None
    if not isinstance(fn, functools.partial):
        return None
    m = _HF_LAMBDA.fullmatch(getattr(fn.func, "__name__", ""))
    shape = _HF_SHAPES.get(m.group(1)) if m else None
    if shape is None:
        return None
    kw = fn.keywords
    out: dict[str, Any] = {"shape": shape, "peak_lr": _peak(sched)}
    out["warmup_steps"] = int(kw.get("num_warmup_steps", 0) or 0)
    if "num_training_steps" in kw:
        out["total_steps"] = int(kw["num_training_steps"])
    if shape in ("cosine", "linear"):
        out["min_lr"] = float(kw.get("min_lr_rate", 0.0) or 0.0) * (out["peak_lr"] or 0.0)
    return out


def _single(sched: Any) -> dict[str, Any] | str:
    """The schedule one torch scheduler declares, or a sentence saying why it cannot."""
    name = type(sched).__name__
    peak = _peak(sched)
    if name == "CosineAnnealingLR":
        return {
            "shape": "cosine",
            "peak_lr": peak,
            "min_lr": float(sched.eta_min),
            "total_steps": int(sched.T_max),
        }
    if name == "StepLR":
        return {
            "shape": "step",
            "peak_lr": peak,
            "step_size": int(sched.step_size),
            "gamma": float(sched.gamma),
        }
    if name == "ConstantLR" and float(sched.factor) == 1.0:
        return {"shape": "constant", "peak_lr": peak}
    if name == "LinearLR" and float(sched.start_factor) == 1.0:
        return {
            "shape": "linear",
            "peak_lr": peak,
            "min_lr": (peak or 0.0) * float(sched.end_factor),
            "total_steps": int(sched.total_iters),
        }
    if name == "LambdaLR":
        hf = _hf_lambda(sched)
        if hf is not None:
            return hf
        return "a LambdaLR holds a Python function that cannot be read"
    return f"{name} is not a schedule trainlens reads"


def _sequential(sched: Any) -> dict[str, Any] | str:
    """A SequentialLR of a LinearLR warmup (rising to factor 1) then one known schedule."""
    parts = list(getattr(sched, "_schedulers", []))
    milestones = list(getattr(sched, "_milestones", []))
    if len(parts) != 2 or len(milestones) != 1:
        return "a SequentialLR other than warmup + one schedule"
    warm, main = parts
    if type(warm).__name__ != "LinearLR" or float(warm.end_factor) != 1.0:
        return "a SequentialLR whose first part is not a LinearLR warmup"
    rest = _single(main)
    if isinstance(rest, str):
        return rest
    w = int(milestones[0])
    out = dict(rest, warmup_steps=w)
    if "total_steps" in rest and rest["shape"] in ("cosine", "linear"):
        out["total_steps"] = w + int(rest["total_steps"])
    return out


def declared_schedule(scheduler: Any) -> tuple[dict[str, Any], str | None]:
    """(schedule, note): the schedule a scheduler object declares, with trainlens' keys,
    and a sentence when it cannot be read (then the schedule is empty)."""
    if scheduler is None:
        return {}, None
    sched = getattr(scheduler, "scheduler", scheduler)  # an accelerate/Lightning wrapper
    got = _sequential(sched) if type(sched).__name__ == "SequentialLR" else _single(sched)
    if isinstance(got, str):
        return {}, f"{got}; pass schedule={{...}} to declare it"
    return {k: v for k, v in got.items() if v is not None}, None
