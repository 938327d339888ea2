"""Reference checks: a gated run's curves against golden curves (``--reference``).

One check per metric the references have a band for (``reference:train/loss``, ...):

- **REF001 curve-departs** (error; info for a speed-up or less memory): the candidate
  leaves the band. The finding's ``step_start`` is where it began to leave, ``evidence``
  holds where it was detected, how far out it went (band units and the metric's own units),
  whether it came back, and what the direction means for this metric;
- **REF002 curve-identical** (info): the candidate's values are bit-identical to a
  reference's over the compared steps (a determinism check);
- **REF003 curve-not-compared** (info): a metric the references have and the candidate
  lacks, or that it logs outside their steps — said, never silently dropped.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding, Severity
from trainlens.gate._band import Band, Departure, compare, smooth
from trainlens.gate.golden import Golden, axis_series, digest, rule_for
from trainlens.gate.result import FAIL, PASS, SKIPPED, CheckResult

if TYPE_CHECKING:
    from trainlens.core.run import Run
    from trainlens.gate.checks import Outcome

REF_CODES = {
    "REF001": "curve-departs",
    "REF002": "curve-identical",
    "REF003": "curve-not-compared",
}


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e5):
        return f"{x:.3g}"
    return f"{x:.4g}"


def _step(x: float) -> int:
    return round(x)


def _finding(
    code: str,
    severity: str,
    metric: str,
    message: str,
    start: float | None,
    end: float | None,
    **evidence: Any,
) -> Finding:
    return Finding(
        code=code,
        name=REF_CODES[code],
        severity=Severity(severity),
        metric=metric,
        step_start=None if start is None else _step(start),
        step_end=None if end is None else _step(end),
        message=message,
        evidence={k: v for k, v in evidence.items() if v is not None},
    )


def _one(text: str, k: int) -> str:
    return text.replace("the references", "the reference") if k == 1 else text


def _departure_finding(d: Departure, golden: Golden, band_kind: str) -> Finding:
    rule = rule_for(d.metric)
    meaning = rule.higher if d.side > 0 else rule.lower
    k = len(golden.references)
    refs = f"{k} references" if k != 1 else "reference"
    if d.non_finite:
        return _finding(
            "REF001",
            "error",
            d.metric,
            f"{d.metric} is non-finite from step {_step(d.start)}, where the {refs} are finite",
            d.start,
            d.end,
            step_detected=_step(d.detected),
            non_finite=True,
            came_back=False,
            references=golden.references,
        )
    good_news = (
        rule.bad_side != 0
        and d.side != rule.bad_side
        and d.metric
        in (
            "step_time",
            "tokens_per_sec",
            "mem/allocated",
            "mem/reserved",
        )
    )
    unit = "band units" if band_kind == "seeds" else "x the tolerance"
    back = f"back inside from step {_step(d.end)}" if d.came_back else "out to the end of the run"
    where = f"from step {_step(d.start)}"
    if _step(d.detected) != _step(d.start):
        where += f" (clear at {_step(d.detected)})"
    message = (
        f"{d.metric} departs from the {refs}{chr(39) if k != 1 else chr(39) + 's'} "
        f"{'band' if band_kind == 'seeds' else 'tolerance'} {where}: "
        f"{d.peak_units:.1f} {unit} {'above' if d.side > 0 else 'below'} at step "
        f"{_step(d.peak_at)} ({'+' if d.peak_delta >= 0 else ''}{_fmt(d.peak_delta)}, "
        f"{'+' if d.peak_rel >= 0 else ''}{100 * d.peak_rel:.1f} %); {back}. "
        f"{_one(meaning, k)[0].upper()}{_one(meaning, k)[1:]}."
    )
    return _finding(
        "REF001",
        "info" if good_news else "error",
        d.metric,
        message,
        d.start,
        d.end,
        step_detected=_step(d.detected),
        side="above" if d.side > 0 else "below",
        meaning=_one(meaning, k),
        band_units=round(d.peak_units, 2),
        delta=float(f"{d.peak_delta:.6g}"),
        relative=float(f"{d.peak_rel:.4g}"),
        peak_step=_step(d.peak_at),
        came_back=d.came_back,
        band=band_kind,
        references=golden.references,
    )


def reference_checks(golden: Golden, run: Run) -> list[Outcome]:
    """One outcome per metric with a band (and per metric the references lack)."""
    from trainlens.gate.checks import Outcome

    out: list[Outcome] = []
    for metric, band in golden.bands.items():
        name = f"reference:{metric}"
        if not run.has(metric):
            f = _finding(
                "REF003",
                "info",
                metric,
                f"{metric} is not compared: the references log it, this run does not",
                None,
                None,
                references=golden.references,
            )
            out.append(
                Outcome(CheckResult(name, "reference", SKIPPED, "not logged"), [f], code="REF003")
            )
            continue
        x, v = axis_series(run, metric, golden.axis)
        departures, info = compare(band, x, v)
        if golden.axis == "tokens":  # findings speak in the candidate's own steps
            departures, info = _in_steps(run, departures, info)
        if info["compared"] == 0:
            f = _finding(
                "REF003",
                "info",
                metric,
                f"{metric} is not compared: this run logs it at {golden.axis}s "
                f"{_step(x[0])}–{_step(x[-1])}, the references at "
                f"{_step(band.x[0])}–{_step(band.x[-1])}",
                None,
                None,
                references=golden.references,
            )
            out.append(
                Outcome(
                    CheckResult(name, "reference", SKIPPED, "no common steps"), [f], code="REF003"
                )
            )
            continue
        span = f"steps {_step(info['first'])}–{_step(info['last'])}"
        left = []
        if info["before"]:
            left.append(f"{info['before']} before")
        if info["after"]:
            left.append(f"{info['after']} after")
        if left:
            span += f" ({' and '.join(left)} the references' steps not compared)"
        findings = [_departure_finding(d, golden, band.kind) for d in departures]
        same = _identical_to(golden, metric, band, x, v)
        if same and not findings:
            findings.append(
                _finding(
                    "REF002",
                    "info",
                    metric,
                    f"{metric} is bit-identical to reference {same} over {span}",
                    info["first"],
                    info["last"],
                    reference=same,
                )
            )
        failing = [f for f in findings if f.code == "REF001" and f.severity.rank >= 2]
        detail = (
            f"{len(departures)} departure{'s' if len(departures) != 1 else ''} over {span}"
            if departures
            else f"within the band over {span} (at most {info.get('max_units', 0):.1f} "
            f"{'band units' if band.kind == 'seeds' else 'x the tolerance'})"
        )
        if same:
            detail += f"; bit-identical to {same}"
        status = FAIL if failing else PASS
        out.append(
            Outcome(
                CheckResult(name, "reference", status, detail),
                findings,
                code=findings[0].code if findings else "REF001",
            )
        )
    for metric, why in golden.missing.items():
        if run.has(metric):
            f = _finding(
                "REF003",
                "info",
                metric,
                f"{metric} is not compared: {why}",
                None,
                None,
                references=golden.references,
            )
            out.append(
                Outcome(
                    CheckResult(f"reference:{metric}", "reference", SKIPPED, why),
                    [f],
                    code="REF003",
                )
            )
    return out


def _in_steps(
    run: Run, departures: list[Departure], info: dict[str, Any]
) -> tuple[list[Departure], dict[str, Any]]:
    """Token positions back to the candidate's steps (its own tokens -> step mapping)."""
    from dataclasses import replace

    ts, tv = run.series("tokens", finite=True)

    def step(t: float) -> float:
        return float(np.interp(t, tv, ts))

    out = [
        replace(
            d,
            start=step(d.start),
            detected=step(d.detected),
            end=step(d.end),
            peak_at=step(d.peak_at),
        )
        for d in departures
    ]
    info = dict(info)
    for k in ("first", "last"):
        if info.get(k) is not None:
            info[k] = step(info[k])
    return out, info


