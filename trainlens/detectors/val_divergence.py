"""Validation/train divergence: val loss rising while train loss keeps falling; a
validation task metric that ended worse than its best.

What it flags
    VAL001 ``val-train-divergence``: after its best evaluation, a validation loss that
    rises clearly and persistently while the training loss over the same steps still
    falls — overfitting (or a train/val distribution split). Each per-domain validation
    loss (``val/loss/<domain>``, the HF Trainer's per-set ``eval_<set>_loss`` among them)
    is judged on its own, never pooled with the others.
    The finding names the best step: the checkpoint to keep, and the percent it prints
    is measured from that best value to the mean of the last evaluations.

    VAL006 ``val-metric-regression``: in a run that logs no validation loss, a validation
    task metric (accuracy, top-1, F1, BLEU, IoU, …, higher is better; WER, CER, MAE,
    RMSE, perplexity, lower is better) that ended clearly worse than its best evaluation
    and stayed there. It names the best step, the checkpoint to keep.

Why it matters
    Past that point more training makes the model worse on what you care about; the
    compute is wasted and the last checkpoint is not the best one. Pooled validation
    losses hide a domain that degrades while the others improve.

Default thresholds
    At least ``min_evals`` = 5 evaluations, ``min_after`` = 3 of them after the best;
    the rise from the best to the mean of the last three evaluations must exceed both
    ``min_rise`` = 2 % of the best value and ``noise_k`` = 3 times the evaluation noise
    seen before the best (robust scale of the second differences of the last 8
    evaluations up to it, MAD × 1.4826 / √6; with fewer than five of them, the smaller
    of that scale over all evaluations and of their successive differences' MAD ×
    1.4826 / √2): the swings after the
    best are what is judged, not part of the yardstick — an HF run whose eval loss was
    lowest (0.232) at step 800, then 0.25–0.30 for seven evals and 0.288 at the end
    (+24 %) got nothing when they were. A loss that rose at each of the ``min_after``
    evaluations after the best passes the noise guard whatever the noise (Prechelt's
    UP_s criterion; ``evidence.rose_each_eval``): a 7-epoch Keras log, 0.457 then 0.469,
    0.498, 0.534, was silent. The Theil–Sen slope of the evaluations after the
    best must be positive. From 20 evaluations on, the best level is the median of the
    five evaluations around the best one, so a lucky low evaluation among thousands of
    noisy ones is not taken for a turning point; with fewer the lowest stands. When the
    trainer recorded its best checkpoint by this metric (HF's ``best_model_checkpoint``
    at a step where the metric equals ``best_metric``), that evaluation is the best and
    the finding names the checkpoint to keep (``evidence.best_checkpoint``). The
    training loss must have fallen over the same steps (smoothed, by more than its own
    noise). This is the
    "generalization loss" criterion of early stopping (Prechelt 1998, "Early Stopping —
    But When?", GL_α with α = 2 %) with a noise guard. Severity: warning; error when
    the rise (from the level around the best) exceeds ``error_rise`` = 10 %. Without a
    train loss the gap is not confirmed: info while the rise is recent, warning once the
    val loss has been past its best for at least half the evaluated steps. When a
    validation task metric of the same set (WER, accuracy, F1, ROUGE, …: the metric runs
    select checkpoints on) kept improving after the loss' best, by more than 1 % and its
    noise, and kept most of that gain to the end, the model grows over-confident rather
    than worse at the task (Guo et al. 2017, "On Calibration of Modern Neural Networks":
    NLL overfits while the error keeps falling): warning at most, naming that metric.
    With only 3–4 evaluations (a fine-tune of a few epochs) there is no noise guard to
    apply: a val loss higher at each evaluation after its best, 10 % or more above it at
    the end, while the train loss fell, is info, naming the checkpoint to keep (a BERT
    run of three epochs: 0.318, 0.320, 0.443).

    VAL006 is judged as VAL001 judges a loss, turned so that up is better: the level
    around the best (the median of five from 20 evaluations on), the mean of the last
    ``tail`` = 3 evaluations, a fall past both ``min_rise`` = 2 % of the best and
    ``noise_k`` = 3 × the evaluation noise before it, and at least ``min_after`` = 3
    evaluations after the best that far below it (one bad evaluation is no regression).
    Warning; error from ``error_rise`` = 10 %. No train loss is asked for: a task metric
    that fell is a worse model whatever the loss did (CF-ViT's log.txt: top-1 77.8 %
    at epoch 199, 65.0 % at epoch 299 after a loss spike at 201). With a validation loss
    logged, VAL001 judges the run, and its task metrics temper it as above.

Known false positives
    A deliberate change of the validation set mid-run; validation on a tiny set, whose
    noise is larger than the guard estimates from few points; schedules that raise the
    LR again (cyclic), which lift val and train loss together (not flagged when train
    rises too). VAL006: a second training stage that trades the metric away by design
    (say so with ``ignore = ["VAL006"]``); a metric of a set that was changed mid-run.

Example
    ``ERROR  VAL001  steps 4–25  val/loss rose 95.2% from its best 0.7876 at step 4 to
    1.538 (the mean of the last 3 evaluations; 1.519 at step 25) while train/loss fell
    0.35 (0.4163 → 0.06616); keep the step-4 checkpoint.`` (a Keras CSVLogger file)

    On real logs: Althea80's Keras CSVLogger (best 0.788 at epoch 3), fabiom91's ConvNeXt
    trainer_state.json (best 0.922 at step 1280) and each of aigoncharov's six eval sets
    (`eval_g0_loss` best 1.114 at step 401, 2.749 at 12030) are errors; law-llm's falling
    eval_loss and the Megatron-DeepSpeed MoE log's falling validation are silent.

    ``ERROR  VAL006  steps 199–299  val/384_acc1 fell from its best 77.82 at step 199 to
    64.94 (the mean of the last 3 evaluations; 65.04 at step 299), 16.3% worse, and 99 of
    the 100 evaluations after the best stayed worse than it by more than their noise: the
    last checkpoint is not the best; keep the step-199 checkpoint.`` (DeiT's log.txt of a
    CF-ViT run)
"""

