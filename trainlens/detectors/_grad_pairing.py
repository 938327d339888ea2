"""grad_spikes' lead-lag: each grad-norm spike paired with the loss spike that follows it
within the lag window (GRAD001), the loss spikes no grad spike led (LOSS001), and the
grad spikes the loss did not follow (GRAD002), alone or in a cluster the run's own spike
rate does not explain (a helper of the ``grad_spikes`` detector, not a detector)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import numpy as np

from trainlens.core.stats import runs_of
from trainlens.detectors._causes_catalogue import DATA_ADVICE, GRAD_ADVICE
from trainlens.detectors._grad_common import SpikeParams, _Event, _Pending, _Series, gaps_in
from trainlens.detectors._grad_messages import (
    _grad001,
    _grad002_cluster,
    _grad002_one,
    _grad_persistent,
    _loss001,
    _loss_moved,
    _loss_response,
    _ratio,
    _span,
)


def _pair(
    gs: _Series | None,
    ls: _Series | None,
    p: SpikeParams,
    codes: Mapping[str, str],
    no_grad: str = "is not logged",
) -> list[_Pending]:
    """Every spike event of both series, decided: GRAD001 (a grad spike the loss
    followed), LOSS001 (a loss spike no grad spike led), GRAD002 (a grad spike alone)."""
    out: list[_Pending] = []
    loss_used = np.zeros(len(ls.events) if ls is not None else 0, dtype=bool)
    grad_answered = np.zeros(len(gs.events) if gs is not None else 0, dtype=bool)
    if gs is not None and ls is not None and gs.events and ls.events:
        out.extend(_lead_lag(gs, ls, p, codes["GRAD001"], loss_used, grad_answered))
    if ls is not None:
        no_grad_why = None if gs else no_grad
        for li in np.flatnonzero(~loss_used).tolist():
            out.append(_loss_only(ls, ls.events[li], p, codes["LOSS001"], no_grad_why))
    if gs is not None:
        lone = np.flatnonzero(~grad_answered).tolist()
        out.extend(_grad002(gs, lone, p, ls, codes["GRAD002"]))
    return out


def _lead_lag(
    gs: _Series,
    ls: _Series,
    p: SpikeParams,
    name: str,
    loss_used: np.ndarray,
    grad_answered: np.ndarray,
) -> list[_Pending]:
    """GRAD001 for each grad spike a loss spike followed within the lag window; marks the
    loss spikes used and the grad spikes answered (also by a loss spike under way)."""
    out: list[_Pending] = []
    win = max(p.lag_window, p.lag_window_points * max(gs.interval, ls.interval))
    l_idx = np.array([e.start for e in ls.events], dtype=np.int64)
    l_start = ls.steps[l_idx]
    l_end = ls.steps[np.array([e.end for e in ls.events], dtype=np.int64)]
    # a loss spike after a gap in the log is not paired across it: nothing logged
    # joins the two (a spliced excerpt's typical interval can make the window long)
    gap_steps = ls.steps[gaps_in(ls.steps, ls.interval, p.gap_intervals)]
    for gi, ge in enumerate(gs.events):
        # a loss spike follows from the grad spike's first step to lag_window after
        # its last spike point
        g0, g1 = int(gs.steps[ge.start]), int(gs.steps[ge.last_spike])
        reach = g1 + win
        ng = int(np.searchsorted(gap_steps, g1, side="left"))
        if ng < gap_steps.size:
            reach = min(reach, int(gap_steps[ng]))
        li = int(np.searchsorted(l_start, g0, side="left"))
        while li < l_start.size and l_start[li] <= reach and loss_used[li]:
            li += 1
        if li < l_start.size and l_start[li] <= reach:
            loss_used[li] = grad_answered[gi] = True
            le = ls.events[li]
            sev, clause = _loss_response(ls, le, p)
            if sev == "info" and _grad_persistent(ge, p):
                sev = "warning"
                clause += f"; grad_norm stayed elevated {_span(gs, ge)}"
            if sev == "warning":
                clause += "; " + GRAD_ADVICE  # replaced by _causes when something moved first
            out.append(
                _Pending(
                    "GRAD001",
                    sev,
                    _ratio(ge, gs.values),
                    g0,
                    partial(_grad001, name, gs, ge, ls, le, sev, clause),
                )
            )
            continue
        # a loss spike already under way when the grad norm spiked: the grad norm
        # did not lead, but the spike is not unanswered either
        lb = int(np.searchsorted(l_start, g0, side="left")) - 1
        if lb >= 0 and l_end[lb] >= g0 - win:
            grad_answered[gi] = True
            extra = ls.events[lb].extra
            extra.setdefault("grad_spike_step", g0)
            extra.setdefault("grad_ratio", _ratio(ge, gs.values))
    return out


def _loss_only(ls: _Series, le: _Event, p: SpikeParams, name: str, no_grad: str | None) -> _Pending:
    """LOSS001 for a loss spike no grad spike led (``no_grad``: why there is no grad-norm
    series to check a lead in; None: there is)."""
    sev, clause = _loss_response(ls, le, p)
    if sev == "warning":
        clause += "; " + DATA_ADVICE  # replaced by _causes when something moved first
    z = (float(ls.values[le.peak]) - le.base) / le.sigma if le.sigma > 0 else 0.0
    return _Pending(
        "LOSS001",
        sev,
        z,
        int(ls.steps[le.start]),
        partial(_loss001, name, ls, le, sev, clause, no_grad=no_grad),
    )


def _grad002(
    gs: _Series, lone: list[int], p: SpikeParams, ls: _Series | None, name: str
) -> list[_Pending]:
    out: list[_Pending] = []
    if not lone:
        return out
    why = "the loss did not follow" if ls is not None else "train/loss is not logged"
    # repeated grad-only spikes: a window of repeat_window points holding at least
    # repeat_count of them, more than the run's own rate of such spikes explains
    # (Poisson tail, Bonferroni over the windows of the run, level repeat_alpha)
    starts = np.array([gs.events[i].start for i in lone], dtype=np.int64)
    in_cluster = np.zeros(len(lone), dtype=bool)
    judged = max(int(np.sum(gs.steps >= gs.judged_from)), 1)
    w = max(1, min(p.repeat_window, judged))
    counts = np.searchsorted(starts, starts + w, side="left") - np.arange(len(lone))
    cand = np.flatnonzero(counts >= p.repeat_count)
    if cand.size:
        rate = (len(lone) - counts[cand] + 1) / judged  # outside the window, add-one
        # P(X >= count) for X ~ Poisson: scipy.stats.poisson.sf(count - 1, mu) is
        # pdtrc(count - 1, mu) (count >= 1); scipy.special imports in a third of the time
        from scipy.special import pdtrc

        # sliding windows: about twice as many tests as disjoint ones
        pval = pdtrc(counts[cand] - 1, rate * w) * max(2.0 * judged / w, 1.0)
        for j, c in zip(
            cand[pval < p.repeat_alpha].tolist(),
            counts[cand][pval < p.repeat_alpha].tolist(),
            strict=True,
        ):
            in_cluster[j : j + c] = True
    for a, b in runs_of(in_cluster):
        evs = [gs.events[lone[i]] for i in range(a, b + 1)]
        steps = [int(gs.steps[e.start]) for e in evs]
        ratios = [_ratio(e, gs.values) for e in evs]
        out.append(
            _Pending(
                "GRAD002",
                "warning",
                max(ratios),
                steps[0],
                partial(_grad002_cluster, name, gs, evs, steps, ratios, why),
            )
        )
    for j, i in enumerate(lone):
        if in_cluster[j]:
            continue
        ev = gs.events[i]
        # a grad-only excursion that starts in the first points is the norm settling
        # after initialization (it often stays up for tens of steps): a note, not a warning
        settling = ev.start < p.min_sigma_points
        sev = "warning" if _grad_persistent(ev, p) and not settling else "info"
        out.append(
            _Pending(
                "GRAD002",
                sev,
                _ratio(ev, gs.values),
                int(gs.steps[ev.start]),
                partial(_grad002_one, name, gs, ev, sev, _loss_moved(gs, ev, ls, p), p),
            )
        )
    return out
