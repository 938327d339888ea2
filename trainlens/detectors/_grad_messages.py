"""grad_spikes' words: the severity of a spike from what followed it, and the message and
evidence of each finding it builds (a helper of the ``grad_spikes`` detector, not a
detector)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from trainlens.core.findings import Finding
from trainlens.detectors._causes_catalogue import AFTER_LOSS_NOTE
from trainlens.detectors._grad_common import GRAD, LOSS, SpikeParams, _Event, _Pending, _Series
from trainlens.detectors.base import finding

# ---- severity ------------------------------------------------------------------------------


def _loss_response(ls: _Series, ev: _Event, p: SpikeParams) -> tuple[str, str]:
    """(severity, clause) for what the loss did after a spike."""
    st = ls.steps
    if ev.nonfinite_step is not None:
        return "error", f"the loss became non-finite at step {ev.nonfinite_step}"
    if ev.recovered is None:
        after = st.size - 1 - ev.start
        last = float(ls.values[-1])
        # a gross jump (x(1 + gross_loss_rel) over the trend) that every later point of a
        # short log stays above is a blow-up that never came back, however short the log
        gross = after >= 2 and float(np.min(ls.values[ev.start :])) - ev.base >= (
            p.gross_loss_rel * abs(ev.base)
        )
        if after >= p.min_points_after or gross:
            return "error", (
                f"the loss never returned near its pre-spike level {ev.base:.4g} "
                f"(last {last:.4g} at step {int(st[-1])}); restart from a checkpoint before "
                f"step {int(st[ev.start])} and skip those batches, or lower the LR"
            )
        return "warning", (
            f"the loss had not come back to {ev.base:.4g} by the last logged step "
            f"{int(st[-1])} ({last:.4g})"
        )
    rec_step = int(st[ev.recovered])
    last_up = int(st[ev.recovered - 1])
    if rec_step - last_up > p.gap_intervals * ls.interval and ev.recovered - 1 > ev.start:
        # still up at its last point before a gap in the log (an excerpt, a resumed log):
        # when it came back is unknown, so it is no one-off, however few points it spans
        return "warning", (
            f"the loss was still up at step {last_up}, the last logged step before a gap, "
            f"and back by step {rec_step}"
        )
    if ev.recovered - ev.start <= p.transient_points:
        return "info", f"a one-off: the loss was back by step {rec_step}"
    return "warning", f"the loss stayed up {_duration(st, ev.start, ev.recovered)}"


def _duration(st: np.ndarray, a: int, b: int) -> str:
    """'for N steps (M logged points)' from index a to index b (where it was back)."""
    n_steps, n_points = int(st[b] - st[a]), b - a
    pts = f" ({n_points} logged points)" if n_points != n_steps else ""
    return f"for {n_steps} steps{pts} and was back by step {int(st[b])}"


def _grad_persistent(ev: _Event, p: SpikeParams) -> bool:
    """The grad norm stayed up longer than a transient (or never came back)."""
    back = ev.recovered if ev.recovered is not None else ev.end + 1
    return back - ev.start > p.transient_points


def _span(gs: _Series, ev: _Event) -> str:
    if ev.recovered is None:
        if ev.end < gs.steps.size - 1:  # ended at a gap in the log
            return f"from step {int(gs.steps[ev.start])} to step {int(gs.steps[ev.end])}"
        return f"from step {int(gs.steps[ev.start])} to the last logged step"
    return _duration(gs.steps, ev.start, ev.recovered)


def _lead_text(gs: _Series, ev: _Event) -> str:
    v0, vp = float(gs.values[ev.start]), float(gs.values[ev.peak])
    txt = f"{v0:.3g}, {v0 / ev.base:.1f}x its rolling median {ev.base:.3g}"
    if ev.peak != ev.start:
        txt += f"; peak {vp:.3g} at step {int(gs.steps[ev.peak])}"
    return txt


def _ratio(ev: _Event, g: np.ndarray) -> float:
    return float(g[ev.peak] / ev.base) if ev.base > 0 else float("inf")


# ---- findings ------------------------------------------------------------------------------


def _loss_evidence(ls: _Series, le: _Event) -> dict[str, Any]:
    """The loss event's evidence, the same in GRAD001 (the loss followed a grad spike)
    and LOSS001 (it spiked on its own)."""
    loss_peak = float(ls.values[le.peak])
    excess = loss_peak - le.base
    return {
        "loss_baseline": le.base,
        "loss_peak": loss_peak,
        "loss_peak_step": int(ls.steps[le.peak]),
        "loss_excess": excess,
        "loss_excess_rel": excess / abs(le.base) if le.base else float("inf"),
        "loss_z": excess / le.sigma if le.sigma > 0 else float("inf"),
        "loss_spike_points": le.count,
        "recovered_step": None if le.recovered is None else int(ls.steps[le.recovered]),
        "nonfinite_step": le.nonfinite_step,
    }


def _grad001(
    name: str, gs: _Series, ge: _Event, ls: _Series, le: _Event, sev: str, clause: str
) -> Finding:
    lead = int(gs.steps[ge.start])
    lag_step = int(ls.steps[le.start])
    ratio = _ratio(ge, gs.values)
    loss_peak = float(ls.values[le.peak])
    end = max(int(gs.steps[ge.end]), int(ls.steps[le.end]))
    return finding(
        "GRAD001",
        name,
        sev,
        f"grad_norm spiked at step {lead} ({_lead_text(gs, ge)}) and loss followed at "
        f"step {lag_step} "
        f"(lag {lag_step - lead}): {loss_peak:.4g} at step {int(ls.steps[le.peak])} vs trend "
        f"{le.base:.4g}; {clause}.",
        metric=GRAD,
        step_start=lead,
        step_end=end,
        lead_step=lead,
        lag_step=lag_step,
        lag=lag_step - lead,
        grad_ratio=ratio,
        grad_ratio_at_lead=float(gs.values[ge.start]) / ge.base if ge.base > 0 else None,
        grad_baseline=ge.base,
        grad_peak=float(gs.values[ge.peak]),
        grad_peak_step=int(gs.steps[ge.peak]),
        grad_spike_points=ge.count,
        **_loss_evidence(ls, le),
    )


def _loss001(
    name: str, ls: _Series, le: _Event, sev: str, clause: str, *, no_grad: str | None
) -> Finding:
    """``no_grad``: why there is no grad-norm series to check a lead in (None: there is)."""
    s0 = int(ls.steps[le.start])
    loss_peak = float(ls.values[le.peak])
    excess = loss_peak - le.base
    if "grad_spike_step" in le.extra:
        lead_txt = (
            f"grad_norm spiked only at step {int(le.extra['grad_spike_step'])}, after the "
            f"loss{AFTER_LOSS_NOTE}"
        )
    elif no_grad is None:
        lead_txt = "no grad_norm spike led it"
    else:
        lead_txt = f"grad_norm {no_grad}, so its lead cannot be checked"
    return finding(
        "LOSS001",
        name,
        sev,
        f"loss spiked at step {s0}: {loss_peak:.4g} at step {int(ls.steps[le.peak])} vs trend "
        f"{le.base:.4g} (+{excess / abs(le.base):.0%}); {lead_txt}; {clause}."
        if le.base
        else f"loss spiked at step {s0}: {loss_peak:.4g}; {lead_txt}; {clause}.",
        metric=LOSS,
        step_start=s0,
        step_end=int(ls.steps[le.end]),
        **_loss_evidence(ls, le),
        grad_spike_step=le.extra.get("grad_spike_step"),
        grad_ratio=le.extra.get("grad_ratio"),
    )


def _loss_moved(gs: _Series, ev: _Event, ls: _Series | None, p: SpikeParams) -> str:
    """What the loss did at a grad-only spike: not a spike, but did it move? The largest
    rise over the last loss before the grad spike, within the pairing window."""
    if ls is None:
        return "train/loss is not logged"
    g0 = int(gs.steps[ev.start])
    win = max(p.lag_window, p.lag_window_points * max(gs.interval, ls.interval))
    i0 = int(np.searchsorted(ls.steps, g0, side="left"))
    i1 = int(np.searchsorted(ls.steps, int(gs.steps[ev.last_spike]) + win, side="right"))
    if i0 == 0 or i1 <= i0:
        return "the loss did not follow"
    before = float(ls.values[i0 - 1])
    j = i0 + int(np.argmax(ls.values[i0:i1]))
    rise = (float(ls.values[j]) - before) / abs(before) if before else 0.0
    if rise < p.recover_rel:
        return "the loss did not follow"
    return (
        f"the loss rose only {rise:.1%} ({float(ls.values[j]):.4g} at step "
        f"{int(ls.steps[j])} after {before:.4g}), less than a loss spike"
    )


def _grad002_cluster(
    name: str, gs: _Series, evs: list[_Event], steps: list[int], ratios: list[float], why: str
) -> Finding:
    """One GRAD002 warning for grad-only spikes repeated in a cluster (``steps`` and
    ``ratios``: their first steps and peak ratios)."""
    return finding(
        "GRAD002",
        name,
        "warning",
        f"grad_norm spiked {len(evs)} times between steps {steps[0]} and "
        f"{steps[-1]} (up to {max(ratios):.1f}x its rolling median) and {why}; "
        "repeated spikes are an early sign of instability — check the LR, warmup "
        "and clipping.",
        metric=GRAD,
        step_start=steps[0],
        step_end=int(gs.steps[evs[-1].end]),
        spike_steps=steps,
        grad_ratios=ratios,
        count=len(evs),
        lead_step=steps[0],
    )


def _grad002_one(name: str, gs: _Series, ev: _Event, sev: str, why: str, p: SpikeParams) -> Finding:
    s0 = int(gs.steps[ev.start])
    if ev.recovered is not None:
        rec = f"back by step {int(gs.steps[ev.recovered])}"
    elif ev.end < gs.steps.size - 1:
        rec = f"still elevated at step {int(gs.steps[ev.end])}, the last before a gap in the log"
    else:
        rec = "still elevated at the last logged step"

    if not _grad_persistent(ev, p):
        what = f"a one-off ({rec})"
    elif sev == "info":
        what = (
            f"it stayed elevated {_span(gs, ev)}, from the first points of the log: the norm "
            "settling after initialization"
        )
    else:
        what = f"it stayed elevated {_span(gs, ev)}"
    return finding(
        "GRAD002",
        name,
        sev,
        f"grad_norm spiked at step {s0} ({_lead_text(gs, ev)}) and {why}: {what}.",
        metric=GRAD,
        step_start=s0,
        step_end=int(gs.steps[ev.end]),
        lead_step=s0,
        grad_ratio=_ratio(ev, gs.values),
        grad_baseline=ev.base,
        grad_peak=float(gs.values[ev.peak]),
        grad_peak_step=int(gs.steps[ev.peak]),
        grad_spike_points=ev.count,
        recovered_step=None if ev.recovered is None else int(gs.steps[ev.recovered]),
    )


def _resolve(pending: list[_Pending], p: SpikeParams, codes: Iterable[str]) -> list[Finding]:
    """Every warning and error; at most ``max_info_findings`` info findings per code
    (the largest), each saying how many there were; ``codes`` in the order listed."""
    out = [x.build() for x in pending if x.severity != "info"]
    for code in codes:
        infos = [x for x in pending if x.severity == "info" and x.code == code]
        total = len(infos)
        if total > p.max_info_findings:
            infos.sort(key=lambda x: x.score, reverse=True)
            infos = infos[: p.max_info_findings]
        for x in infos:
            f = x.build()
            if total > p.max_info_findings:
                f = Finding(
                    f.code,
                    f.name,
                    f.severity,
                    f.metric,
                    f.step_start,
                    f.step_end,
                    f.message.rstrip(".")
                    + f" (one of the {len(infos)} largest of {total} such one-off spikes).",
                    {**f.evidence, "similar_total": total},
                )
            out.append(f)
    return out