from __future__ import annotations

import re

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.findings import Finding
from trainlens.core.run import Run
from trainlens.core.stats import MAD_TO_SIGMA, theil_sen
from trainlens.detectors.base import Context, Skip, finding

CODES = {"VAL001": "val-train-divergence", "VAL006": "val-metric-regression"}


@dataclass(frozen=True)
class Params:
    min_evals: int = 5
    min_after: int = 3
    min_rise: float = 0.02
    noise_k: float = 3.0
    error_rise: float = 0.10
    tail: int = 3


def _noise(v: np.ndarray) -> float:
    if v.size < 3:
        return 0.0
    d = np.diff(v)
    return float(np.median(np.abs(d - np.median(d))) * MAD_TO_SIGMA / np.sqrt(2))


def _noise_before(v: np.ndarray, best: int) -> float | None:
    """The eval noise seen before the best evaluation: the robust scale of the second
    differences of the last ``_BEFORE`` evaluations up to the best (MAD × 1.4826 / √6; a
    smooth descent's curvature drops out, as its steady fall does not from first
    differences). None with fewer than five of them: too few to say."""
    seg = v[max(0, best + 1 - _BEFORE) : best + 1]
    if seg.size < 5:
        return None
    d2 = np.diff(seg, 2)
    return float(np.median(np.abs(d2 - np.median(d2))) * MAD_TO_SIGMA / np.sqrt(6))


#: evaluations before the best that give the eval noise to judge the ones after it by
_BEFORE = 8
#: from this many evaluations on, the best level is the median of the five around the
#: lowest (a lucky low among many noisy evaluations is no turning point); below it the
#: lowest value stands, as it does when the trainer kept it as its best checkpoint
_MANY_EVALS = 20
_CKPT_STEP = re.compile(r"checkpoint-(\d+)/*$")


