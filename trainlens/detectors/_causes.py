"""Root cause across signals: what moved before the loss (a shared step, not a detector).

The detectors each judge one signal. A loss event (LOSS001, GRAD001, LOSS003, NAN001 on
``train/loss``) is explained by what moved *before* it: the learning rate (against its
declared plan, or its own history), the loss scale, the grad norm, the update ratio.
:func:`attach_causes` runs once over the findings the detectors produced, finds the onset
of each of those signals in a look-back window before the loss onset, orders them by step
and attaches ``evidence.chain`` (``[{"metric", "step", "what"}, …]``, the loss last),
``evidence.first_mover`` (a metric, or None) and ``evidence.first_mover_step``, and puts
the chain and the advice that fits the first mover in the message. "A bad batch or data"
is said only when no optimizer-side signal moved first.

Onset: the first departure of a metric from its own tail, not the step where a large
threshold is crossed. The tail of a point is its level — the median of the 10 logged
points before it (a 50-point median lags a trend by half its window) — and its noise —
the MAD of the successive differences of the ``window`` = 50 points before it, / sqrt 2,
as a sigma (a trend, e.g. a grad norm falling fast early on, does not inflate it) — in
log space for the grad norm, the update ratio, the LR's step changes and the loss. An
excursion starts at the first point beyond max(``band_k`` = 3 sigma, x``band_ratio`` =
1.5) of its tail and lasts while the points stay beyond that band of the tail frozen at
its start; it is a real departure only when a point of it reaches max(``confirm_k`` = 6
sigma, x``confirm_ratio`` = 3) — grad_spikes' spike rule (6 robust sigmas AND 3x,
Lightning's SpikeDetection ratio) — so noise never becomes a mover; its onset is the
excursion's start, where it left the band. A move must also last until the pairing lag
before the loss (10 steps or 3 intervals, grad_spikes' lag_window): one that was over
before then is another event.

- LR with a declared schedule: the departure from the planned value (the step either side
  of the plan is allowed, for schedulers stepped before or after the LR is read): beyond
  x1.1 of the plan, confirmed at x1.5. A warmup ramp or a step decay that follows the
  declaration is not a mover; an undeclared one is.
- LR without a declaration: a jump of its log step change beyond 6 sigmas of the previous
  changes and at least x1.5 in one logged interval (linear warmup, cosine and linear decay
  change by a few percent per interval, smoothly). For a sustained loss rise, an LR still
  climbing to its highest yet (x2 or more since its last low) is named too: a warmup
  whose peak the run cannot take.
- Loss scale: any drop (fp16 dynamic scaling halves it on an overflow; its growth every N
  steps is not a departure). Where drops are routine, one in the window counts only when
  the run's own rate of drops makes it unlikely (Poisson, ``scale_alpha`` = 1 %).
- A grad norm or update ratio turning non-finite strictly before the loss (not in fp16
  runs, whose overflow steps are skipped on purpose).

Look-back: max(``lookback_steps`` = 50, ``lookback_points`` = 10 loss intervals) before
the loss onset (for LOSS003, a slow rise seen late, at least ``slow_lookback_frac`` = 5 %
of the run, the stretch LOSS003 itself needs); a mover's onset must lie in it (a
departure under way since before it is not "moving before the loss"). At one step the
order is lr, loss scale, grad norm, update ratio (the LR is set before the step; the
update follows the gradient).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.detectors._causes_catalogue import (
    ADVICE,
    AFTER_LOSS_NOTE,
    CANDIDATES,
    DATA_ADVICE,
    GRAD,
    GRAD_ADVICE,
    LABEL,
    LOSS,
    LR,
    SCALE,
    CauseParams,
    Move,
)
from trainlens.detectors._causes_onset import tail_departure
from trainlens.detectors._causes_signals import (
    _log_signal,
    _lr_move,
    _lr_ramp,
    _nonfinite,
    _scale_drop,
    _Scope,
    _Signals,
)
from trainlens.detectors.base import Context

__all__ = [
    "AFTER_LOSS_NOTE",
    "DATA_ADVICE",
    "GRAD_ADVICE",
    "CauseParams",
    "Move",
    "attach_causes",
    "chain_for",
    "chain_text",
]


# ---- the loss event -------------------------------------------------------------------------


_EVENT_CODES = ("LOSS001", "GRAD001", "LOSS003", "NAN001")


def _loss_onset(f: Finding, sig: _Signals) -> int | None:
    if f.code == "GRAD001":
        return _int(f.evidence.get("lag_step"), f.step_start)
    if f.code in ("LOSS001", "NAN001"):
        return f.step_start
    # LOSS003 is judged on a smoothed curve, whose start can be off by half its window:
    # the onset is the first departure of the raw loss from its tail near there
    if f.step_start is None or LOSS not in sig.raw:
        return f.step_start
    p = sig.p
    s, _, logv = sig.positive(LOSS)
    span = max(p.lookback_steps, p.lookback_points * sig.loss_interval)
    a = int(np.searchsorted(s, f.step_start - span, side="left"))
    b = int(np.searchsorted(s, f.step_start + span, side="right"))
    d = tail_departure(
        logv,
        a,
        b,
        window=p.window,
        min_baseline=p.min_baseline,
        band_k=p.band_k,
        band_min=math.log1p(p.loss_band_rel),
        confirm_k=p.confirm_k,
        confirm_min=math.log1p(p.loss_confirm_rel),
        sigma_floor=p.loss_sigma_floor,
    )
    return int(s[d.onset]) if d is not None else f.step_start


def _int(value: Any, default: int | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _scope(f: Finding, sig: _Signals) -> _Scope | None:
    if f.code not in _EVENT_CODES or (f.code == "NAN001" and f.metric != LOSS):
        return None
    step = _loss_onset(f, sig)
    if step is None:
        return None
    p = sig.p
    interval = sig.loss_interval
    look = max(p.lookback_steps, p.lookback_points * interval)
    if f.code == "LOSS003" and LOSS in sig.raw:
        # a slow rise is seen late (LOSS003 needs 5 % of the run above the minimum): what
        # set it off may lie that far before its onset
        s = sig.raw[LOSS][0]
        look = max(look, math.ceil(p.slow_lookback_frac * float(s[-1] - s[0])))
    # the pairing window of grad_spikes (lag_window 10 steps or 3 intervals): a move over
    # longer than that before the loss onset did not lead it
    lag = max(10, 3 * interval)
    span = 0
    if LOSS in sig.raw and sig.raw[LOSS][0].size:
        s = sig.raw[LOSS][0]
        span = int(s[-1] - s[0])
    return _Scope(step, step - look, step + lag, step - lag, _sustained(f, interval, span, p))


def _sustained(f: Finding, interval: int, span: int, p: CauseParams) -> bool:
    """A rise that stays (LOSS003, or a loss event back only after sustain_points logged
    points — or after the stretch LOSS003 itself needs, 5 % of the run and 5 points, when
    that is shorter — or never): only then may a climbing LR be its cause. A spike the
    loss comes back from within a few dozen points is a spike (a bad batch in warmup stays
    one). In a 60-point log a loss up for 28 points (700 of 1,475 steps: a Whisper
    fine-tune while its LR warmed up) is no spike."""
    if f.code == "LOSS003":
        return True
    if f.code not in ("LOSS001", "GRAD001") or f.severity.rank < 1:
        return False
    start = _int(f.evidence.get("lag_step"), f.step_start)
    back = _int(f.evidence.get("recovered_step"), None)
    if back is None or start is None:
        return True
    need = p.sustain_points * interval
    if span > 0:
        need = min(need, max(math.ceil(p.slow_lookback_frac * span), 5 * interval))
    return back - start >= need


def chain_for(f: Finding, run: Run, ctx: Context, p: CauseParams | None = None) -> list[Move]:
    """What moved before the loss event of finding ``f`` (empty when ``f`` is no loss
    event), in order, the loss last. A planned LR ramp is returned marked ``planned``."""
    sig = _Signals(run, ctx, p or CauseParams())
    sc = _scope(f, sig)
    return [] if sc is None else _moves(sig, sc)


def _moves(sig: _Signals, sc: _Scope) -> list[Move]:
    found: list[Move] = []
    for m in sig.logged():
        mv: Move | None
        if m == LR:
            mv = _lr_move(sig, sc)
            if mv is None and sig.schedule is not None and sc.sustained:
                s, v, _ = sig.positive(LR)
                mv = _lr_ramp(s, v, sig.p, sc, planned=True)
        elif m == SCALE:
            mv = _scale_drop(sig, sc)
        else:
            mv = _nonfinite(sig, m, sc) or _log_signal(sig, m, sc)
        if mv is not None:
            found.append(mv)
    found.sort(key=lambda mv: (mv.step, CANDIDATES.index(mv.metric)))
    return [*found, Move(LOSS, sc.loss_step, f"left its tail at step {sc.loss_step}")]


# ---- the findings ---------------------------------------------------------------------------


def chain_text(chain: list[Move]) -> str:
    """'lr rose x40 at step 400 (…) → grad norm left its tail at step 400 (…) → loss at
    step 401'."""
    parts = [f"{LABEL[mv.metric]} {mv.what}" for mv in chain[:-1]]
    return " → ".join([*parts, f"loss at step {chain[-1].step}"])