def _identical_to(
    golden: Golden, metric: str, band: Any, x: np.ndarray, v: np.ndarray
) -> str | None:
    refs = golden.digests.get(metric)
    if not refs:
        return None
    keep = (x >= band.x[0]) & (x <= band.x[-1]) & np.isfinite(v)
    d = digest(x[keep], v[keep])
    return next((name for name, h in refs.items() if h == d), None)


@dataclass
class Overlay:
    """What the report draws for one metric: the band and the candidate as compared."""

    metric: str
    run: str
    references: list[str]
    axis: str
    band: Band
    x: np.ndarray  # the candidate's compared steps
    raw: np.ndarray
    smoothed: np.ndarray
    departures: list[Departure]


def overlays(golden: Golden, run: Run) -> list[Overlay]:
    """Per metric with a band and common steps: the band, the candidate's raw and smoothed
    values over the compared steps, and its departures (the gate's own computation)."""
    out = []
    for metric, band in golden.bands.items():
        if not run.has(metric):
            continue
        x, v = axis_series(run, metric, golden.axis)
        deps, info = compare(band, x, v)
        keep = np.isfinite(v) & (x >= band.x[0]) & (x <= band.x[-1])
        if not info["compared"] or not keep.any():
            continue
        xs, vs = x[keep], v[keep]
        out.append(
            Overlay(
                metric,
                run.name,
                list(golden.references),
                golden.axis,
                band,
                xs,
                vs,
                smooth(xs, vs, band.window, robust=band.robust),
                deps,
            )
        )
    return out
