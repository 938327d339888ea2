"""Data-path signals: padding that wastes compute, and a data loader the step waits on.

Needs `padding_frac` and/or `dataloader_wait` (with `step_time`, or wall-clock times) ·
fixtures: `tests/test_system_detectors_real.py`

Severity by code
    | code | name | severity |
    |---|---|---|
    | DATA003 | padding-high | info (mean 0.3–0.4) · warning (≥ 0.4) |
    | DATA004 | dataloader-wait-high | info (10–20 % of the step) · warning (≥ 20 %) |

What it flags
    - **DATA003** — `padding_frac` (the fraction of the batch's tokens that are padding) high
      for a sustained stretch: the step it began, the stretch's `mean`, the level `before`
      (none when it is high from the start), `n_points`. Values that look like percentages
      (median > 1, max ≤ 100) are divided by 100 (noted in the evidence).
    - **DATA004** — `dataloader_wait` (seconds per step waiting for the next batch) a large
      `share` of the step time for a sustained stretch, with `share_before`. The step time is
      `step_time` (`step_time_source`), or the wall-clock interval per step when that is not
      logged. When the wait exceeds `step_time` at more than 5 % of the steps, `step_time`
      evidently excludes the wait and the share is wait / (wait + step_time)
      (`step_time_excludes_wait`).

    Method (both): the series (padding, or the wait share per step) is median-filtered over
    2 % of the run (at least 5 points); stretches where the filtered value is at or above the
    info bound for at least `min_frac` of the points (short dips inside do not end a
    stretch) are reported, their start refined on the raw values (the split that best
    separates the level before from the level inside).

Why it matters
    Padding tokens cost the same FLOPs as real ones: 40 % padding is 40 % of the compute
    budget spent on nothing; packing or length-grouped batching removes it (Krell et al.
    2021, *Efficient Sequence Packing without Cross-contamination*, found ~50 % padding in
    BERT pre-training on Wikipedia). Waiting for data idles the accelerator: a step cannot
    go faster than its loader.

Default thresholds and their source
    | parameter | default | meaning / source |
    |---|---|---|
    | `padding_info`, `padding_warn` | 0.3, 0.4 | Krell et al. report ~50 % padding as the waste that motivates packing; HF Transformers' `group_by_length` and packing collators exist for it. Above 40 % of compute wasted is a warning |
    | `wait_info`, `wait_warn` | 0.10, 0.20 | the PyTorch profiler's TensorBoard plugin (pytorch/kineto `torch_tb_profiler`, `RunProfile.analyze`) recommends more DataLoader workers as soon as the DataLoader takes more than 5 % of the step; twice that, sustained, is a clear bottleneck (info), four times a warning |
    | `min_frac`, `min_points` | 0.05, 5 | a stretch must cover 5 % of the logged points: a few slow batches (a cold cache, the first batch of an epoch without persistent workers) are not a pattern |
    | `window_frac` | 0.02 | median-filter window |
    | `max_findings` | 3 | per code |

Known false positives
    - Padding: variable-length fine-tuning data (chat, classification) is padded by nature
      unless packed — the finding is then a suggestion; a `padding_frac` that counts
      loss-masked prompt tokens as padding.
    - Loader wait: timers that include the host-to-device copy or a
      `torch.cuda.synchronize`; short runs with many epochs whose workers restart each epoch.

Measured
    - Fixture `slow_loader` (loader waits ~1.2x the compute from step 300; a collator pads
      to full length from step 600): **DATA004 warning at 300** (54 % of the step, 1.0 %
      before; label 300 ± 10) and **DATA003 warning at 600** (mean 0.63, 0.053 before; label
      600 ± 5).
    - No other fixture run and no real log logs these metrics (skipped).

Example
    ```
      WARNING  DATA004   steps 300–900    the step waited for data 54% of its time from step 300 (1.0% before); the accelerator idles while the loader catches up — add DataLoader workers, prefetch, or move preprocessing off the training process.
      WARNING  DATA003   steps 600–900    padding_frac averaged 0.63 from step 600 (0.0527 before): 63% of every batch's compute is spent on padding; pack sequences or batch them by length.
    ```
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import centered_median, odd, runs_of
from trainlens.detectors._segments import refine_split
from trainlens.detectors.base import Context, Skip, finding

CODES = {"DATA003": "padding-high", "DATA004": "dataloader-wait-high"}


@dataclass(frozen=True)
class Params:
    #: mean padding fraction reported as info ...
    padding_info: float = 0.3
    #: ... and as a warning
    padding_warn: float = 0.4
    #: dataloader wait as a share of step time reported as info ...
    wait_info: float = 0.10
    #: ... and as a warning
    wait_warn: float = 0.20
    #: a stretch must cover this fraction of the logged points ...
    min_frac: float = 0.05
    #: ... and this many points
    min_points: int = 5
    #: median-filter window as a fraction of the points
    window_frac: float = 0.02
    #: at most this many findings per code
    max_findings: int = 3


@dataclass
class _Stretch:
    start: int  # index where it begins (refined)
    end: int  # last index
    level: float  # mean inside
    before: float | None  # median before (None when it starts the run)


def _stretches(v: np.ndarray, bound: float, params: Params) -> list[_Stretch]:
    n = len(v)
    w = max(5, min(odd(params.window_frac * n), 201))
    f = centered_median(v, w)
    min_len = max(params.min_points, math.ceil(params.min_frac * n))
    out: list[_Stretch] = []
    merged: list[tuple[int, int]] = []
    for a, b in runs_of(np.nan_to_num(f, nan=-np.inf) >= bound):
        if merged and a - merged[-1][1] - 1 < min_len:  # a short dip does not end it
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    for a, b in merged:
        if b - a + 1 < min_len:
            continue
        inside = float(np.median(v[a : b + 1]))
        start = a
        before: float | None = None
        if a > 0:
            prev = v[max(0, a - 4 * w) : a]
            before = float(np.median(prev))
            lo, hi = max(0, a - w), min(b, a + w)
            start = refine_split(v, lo, hi + 1, before, inside) if hi > lo else a
            start = min(start, b)
            before = float(np.median(v[max(0, start - 4 * w) : start])) if start > 0 else None
        out.append(_Stretch(start, b, float(np.mean(v[start : b + 1])), before))
    return out


def _padding(run: Run, params: Params) -> list[Finding]:
    s, v = run.series("padding_frac", finite=True)
    if len(v) < params.min_points:
        raise Skip(f"padding_frac: only {len(v)} values, too few to judge ({params.min_points})")
    note = None
    if np.median(v) > 1.0 and v.max() <= 100.0:
        v = v / 100.0  # logged in percent
        note = "padding_frac looked like a percentage; divided by 100"
    out = []
    for st in _stretches(v, params.padding_info, params)[: params.max_findings]:
        if st.level < params.padding_info:
            continue
        sev = "warning" if st.level >= params.padding_warn else "info"
        to_end = st.end == len(v) - 1
        whole = st.before is None
        where = (
            "throughout the run"
            if whole and to_end
            else (
                f"from step {int(s[st.start])}" + ("" if to_end else f" to step {int(s[st.end])}")
            )
        )
        prior = "" if st.before is None else f" ({st.before:.3g} before)"
        msg = (
            f"padding_frac averaged {st.level:.2g} {where}{prior}: "
            f"{100 * st.level:.0f}% of every batch's compute is spent on padding; "
            "pack sequences or batch them by length."
        )
        ev: dict[str, Any] = {
            "mean": st.level,
            "before": st.before,
            "n_points": st.end - st.start + 1,
        }
        if note:
            ev["note"] = note
        out.append(
            finding(
                "DATA003",
                CODES["DATA003"],
                sev,
                msg,
                metric="padding_frac",
                step_start=int(s[st.start]),
                step_end=int(s[st.end]),
                **ev,
            )
        )
    return out


def _wait_share(run: Run) -> tuple[np.ndarray, np.ndarray, str, bool]:
    """Steps, wait share of the step time, what the step time came from, and whether
    step_time was read as excluding the wait."""
    wait = run.series_frame("dataloader_wait").filter(pl.col("value").is_finite())
    if run.has("step_time"):
        st = run.series_frame("step_time").filter(
            pl.col("value").is_finite() & (pl.col("value") > 0)
        )
        j = wait.join(st.select("step", pl.col("value").alias("st")), on="step", how="inner")
        steps = j.get_column("step").to_numpy()
        wv = j.get_column("value").to_numpy().astype(np.float64)
        tv = j.get_column("st").to_numpy().astype(np.float64)
        if len(steps):
            exclusive = bool(np.mean(wv > tv * 1.01) > 0.05)
            share = wv / (wv + tv) if exclusive else wv / tv
            return steps, share, "step_time", exclusive
    wt = wait.filter(pl.col("wall_time").is_not_null())
    if wt.height >= 3:
        steps = wt.get_column("step").to_numpy()
        wall = wt.get_column("wall_time").to_numpy().astype(np.float64)
        wv = wt.get_column("value").to_numpy().astype(np.float64)
        per = np.diff(wall) / np.maximum(np.diff(steps), 1)
        if np.mean(per <= 0) > 0.05:
            # a clock does not go back between steps: these "wall times" are something
            # else (detectron2's `time`, seconds per iteration, read as one gave a share of
            # wait / noise, clipped to "100 %" on a healthy run)
            raise Skip(
                "dataloader_wait: the wall-clock times go back between steps "
                f"({100 * np.mean(per <= 0):.0f} % of intervals), so they are no clock to "
                "compare with, and step_time is not logged"
            )
        ok = per > 0
        return steps[1:][ok], wv[1:][ok] / per[ok], "wall-clock interval", False
    raise Skip("dataloader_wait needs step_time or wall-clock times to compare with, not logged")


def _loader(run: Run, params: Params) -> list[Finding]:
    s, share, source, exclusive = _wait_share(run)
    if len(share) < params.min_points:
        raise Skip(
            f"dataloader_wait: only {len(share)} values, too few to judge ({params.min_points})"
        )
    share = np.clip(share, 0.0, 1.0)
    out = []
    for st in _stretches(share, params.wait_info, params)[: params.max_findings]:
        if st.level < params.wait_info:
            continue
        sev = "warning" if st.level >= params.wait_warn else "info"
        to_end = st.end == len(share) - 1
        where = (
            "throughout the run"
            if st.before is None and to_end
            else (
                f"from step {int(s[st.start])}" + ("" if to_end else f" to step {int(s[st.end])}")
            )
        )
        prior = "" if st.before is None else f" ({100 * st.before:.1f}% before)"
        msg = (
            f"the step waited for data {100 * st.level:.0f}% of its time {where}{prior}; "
            "the accelerator idles while the loader catches up — add DataLoader workers, "
            "prefetch, or move preprocessing off the training process."
        )
        out.append(
            finding(
                "DATA004",
                CODES["DATA004"],
                sev,
                msg,
                metric="dataloader_wait",
                step_start=int(s[st.start]),
                step_end=int(s[st.end]),
                share=st.level,
                share_before=st.before,
                step_time_source=source,
                step_time_excludes_wait=exclusive,
                n_points=st.end - st.start + 1,
            )
        )
    return out


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    has_pad, has_wait = run.has("padding_frac"), run.has("dataloader_wait")
    if not has_pad and not has_wait:
        raise Skip("needs padding_frac or dataloader_wait, not logged")
    out: list[Finding] = []
    reasons: list[str] = []
    judged = False
    for logged, part in ((has_pad, _padding), (has_wait, _loader)):
        if not logged:
            continue
        try:
            out.extend(part(run, params))
            judged = True
        except Skip as why:
            reasons.append(str(why))
    if not judged:
        raise Skip("; ".join(reasons))
    return out