def trainer_best(run: Run, metric: str, s: np.ndarray, v: np.ndarray) -> tuple[int, str] | None:
    """(step, path) of the trainer's own best checkpoint when it was chosen by ``metric``:
    HF's ``best_model_checkpoint`` (``…/checkpoint-800``) at a step where ``metric`` is the
    recorded ``best_metric``. None when the run records none, or chose by another metric."""
    path, best = run.metadata.get("best_model_checkpoint"), run.metadata.get("best_metric")
    if not isinstance(path, str) or not isinstance(best, (int, float)):
        return None
    m = _CKPT_STEP.search(path)
    if m is None:
        return None
    step = int(m.group(1))
    at = np.flatnonzero(s == step)
    if at.size == 0 or not np.isclose(float(v[at[0]]), float(best), rtol=1e-6, atol=1e-12):
        return None
    return step, path


def _noise2(v: np.ndarray) -> float:
    """The noise of a series as the robust scale of its second differences (MAD × 1.4826
    / √6): a trend, steady or turning, drops out, where first differences count a steep
    early fall as noise (a 7-epoch Keras log: 1.54 → 0.81 → 0.71 made the guard 0.19)."""
    if v.size < 4:
        return _noise(v)
    d2 = np.diff(v, 2)
    return float(np.median(np.abs(d2 - np.median(d2))) * MAD_TO_SIGMA / np.sqrt(6))