def attach_causes(
    run: Run, ctx: Context, findings: list[Finding], p: CauseParams | None = None
) -> list[Finding]:
    """The findings, each loss event with its chain, first mover and fitting advice."""
    if not any(f.code in _EVENT_CODES for f in findings):
        return findings
    sig = _Signals(run, ctx, p or CauseParams())
    if not sig.logged():
        return findings  # nothing optimizer-side to check: the detectors' words stand
    out = []
    for f in findings:
        sc = _scope(f, sig)
        out.append(f if sc is None else _explained(f, _with_lead(f, _moves(sig, sc)), sig.logged()))
    return out


def _with_lead(f: Finding, chain: list[Move]) -> list[Move]:
    """A GRAD001 finding is itself a grad norm that led the loss: when the tails here did
    not see it (a shorter baseline, a different noise estimate), its own lead stands in,
    so the finding never says that nothing optimizer-side moved."""
    lead = _int(f.evidence.get("lead_step"), None)
    if f.code != "GRAD001" or lead is None or any(mv.metric == GRAD for mv in chain):
        return chain
    ratio, base = f.evidence.get("grad_ratio_at_lead"), f.evidence.get("grad_baseline")
    what = f"spiked at step {lead}"
    if isinstance(ratio, (int, float)) and isinstance(base, (int, float)):
        what += f" (×{ratio:.3g} its rolling median {base:.3g})"
    movers = sorted(
        [*chain[:-1], Move(GRAD, lead, what)],
        key=lambda mv: (mv.step, CANDIDATES.index(mv.metric)),
    )
    return [*movers, chain[-1]]


