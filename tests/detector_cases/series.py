"""Build a synthetic Run from a case description (YAML in this folder).

A case names series by canonical metric; each is a base shape, noise, and events:

    series:
      grad_norm: {base: constant, value: 1.0, noise: {kind: lognormal, sigma: 0.1},
                  events: [{at: 500, len: 2, mult: 20}]}
      val/loss:  {base: decay, start: 5, end: 2, every: 100}

Bases: constant(value); decay(start, end, rate=5: exponential approach); linear(start, end);
warmup_cosine(peak, min, warmup, total); warmup_linear(peak, min, warmup, total);
step_decay(peak, step_size, gamma); values(list). Noise: {kind: gaussian|relative|lognormal,
sigma}. Events (applied in order over steps [at, at+len)): mult, add, set (a number or
'nan'/'inf'/'-inf'), ramp (add slope*(step-at) from ``at`` on, no end), decay_to (after
``at``, relax back with time constant ``recover``). ``every: N`` keeps every N-th step,
``from``/``until`` limit the range. wall_time: ``wall: {step_time: s, events: [...]}``.
``shift: k`` evaluates a base at step + k (a resumed log whose step count restarted while
its schedule went on). ``gaps: [[a, b], ...]`` at the case level leaves steps [a, b) out of
every series (an excerpt spliced from pieces of a log).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from trainlens.core.run import Run, build_run


def _num(v: Any) -> float:
    if isinstance(v, str):
        return float(v.replace("inf", "inf"))
    return float(v)


def base_values(spec: dict[str, Any], steps: np.ndarray) -> np.ndarray:
    kind = spec.get("base", "constant")
    n = len(steps)
    t = steps.astype(float) + _num(spec.get("shift", 0))
    if kind == "constant":
        return np.full(n, _num(spec.get("value", 1.0)))
    if kind == "decay":
        start, end, rate = _num(spec["start"]), _num(spec["end"]), _num(spec.get("rate", 5.0))
        frac = (t - t[0]) / max(t[-1] - t[0], 1)
        return end + (start - end) * np.exp(-rate * frac)
    if kind == "linear":
        start, end = _num(spec["start"]), _num(spec["end"])
        frac = (t - t[0]) / max(t[-1] - t[0], 1)
        return start + (end - start) * frac
    if kind in ("warmup_cosine", "warmup_linear"):
        peak, lo = _num(spec["peak"]), _num(spec.get("min", 0.0))
        warm, total = int(spec.get("warmup", 0)), int(spec["total"])
        out = np.empty(n)
        w = t < warm
        out[w] = peak * (t[w] + 1) / max(warm, 1)
        prog = np.clip((t[~w] - warm) / max(total - warm, 1), 0, 1)
        if kind == "warmup_cosine":
            out[~w] = lo + 0.5 * (peak - lo) * (1 + np.cos(np.pi * prog))
        else:
            out[~w] = peak + (lo - peak) * prog
        return out
    if kind == "step_decay":
        peak, size, gamma = _num(spec["peak"]), int(spec["step_size"]), _num(spec["gamma"])
        return peak * gamma ** np.floor(t / size)
    if kind == "values":
        return np.asarray([_num(v) for v in spec["values"]], dtype=float)
    raise ValueError(f"unknown base {kind!r}")


def apply_noise(
    values: np.ndarray, spec: dict[str, Any] | None, rng: np.random.Generator
) -> np.ndarray:
    if not spec:
        return values
    kind, sigma = spec.get("kind", "gaussian"), _num(spec.get("sigma", 0.01))
    if kind == "gaussian":
        return values + rng.normal(0, sigma, len(values))
    if kind == "relative":
        return values * (1 + rng.normal(0, sigma, len(values)))
    if kind == "lognormal":
        return values * np.exp(rng.normal(0, sigma, len(values)))
    raise ValueError(f"unknown noise {kind!r}")


def apply_events(values: np.ndarray, steps: np.ndarray, events: list[dict[str, Any]]) -> np.ndarray:
    v = values.astype(float).copy()
    for ev in events or []:
        at = int(ev["at"])
        length = int(ev.get("len", 1))
        sel = (steps >= at) & (steps < at + length)
        if "mult" in ev:
            v[sel] *= _num(ev["mult"])
        if "add" in ev:
            v[sel] += _num(ev["add"])
        if "set" in ev:
            v[sel] = _num(ev["set"])
        if "ramp" in ev:
            after = steps >= at
            v[after] += _num(ev["ramp"]) * (steps[after] - at)
        if "recover" in ev:
            # after the event, the excess over the pre-event level decays away
            tau = _num(ev["recover"])
            end = at + length
            after = steps >= end
            if "add" in ev:
                v[after] += _num(ev["add"]) * np.exp(-(steps[after] - end) / tau)
            if "mult" in ev:
                v[after] *= 1 + (_num(ev["mult"]) - 1) * np.exp(-(steps[after] - end) / tau)
    return v


def long_frame(
    metric: str, steps: np.ndarray, values: np.ndarray, wall: np.ndarray | None = None
) -> pl.DataFrame:
    """One metric's rows of the canonical long frame."""
    return pl.DataFrame(
        {
            "step": steps,
            "metric": [metric] * len(steps),
            "value": values,
            "wall_time": wall if wall is not None else [None] * len(steps),
        },
        schema={
            "step": pl.Int64,
            "metric": pl.String,
            "value": pl.Float64,
            "wall_time": pl.Float64,
        },
    )


def run_of(series: dict[str, tuple[np.ndarray, np.ndarray]], name: str = "t") -> Run:
    """A run of the given (steps, values) per metric, no wall times."""
    frames = [long_frame(m, st, v) for m, (st, v) in series.items()]
    return build_run(pl.concat(frames), name=name, source=f"<{name}>", fmt="synthetic")


def make_run(case: dict[str, Any], name: str = "case") -> Run:
    n = int(case.get("steps", 1000))
    first = int(case.get("first_step", 0))
    all_steps = np.arange(first, first + n)
    rng = np.random.default_rng(int(case.get("seed", 0)))
    frames = []
    wall = None
    if "wall" in case:
        w = case["wall"]
        dt = np.full(n, _num(w.get("step_time", 0.1)))
        dt = apply_events(dt, all_steps, w.get("events", []))
        wall = 1.7e9 + np.cumsum(dt)
    for metric, spec in case["series"].items():
        lo = int(spec.get("from", first))
        hi = int(spec.get("until", first + n))
        every = int(spec.get("every", 1))
        mask = (all_steps >= lo) & (all_steps < hi) & ((all_steps - first) % every == 0)
        for a, b in case.get("gaps", []):
            mask &= (all_steps < int(a)) | (all_steps >= int(b))
        steps = all_steps[mask]
        vals = (
            base_values(spec, all_steps)[mask]
            if spec.get("base") != "values"
            else base_values(spec, steps)
        )
        vals = apply_noise(vals, spec.get("noise"), rng)
        vals = apply_events(vals, steps, spec.get("events", []))
        frames.append(long_frame(metric, steps, vals, wall[mask] if wall is not None else None))
    long = pl.concat(frames)
    return build_run(long, name=name, source=f"<case {name}>", fmt="synthetic")
