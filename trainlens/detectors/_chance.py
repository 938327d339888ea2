"""Whether a run's accuracy ever left chance: the helper LOSS002 and LOSS004 ask.

An accuracy that stays at 0, or at 1 / k while the loss sits at ln k (a k-class
classifier that predicts the uniform distribution: its cross-entropy is ln k and its
accuracy 1 / k), says the model learned nothing whatever a tiny slope of the loss says.
An accuracy that clearly rose says it did learn, whatever the loss does.
"""

from __future__ import annotations

import math
import re

import numpy as np

from trainlens.core.dataclass import dataclass
from trainlens.core.run import Run
from trainlens.core.units import loss_parts

# accuracy-like metrics, by their canonical names (train/accuracy, val/accuracy,
# val/accuracy/<set>, val/<set>_accuracy, train/acc, top1 …); validation first: it is
# what a run is judged on
# (words may be apart by a space and capitalised as a text log prints them: `Token Acc`)
_ACCURACY = re.compile(
    r"(?:^|[/_ ])(?:acc|accuracy|top1|top_1|acc1|acc_top1)(?:$|[/_ ])", re.IGNORECASE
)
_NOT = re.compile(r"balanced|_vs_|loss|err", re.IGNORECASE)

#: an accuracy that never rose this much (absolute, as a fraction) above where it
#: started, nor 3 of its noise sigmas, did not improve
MIN_GAIN = 0.02
#: an accuracy at most this (as a fraction) is "at 0"
ZERO = 1e-6
#: the loss lies within this share of ln k, and the accuracy's mean within this share
#: of 1 / k or ``CHANCE_ABS`` of it (a small eval set: 40 samples give ±0.05 at k = 10)
CHANCE_TOL = 0.10
CHANCE_ABS = 0.05
#: accuracy values needed to judge
MIN_VALUES = 5


@dataclass(frozen=True)
class Accuracy:
    """What an accuracy-like metric did from ``since`` on."""

    metric: str
    first_step: int
    last_step: int
    start: float  # median of its first three values (as a fraction)
    best: float
    end: float
    improved: bool
    #: 0.0 when it stayed at 0, 1 / k when it stayed at k-class chance, None otherwise
    chance: float | None
    classes: int | None

    @property
    def words(self) -> str:
        where = f"steps {self.first_step}–{self.last_step}"
        if self.chance == 0.0:
            return f"{self.metric} stayed at 0 ({where})"
        return (
            f"{self.metric} stayed at {self.end:.3g}, the chance level of {self.classes} "
            f"classes ({where})"
        )


def accuracy_metrics(metrics: list[str]) -> list[str]:
    """The run's accuracy-like metrics, validation ones first."""
    found = [m for m in metrics if _ACCURACY.search(m) and not _NOT.search(m)]
    return sorted(found, key=lambda m: (not m.startswith("val"), m))


def _noise(v: np.ndarray) -> float:
    d = np.diff(v)
    if d.size < 3:
        return 0.0
    return float(np.median(np.abs(d - np.median(d)))) * 1.4826 / math.sqrt(2)