def _train_change(run: Run, start: int, end: int) -> tuple[float, float] | None:
    """Smoothed train loss at ``start`` and at ``end`` (medians of nearby points)."""
    if not run.has("train/loss"):
        return None
    s, v = run.series("train/loss", finite=True)
    if v.size < 4:
        return None
    span = max(end - start, 1)
    w = max(span // 10, 1)
    before = v[(s >= start - w) & (s <= start + w)]
    after = v[(s >= end - 2 * w) & (s <= end)]
    if before.size == 0 or after.size == 0:
        return None
    return float(np.median(before)), float(np.median(after))


# A validation loss, by its canonical name: ``val/loss`` and ``val/loss/<domain>`` (the
# alias table makes the HF Trainer's per-set ``eval_<set>_loss`` one of these, so a
# trainer_state.json with ``eval_g0_loss`` … ``eval_g5_loss`` and no ``eval_loss`` is judged
# per set too).
_VAL_LOSS = re.compile(r"^val/loss(?:/(?P<domain>.+))?$")


def val_losses(metrics: list[str]) -> dict[str, str | None]:
    """The validation-loss metrics of a run, each with its domain (None for the pooled
    ``val/loss``)."""
    out: dict[str, str | None] = {}
    for m in metrics:
        hit = _VAL_LOSS.match(m)
        if hit:
            out[m] = hit.group("domain")
    return out


# validation task metrics and which way is better: the metric a run selects checkpoints on
# (HF's metric_for_best_model is wer, accuracy, f1, rouge… far more often than the loss)
_HIGHER = re.compile(
    r"acc|f1|bleu|rouge|auc|precision|recall|exact_match|matthews|mcc|iou|dice|meteor|top\d"
)
_LOWER = re.compile(r"^(wer|cer|ter|error|err|perplexity|ppl|mae|mse|rmse)$")


def _task_metrics(metrics: list[str], domain: str | None) -> dict[str, bool]:
    """The run's validation task metrics for ``domain`` (None: the pooled set), each with
    whether higher is better: ``val/<m>`` for the pooled loss, ``val/<m>/<d>`` or
    ``val/<d>_<m>`` (HF's ``eval_<set>_<m>``) for domain ``d``."""
    out: dict[str, bool] = {}
    for m in metrics:
        parts = m.split("/")
        if parts[0] != "val" or len(parts) < 2 or parts[1] == "loss":
            continue
        if domain is None:
            name = parts[1] if len(parts) == 2 else None
        elif len(parts) == 3 and parts[2] == domain:
            name = parts[1]
        elif len(parts) == 2 and parts[1].startswith(domain + "_"):
            name = parts[1][len(domain) + 1 :]
        else:
            name = None
        if name is None:
            continue
        if _LOWER.match(name):
            out[m] = False
        elif _HIGHER.search(name):
            out[m] = True
    return out


def _task_still_improved(run: Run, domain: str | None, best_step: int) -> tuple[str, str] | None:
    """A validation task metric that kept improving after the loss' best evaluation (by
    more than 1 % and more than its own noise) and kept most of that gain to the end
    (the mean of its last three evaluations): the loss rises because the model grows
    over-confident on what it gets wrong, while it gets more right (Whisper fine-tunes:
    eval loss 0.31 -> 0.47 while WER falls 34.6 -> 32.0). (metric, words for the message),
    or None."""
    for m, higher in _task_metrics(run.metrics, domain).items():
        s, v = run.series(m, finite=True)
        at = np.flatnonzero(s == best_step)
        if at.size == 0 or v.size < 3:
            continue
        ref = float(v[at[0]])
        sign = 1.0 if higher else -1.0
        later = sign * (v[s > best_step] - ref)
        if later.size == 0:
            continue
        k = int(np.argmax(later))
        gain = float(later[k])
        # ... and keeping most of that gain at the end: a task metric that peaked and fell
        # back (aigoncharov g4: accuracy 0.244 -> 0.332 at epoch 4, 0.272 at epoch 30) is
        # overfitting all the same
        end = sign * (float(np.mean(v[-min(3, v.size) :])) - ref)
        if gain > max(0.01 * abs(ref), _noise(v)) and end > 0.5 * gain:
            val = float(v[s > best_step][k])
            step = int(s[s > best_step][k])
            return m, (
                f"but {m} kept improving, to its best {val:.4g} at step {step} ({ref:.4g} "
                f"at step {best_step}, {float(v[-1]):.4g} at the end): the model grows "
                "over-confident rather than worse at the task — keep the checkpoint best on "
                "the metric you select on"
            )
    return None


def _severity(rise_rel: float, train_known: bool, share_after: float, p: Params) -> str:
    """error past ``error_rise``, else warning. Without a train loss the gap is not
    confirmed, so at most a warning — and info only while the rise is short: a val loss
    that has risen for most of the run since its best (``share_after`` ≥ ½ of the
    evaluated steps) is a problem whatever the train loss did."""
    if not train_known:
        return "warning" if share_after >= 0.5 else "info"
    return "error" if rise_rel >= p.error_rise else "warning"


def detect(run: Run, params: Params, ctx: Context) -> list[Finding]:
    metrics = val_losses(run.metrics)
    if not metrics:
        tasks = _task_metrics(run.metrics, None)
        if not tasks:
            raise Skip(
                "needs val/loss or a validation task metric (val/accuracy, val/f1, …), not logged"
            )
        found = (_regression(run, m, higher, params) for m, higher in tasks.items())
        return [f for f in found if f is not None]
    out: list[Finding] = []
    for metric, domain in metrics.items():
        f = _judge(run, metric, domain, params)
        if f is not None:
            out.append(f)
    return out


def _judge(run: Run, metric: str, domain: str | None, params: Params) -> Finding | None:
    s, v = run.series(metric, finite=True)
    if v.size < params.min_evals:
        return _few(run, metric, domain, s, v, params)
    best = int(np.argmin(v))
    kept = trainer_best(run, metric, s, v)
    if kept is not None:
        best = int(np.flatnonzero(s == kept[0])[0])  # the trainer's own best checkpoint
    after = v[best + 1 :]
    if after.size < params.min_after:
        return None
    best_v = float(v[best])
    tail_n = min(params.tail, after.size)
    tail_mean = float(after[-tail_n:].mean())
    # whether it rose is judged from the level around the best evaluation, not from the
    # single lowest one: among thousands of noisy evaluations the lowest is an outlier,
    # and every later evaluation would look like a rise from it. With few evaluations,
    # or the trainer's own best, the lowest stands: the median of five around it took in
    # two of the risen ones (an HF run: best 0.232, then 0.25-0.30 for seven evals)
    many = v.size >= _MANY_EVALS and kept is None
    best_level = float(np.median(v[max(best - 2, 0) : best + 3])) if many else best_v
    rise = tail_mean - best_level
    rel_level = rise / max(abs(best_level), 1e-12)
    # the evals after the best are judged against the eval noise seen before it: the
    # noise of the whole series counts the rise itself, and the swings after the best
    # (0.25 <-> 0.30) absorbed a +24 % rise
    before = _noise_before(v, best)
    noise = before if before is not None else min(_noise(v), _noise2(v))
    # Prechelt's UP_s: an eval loss that rose at each of the ``min_after`` evaluations
    # after the best is a turning point whatever the noise (three successive rises by
    # chance: 1 in 8 at most, and each must add to the rise)
    ups = bool(np.all(np.diff(v[best : best + params.min_after + 1]) > 0))
    if rel_level < params.min_rise or (rise < params.noise_k * noise and not ups):
        return None
    slope = theil_sen(np.r_[best_v, after], np.r_[s[best], s[best + 1 :]]).slope
    if not slope > 0:
        return None
    train = _train_change(run, int(s[best]), int(s[-1]))
    if train is not None:
        t0, t1 = train
        if not t1 < t0:
            return None  # train rose too: not a generalization gap (LR restart, divergence)
        train_text = f"while train/loss fell {t0 - t1:.3g} ({t0:.4g} → {t1:.4g})"
    else:
        train_text = "(train/loss not logged, so the gap is not confirmed)"
    # the percent the message prints is measured from the best value it names
    rise_rel = (tail_mean - best_v) / max(abs(best_v), 1e-12)
    span = float(s[-1] - s[0])
    share_after = float(s[-1] - s[best]) / span if span > 0 else 0.0
    severity = _severity(rel_level, train is not None, share_after, params)
    last = "the last evaluation" if tail_n == 1 else f"the mean of the last {tail_n} evaluations"
    task = _task_still_improved(run, domain, int(s[best]))
    if task is not None and severity == "error":
        severity = "warning"  # the task metric says the model still got better
    if task is not None:
        advice = task[1]
    elif kept is not None:
        advice = f"keep {kept[1]} (the trainer's best_model_checkpoint, step {kept[0]})"
    else:
        advice = f"keep the step-{int(s[best])} checkpoint"
    return finding(
        "VAL001",
        CODES["VAL001"],
        severity,
        f"{metric} rose {rise_rel:.1%} from its best {best_v:.4g} at step {int(s[best])} "
        f"to {tail_mean:.4g} ({last}; {v[-1]:.4g} at step {int(s[-1])}) {train_text}; "
        f"{advice}.",
        metric=metric,
        step_start=int(s[best]),
        step_end=int(s[-1]),
        domain=domain,
        best_step=int(s[best]),
        best_val=best_v,
        best_level=best_level,
        tail_mean=tail_mean,
        final_val=float(v[-1]),
        rise=tail_mean - best_v,
        rise_rel=rise_rel,
        rise_rel_level=rel_level,
        share_after_best=share_after,
        eval_noise=noise,
        noise_from="before-best" if before is not None else "all-evals",
        rose_each_eval=ups,
        best_checkpoint=kept[1] if kept is not None else None,
        train_at_best=train[0] if train else None,
        train_final=train[1] if train else None,
        gap_at_best=(best_v - train[0]) if train else None,
        gap_final=(tail_mean - train[1]) if train else None,
        task_metric_improving=task[0] if task else None,
    )


def _few(
    run: Run, metric: str, domain: str | None, s: np.ndarray, v: np.ndarray, p: Params
) -> Finding | None:
    """A fine-tune evaluated only 3-4 times (a BERT run of three epochs: 0.318, 0.320,
    0.443 while its train loss fell 0.39 -> 0.11) has too few evaluations for a noise
    guard; a val loss higher at each evaluation after its best, by ``error_rise`` or more
    at the end, while the train loss fell, is still worth a note: info, naming the
    checkpoint to keep."""
    if v.size < 3:
        return None
    best = int(np.argmin(v))
    after = v[best + 1 :]
    best_v, last = float(v[best]), float(v[-1])
    rise_rel = (last - best_v) / max(abs(best_v), 1e-12)
    if after.size < 2 or not bool(np.all(np.diff(v[best:]) > 0)) or rise_rel < p.error_rise:
        return None
    if not run.has("train/loss"):
        return None
    ts, tv = run.series("train/loss", finite=True)
    at = (ts >= s[best]) & (ts <= s[-1])  # (few points: the values themselves)
    if at.sum() < 2 or not tv[at][-1] < tv[at][0]:
        return None
    t0, t1 = float(tv[at][0]), float(tv[at][-1])
    return finding(
        "VAL001",
        CODES["VAL001"],
        "info",
        f"{metric} rose {rise_rel:.1%} from its best {best_v:.4g} at step {int(s[best])} "
        f"to {last:.4g} at step {int(s[-1])}, higher at each of the {after.size} evaluations "
        f"after it, while train/loss fell {t0 - t1:.3g} ({t0:.4g} → {t1:.4g}); only "
        f"{v.size} evaluations, too few to measure their noise: keep the step-{int(s[best])} "
        "checkpoint.",
        metric=metric,
        step_start=int(s[best]),
        step_end=int(s[-1]),
        domain=domain,
        best_step=int(s[best]),
        best_val=best_v,
        final_val=last,
        rise_rel=rise_rel,
        rose_each_eval=True,
        few_evaluations=int(v.size),
        train_at_best=t0,
        train_final=t1,
    )


def _regression(run: Run, metric: str, higher: bool, params: Params) -> Finding | None:
    """VAL006: a validation task metric (no validation loss logged) that ended clearly
    worse than its best evaluation and stayed there: judged as VAL001 judges a loss (the
    level around the best, the mean of the last ``tail`` evaluations, ``min_rise`` of the
    best and ``noise_k`` × the noise seen before it), turned so that up is better; and at
    least ``min_after`` evaluations after the best are that far below it (one bad
    evaluation is no regression)."""
    s, raw = run.series(metric, finite=True)
    if raw.size < params.min_evals:
        return None
    sign = 1.0 if higher else -1.0
    v = sign * raw
    best = int(np.argmax(v))
    after = v[best + 1 :]
    if after.size < params.min_after:
        return None
    many = v.size >= _MANY_EVALS
    best_level = float(np.median(v[max(best - 2, 0) : best + 3])) if many else float(v[best])
    tail_n = min(params.tail, after.size)
    tail_mean = float(after[-tail_n:].mean())
    drop = best_level - tail_mean
    rel = drop / max(abs(best_level), 1e-12)
    before = _noise_before(v, best)
    noise = before if before is not None else min(_noise(v), _noise2(v))
    bar = max(params.min_rise * abs(best_level), params.noise_k * noise)
    below = int(np.sum(after < best_level - bar))
    if drop <= bar or below < params.min_after:
        return None
    best_raw, tail_raw = float(raw[best]), sign * tail_mean
    severity = "error" if rel >= params.error_rise else "warning"
    way = "fell" if higher else "rose"
    last = "the last evaluation" if tail_n == 1 else f"the mean of the last {tail_n} evaluations"
    return finding(
        "VAL006",
        CODES["VAL006"],
        severity,
        f"{metric} {way} from its best {best_raw:.4g} at step {int(s[best])} to "
        f"{tail_raw:.4g} ({last}; {float(raw[-1]):.4g} at step {int(s[-1])}), {rel:.1%} "
        f"worse, and {below} of the {after.size} evaluations after the best stayed worse "
        f"than it by more than their noise: the last checkpoint is not the best; keep the "
        f"step-{int(s[best])} checkpoint.",
        metric=metric,
        step_start=int(s[best]),
        step_end=int(s[-1]),
        best_step=int(s[best]),
        best_val=best_raw,
        best_level=sign * best_level,
        tail_mean=tail_raw,
        final_val=float(raw[-1]),
        drop_rel=rel,
        higher_is_better=higher,
        evals_after_best=int(after.size),
        evals_below=below,
        eval_noise=noise,
        noise_from="before-best" if before is not None else "all-evals",
    )