def _explained(f: Finding, chain: list[Move], logged: list[str]) -> Finding:
    movers = [mv for mv in chain[:-1] if not mv.planned]
    first = movers[0] if movers else None
    loss_step = chain[-1].step
    ev = {
        **f.evidence,
        "chain": [mv.as_dict() for mv in [*movers, chain[-1]]],
        "first_mover": first.metric if first else None,
        "first_mover_step": first.step if first else None,
    }
    ramp = next((mv for mv in chain if mv.planned), None)
    if ramp is not None:
        ev["planned_lr_ramp"] = ramp.as_dict()
    msg = f.message
    if f.code in ("LOSS001", "GRAD001"):
        for clause in (DATA_ADVICE, GRAD_ADVICE):
            msg = msg.replace("; " + clause, "")
        if first is not None:
            msg = msg.replace(AFTER_LOSS_NOTE, "")
    if first is not None:
        text = chain_text([*movers, chain[-1]])
        advice = first.advice or ADVICE[first.metric]
        if first.metric == GRAD and first.step == loss_step and len(movers) == 1:
            advice = (
                "both left their tails at the same step: a bad batch or a step too large — "
                "look at that batch, and at clipping and the LR"
            )
        tail = f"what moved first: {text}; {advice}"
    elif ramp is not None:
        tail = f"nothing departed from its plan, but the lr was {ramp.what}"
        if not f.evidence.get("in_warmup"):  # LOSS003 inside the warmup already advises it
            tail += (
                ": the planned peak may be too high for this run — lower it or lengthen the warmup"
            )
    elif f.severity.rank >= 1:
        names = ", ".join(LABEL[m] for m in logged)
        where = {
            "LOSS003": "look at the data from that step (a change of mix or a corrupt shard)",
            "NAN001": "a bad batch or data, or an overflow in the forward pass",
        }.get(f.code, DATA_ADVICE)
        tail = (
            f"nothing optimizer-side ({names}) moved before the loss at step {loss_step}: {where}"
        )
    else:
        return Finding(f.code, f.name, f.severity, f.metric, f.step_start, f.step_end, msg, ev)
    msg = msg.rstrip().rstrip(".") + "; " + tail + "."
    return Finding(f.code, f.name, f.severity, f.metric, f.step_start, f.step_end, msg, ev)