def judge(run: Run, metric: str, since: int, loss_level: float | None) -> Accuracy | None:
    """What ``metric`` did from step ``since`` on (all of it when too little is left
    there); ``loss_level`` is the loss' early level, for the ln k check (None: the loss
    is no single cross-entropy, so no ln k). None when it has too few values or does not
    read as a fraction or a percentage."""
    s, v = run.series(metric, finite=True)
    if (s >= since).sum() >= MIN_VALUES:
        s, v = s[s >= since], v[s >= since]
    if v.size < MIN_VALUES or v.min() < 0:
        return None
    if v.max() > 1.0:
        if v.max() > 100.0:
            return None
        v = v / 100.0  # a percentage
    # levels, not single values: a per-batch accuracy of 16 samples moves in steps of 1/16
    seg = max(3, v.size // 10)
    start, best, end = float(np.median(v[:seg])), float(v.max()), float(np.median(v[-seg:]))
    improved = end - start > max(MIN_GAIN, 3 * _noise(v) / math.sqrt(seg))
    chance: float | None = None
    classes: int | None = None
    if not improved:
        if best <= ZERO:
            chance = 0.0
        elif loss_level is not None and 0.5 < loss_level < 14.0:  # ln 2 … ln 1.2M: k classes
            k = round(math.exp(loss_level))
            mean = float(v.mean())
            if (
                abs(loss_level - math.log(k)) <= CHANCE_TOL * math.log(k)
                and abs(mean - 1.0 / k) <= max(CHANCE_TOL / k, CHANCE_ABS)
                and end <= 1.0 / k + max(CHANCE_TOL / k, CHANCE_ABS)
            ):
                chance, classes = 1.0 / k, k
    return Accuracy(metric, int(s[0]), int(s[-1]), start, best, end, improved, chance, classes)


def _level(run: Run, metric: str) -> float | None:
    """The median of a loss over the run: where a model at chance keeps it (ln k)."""
    if not run.has(metric):
        return None
    _, v = run.series(metric, finite=True)
    return float(np.median(v)) if v.size else None


def accuracies(run: Run, since: int, loss_level: float) -> list[Accuracy]:
    """Every accuracy-like metric the run logs, judged from ``since`` on; a validation
    accuracy against the validation loss' median for the ln k check (when logged), a
    training one against ``loss_level`` (the train loss' early level)."""
    val_level = _level(run, "val/loss")
    # a loss that is the sum of several parts (a detector's total_loss: classification,
    # box regression, masks …) is no cross-entropy over the classes an accuracy counts:
    # its level says nothing of k (detectron2's total 1.83 read as ln 6 made a detection
    # head's fg_cls_accuracy "at the chance of 6 classes")
    summed = len(loss_parts(n for m, n in run.raw_names.items() if m != "train/loss")) >= 2
    out = []
    for m in accuracy_metrics(run.metrics):
        level: float | None = (
            val_level if m.startswith("val") and val_level is not None else loss_level
        )
        if summed:
            level = None
        a = judge(run, m, since, level)
        if a is not None:
            out.append(a)
    return out


# validation task metrics whose chance level is 0: a detector's or segmenter's AP, mAP,
# mIoU, PQ (detectron2's val/bbox/AP, MMDetection's val/coco/bbox_mAP, YOLO's mAP50(B))
_TASK = re.compile(r"^val/(?:.*[/_])?(?:AP|mAP|bbox_mAP|segm_mAP|mIoU|PQ)(?:50|_50)?(?:\(.\))?$")
#: the first evaluation of such a metric at least this far (as a fraction) above 0
TRAINED_AT = 0.05


@dataclass(frozen=True)
class TrainedStart:
    """A task metric already well above chance at the run's first evaluation."""

    metric: str
    step: int
    first: float  # as logged
    last: float

    @property
    def words(self) -> str:
        return (
            f"but {self.metric} was already {self.first:.3g} at its first evaluation (step "
            f"{self.step}; chance is 0) and {self.last:.3g} at its last: the model started "
            "trained (a continued run, or a fine-tune from a trained detector), where a flat "
            "loss is what converged training shows"
        )


def started_trained(run: Run, since: int) -> TrainedStart | None:
    """A validation task metric with chance 0 whose first evaluation at or after ``since``
    is already ``TRAINED_AT`` above 0 and that did not fall after it: a model that did
    not start from scratch (a fine-tune of a trained detector from its checkpoint: AP 14.8
    at iteration 999, its loss flat at 0.15 from the first logged iteration)."""
    for m in run.metrics:
        if not _TASK.match(m):
            continue
        s, v = run.series(m, finite=True)
        keep = s >= since
        s, v = s[keep], v[keep]
        if v.size == 0 or v.min() < 0 or v.max() > 100.0:
            continue
        scale = 100.0 if v.max() > 1.0 else 1.0
        first, last = float(v[0]), float(v[-1])
        if first / scale >= TRAINED_AT and last >= 0.9 * first:
            return TrainedStart(m, int(s[0]), first, last)
    return None
