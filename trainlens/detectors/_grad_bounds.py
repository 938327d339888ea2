"""grad_spikes' absolute bounds, GRAD003 / GRAD004: the grad norm below ``vanish_below``
or above ``explode_above`` for a sustained stretch, where it left its own tail before
crossing, and whether the loss still fell meanwhile (a helper of the ``grad_spikes``
detector, not a detector)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.stats import MAD_TO_SIGMA, centered_rolling_median, runs_of
from trainlens.detectors._grad_common import GRAD, SpikeParams
from trainlens.detectors.base import finding


@dataclass(frozen=True)
class _Side:
    """One absolute bound: GRAD003 below ``vanish_below``, GRAD004 above ``explode_above``;
    ``relaxed`` is the bound loosened by the hysteresis factor (where a stretch ends)."""

    code: str
    bound: float
    relaxed: float
    up: bool

    def beyond(self, x: np.ndarray, level: float) -> np.ndarray:
        return x > level if self.up else x < level


class _Stretch(NamedTuple):
    """Indices of a stretch beyond a bound: where it began (past the relaxed bound), where
    it crossed the bound itself, its last point; and how many points lay beyond."""

    a0: int
    a: int
    b: int
    hits: int


def _bounds(
    st: np.ndarray,
    gv: np.ndarray,
    loss: tuple[np.ndarray, np.ndarray] | None,
    w_end: int,
    p: SpikeParams,
    codes: Mapping[str, str],
) -> list[Finding]:
    """GRAD003 / GRAD004: the grad norm outside [vanish_below, explode_above] for long."""
    out: list[Finding] = []
    h = p.bound_hysteresis
    if st.size < 5:
        return out
    if not ((gv < p.vanish_below * h).any() or (gv > p.explode_above / h).any()):
        return out  # no median of values inside the loose bounds lies outside them
    sm = centered_rolling_median(gv, 5)
    span = max(int(st[-1] - st[0]), 1)
    for side in (
        _Side("GRAD003", p.vanish_below, p.vanish_below * h, up=False),
        _Side("GRAD004", p.explode_above, p.explode_above / h, up=True),
    ):
        core = side.beyond(sm, side.bound)
        # a stretch starts where the norm crosses the bound and lasts until it is back
        # past the relaxed bound (hysteresis), so dips around the bound do not split it
        inside = np.cumsum(core)
        for a0, b in runs_of(side.beyond(sm, side.relaxed)):
            hits = int(inside[b] - (inside[a0 - 1] if a0 else 0))
            if hits == 0:
                continue
            a = a0 + int(np.argmax(core[a0 : b + 1]))
            n = b - a + 1
            length = int(st[b] - st[a])
            sustained = n >= p.sustain_points or (n >= 5 and length >= p.sustain_frac * span)
            if not sustained or hits < 0.5 * n:
                continue
            stretch = _Stretch(a0, a, b, hits)
            out.append(_stretch_finding(side, stretch, st, gv, sm, loss, w_end, p, codes))
    return out


def _moved_in(
    side: _Side, before: np.ndarray, inside_med: float, at_step: int, w_end: int, p: SpikeParams
) -> bool:
    """The norm moved into the band: it came from outside the hysteresis band, or moved by
    that factor itself, not from just over the bound (and after warmup). A converged LoRA
    fine-tune (SmolVLM, loss 19 -> 0.0023) whose norm sat at a median of 0.0123 for 600
    steps and dipped to 0.0096 for 9 points was noise around 1e-2, not gradients that
    vanished; 0.013 -> 0.001 would be."""
    h = p.bound_hysteresis
    before_med = float(np.median(before)) if before.size else math.nan
    return (
        before.size >= p.min_baseline
        and at_step >= w_end
        and (
            before_med >= side.relaxed or before_med >= h * inside_med
            if not side.up
            else before_med <= side.relaxed or before_med * h <= inside_med
        )
    )


def _stretch_finding(
    side: _Side,
    s: _Stretch,
    st: np.ndarray,
    gv: np.ndarray,
    sm: np.ndarray,
    loss: tuple[np.ndarray, np.ndarray] | None,
    w_end: int,
    p: SpikeParams,
    codes: Mapping[str, str],
) -> Finding:
    """The GRAD003 / GRAD004 finding of one sustained stretch."""
    a, b = s.a, s.b
    before = gv[max(0, a - p.window) : a]
    moved_in = _moved_in(side, before, float(np.median(gv[a : b + 1])), int(st[a]), w_end, p)
    onset, tail_med = _left_tail(gv, sm, s.a0, a, up=side.up, p=p)
    ends = _loss_ends(loss, int(st[a]), int(st[b]))
    falling = _falls(ends)
    if not side.up:
        sev = "warning" if moved_in and falling is not True else "info"
        what = "vanishing"
        hint = "check for a frozen or detached module, a dead activation, or an LR near zero"
    else:
        # a norm that moved above the bound and sits there, level, while the loss keeps
        # falling by a tenth of its level or more is the scale of this loss (a DETR-family
        # detector's 37 summed loss parts under max_norm 0.1 clipping: ~140 for 1,350
        # iterations while the loss fell 20 -> 5.6), not gradients exploding: a note
        settled = _fell_by(ends) >= 0.1 and not _growing(gv[a : b + 1])
        sev = "warning" if falling is False or (moved_in and not settled) else "info"
        what = "exploding"
        hint = "lower the LR or add/tighten gradient clipping"
    note = ""
    near = before.size >= p.min_baseline and int(st[a]) >= w_end and not moved_in
    if sev == "info" and side.up and moved_in:
        what = "a high but level norm, not exploding"
        note = (
            f" (it settled there while the loss fell {_fell_by(ends):.0%} over the same steps: the "
            "scale of this loss)"
        )
        hint = "compare it with the clipping threshold, which bounds the updates"
    elif sev == "info":
        note = _info_note(before, moved_in=moved_in, near=near, falling=falling)
    n = b - a + 1
    med = float(np.median(gv[a : b + 1]))
    below = side.code == "GRAD003"
    crossed = "fell below" if below else "rose above"
    return finding(
        side.code,
        codes[side.code],
        sev,
        (
            f"grad_norm is {'below' if below else 'above'} {side.bound:g} "
            f"from the first logged step {int(st[a])} and stayed "
            if a == 0
            else f"grad_norm {crossed} {side.bound:g} at step {int(st[a])} and stayed "
            if onset == a
            else f"grad_norm left its tail (median {tail_med:.3g} before) at step "
            f"{int(st[onset])}, {crossed} {side.bound:g} at step {int(st[a])} and stayed "
        )
        + f"{'below' if below else 'above'} {side.relaxed:.3g} until step "
        f"{int(st[b])} ({n} logged points, median {med:.3g}): {what}"
        f"{'' if what.startswith('a high') else ' gradients'}{note}; {hint}.",
        metric=GRAD,
        step_start=int(st[onset]),
        crossed_step=int(st[a]),
        step_end=int(st[b]),
        bound=side.bound,
        points=n,
        points_beyond_bound=s.hits,
        steps=int(st[b] - st[a]),
        median=med,
        median_before=float(np.median(before)) if before.size else None,
        loss_falling=falling,
    )


def _info_note(before: np.ndarray, *, moved_in: bool, near: bool, falling: bool | None) -> str:
    """Why an info-level stretch is only a note."""
    if moved_in:
        return " (the loss keeps falling, so training still progresses)"
    if near:
        return (
            f" (it was already near the bound: median {float(np.median(before)):.3g}"
            f" over the {before.size} points before; grad norms are scaled per "
            "implementation, so this may be normal)"
        )
    return (
        " (from the start of the log"
        + (", while the loss keeps falling" if falling else "")
        + "; grad norms are scaled per implementation, so this may be normal)"
    )


def _left_tail(
    gv: np.ndarray, sm: np.ndarray, a0: int, a: int, *, up: bool, p: SpikeParams
) -> tuple[int, float]:
    """Where the grad norm left its own tail before crossing an absolute bound at index
    ``a`` (its stretch begins at ``a0``): after the last point before it whose 5-point
    median still lay within the tail's noise band (median x/÷ max(exp(recover_k sigma),
    1.5), the band a spike must come back to). The crossing is where a threshold
    happened to be, not where the change began. The tail is the ``window`` points before
    the stretch — or, when the norm was already climbing there, the window before the
    climb: consecutive windows (going back) whose medians keep moving away by more than
    ``tail_step`` = 10 % each are the climb. Returns (index, the tail's median); ``a``
    itself when no tail is known."""
    w = p.window
    k = a0 // w  # whole windows before the stretch, the last one ending at a0
    if k == 0:
        return a, math.nan
    blocks = gv[a0 - k * w : a0].reshape(k, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        lb = np.log(np.where(blocks > 0, blocks, np.nan))
    med = np.nanmedian(lb, axis=1) if np.isfinite(lb).any() else np.full(k, np.nan)
    step = math.log(1.1)
    climbing = med[:-1] < med[1:] - step if up else med[:-1] > med[1:] + step
    flat = np.flatnonzero(~climbing)  # windows (going back) where the climb stops
    t = int(flat[-1]) + 1 if flat.size else 0  # the tail window
    lt = lb[t][np.isfinite(lb[t])]
    if lt.size < p.min_baseline:
        return a, math.nan
    mid = float(np.median(lt))
    sigma = max(float(np.median(np.abs(lt - mid))) * MAD_TO_SIGMA, p.grad_sigma_floor)
    band = max(p.recover_k * sigma, math.log(1.5))
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.log(sm[:a])
    inside = ls <= mid + band if up else ls >= mid - band
    last = np.flatnonzero(inside)
    return (int(last[-1]) + 1 if last.size else a), float(math.exp(mid))


def _loss_ends(
    loss: tuple[np.ndarray, np.ndarray] | None, a: int, b: int
) -> tuple[float, float] | None:
    """The loss' level where steps [a, b] begin and where they end (medians of the first
    and the last tenth of its points there, 3 at least); None with under 10 points."""
    if loss is None:
        return None
    s, v = loss
    seg = v[(s >= a) & (s <= b)]
    if seg.size < 10:
        return None
    k = max(3, seg.size // 10)
    return float(np.median(seg[:k])), float(np.median(seg[-k:]))


def _falls(ends: tuple[float, float] | None) -> bool | None:
    """Whether the loss fell by more than 1 % between those levels (None: unknown)."""
    if ends is None:
        return None
    first, last = ends
    return last < first - 0.01 * abs(first)


def _fell_by(ends: tuple[float, float] | None) -> float:
    """The share of its first level the loss fell by (negative when it rose; 0 when
    unknown)."""
    if ends is None or not ends[0]:
        return 0.0
    first, last = ends
    return (first - last) / abs(first)


def _growing(g: np.ndarray) -> bool:
    """Whether the norm still climbs through its stretch (the last fifth's median over
    1.5x the first fifth's): gradients that explode keep growing."""
    k = max(1, g.size // 5)
    return bool(np.median(g[-k:]) > 1.5 * np.median(g[:k]))
