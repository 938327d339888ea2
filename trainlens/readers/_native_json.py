"""Frameworks' own JSON-lines logs: which framework wrote a file, and how to read it.

The JSONL reader reads any file of JSON objects; this module tells, from the columns
(never the file name alone), when one was written by a framework whose fields mean
something the generic rules would get wrong, and says how to read it:

| framework | file | what the generic rules got wrong |
|---|---|---|
| detectron2 | ``metrics.json`` (``JSONWriter``) | ``time`` (seconds per iteration) taken for a wall clock: DATA004 then read ``data_time`` against noise and said "waited for data 100 %"; ``total_loss`` not the train loss |
| MMEngine (MMDetection, MMPretrain, …) | ``vis_data/scalars.json``, ``vis_data/<timestamp>.json`` (``LocalVisBackend`` via ``LoggerHook``) | validation lines logged at ``step`` = epoch among training lines logged at the iteration; ``memory`` in MB |
| MMCV 1.x (MMDetection 2.x, …) | ``<timestamp>.log.json`` (``TextLoggerHook``) | ``iter`` restarts every epoch; ``mode`` train/val lines interleaved; ``memory`` in MB |
| LLaMA-Factory | ``trainer_log.jsonl`` (``LogCallback``) | the step is ``current_steps``; ``elapsed_time`` is ``H:MM:SS`` text |
| Ray Tune | ``result.json`` (``JsonLoggerCallback``) | the step is ``training_iteration``; ``pid``, ``done``, ``config/…`` are no metrics |

Each layout's reading is told in an info note (``DataIssue`` kind ``framework``) and
``Run.metadata["framework"]``. Units of metrics any framework logs (ms or s, MB or
bytes, percent or fraction) are decided afterwards for every format by
:mod:`trainlens.core.units`.
"""  # noqa: E501  (tables: one row a line)

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.core.names import Alias, AliasTable
from trainlens.core.run import DataIssue
from trainlens.readers import _coco, _step_rule
from trainlens.readers._step_rule import StepGuess
from trainlens.readers._wide import STEP_KEYS, find_key, wide_to_long

MIB = float(1 << 20)


def _keep_case(names: list[str], aliases: dict[str, Alias]) -> dict[str, Alias]:
    """``aliases`` with an identity alias for each name the table would only lower-case
    (``val/bbox/AP`` is no ``val/bbox/ap``: a split folder's rest is looked up folded)."""
    table = AliasTable()
    out = dict(aliases)
    for n in names:
        hit = table.lookup(n)
        if hit is not None and hit.canonical != n and hit.canonical == n.lower():
            out.setdefault(n, Alias(n))
    return out


def _is_clock(df: pl.DataFrame, col: str) -> bool:
    """``col`` holds timestamps (seconds since 1970: a median past 1e8, i.e. 1973), not
    seconds per iteration."""
    if col not in df.columns or not df.schema[col].is_numeric():
        return False
    med = df.get_column(col).cast(pl.Float64).median()
    return isinstance(med, float) and med > 1e8


def _cols(df: pl.DataFrame) -> set[str]:
    return {c for c in df.columns if c != "_line"}


@dataclass
class Layout:
    """How a recognised file is read: its frame (rows and columns as adapted), which
    columns are the step and the wall clock, the framework's own aliases, and notes."""

    framework: str
    df: pl.DataFrame
    step_key: str | None = None
    time_key: str | None = None
    no_wall_time: bool = False
    aliases: dict[str, Alias] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    metadata: dict[str, object] = field(default_factory=dict)

    def issues(self, source: str) -> list[DataIssue]:
        return [
            DataIssue(kind="framework", source=source, message=n, severity="info")
            for n in self.notes
        ]


# ---- detectron2 ---------------------------------------------------------------------------

# evaluation results detectron2's trainer puts in the same storage (``DatasetEvaluators``
# name them <task>/<metric>: bbox/AP, segm/AP50, sem_seg/mIoU, panoptic_seg/PQ)
_D2_EVAL = _coco.EVAL


def _detectron2(df: pl.DataFrame, path: Path) -> Layout | None:
    cols = _cols(df)
    if "iteration" not in cols or "step" in cols:
        return None
    if _is_clock(df, "time"):
        return None
    trains = "total_loss" in cols or "eta_seconds" in cols
    evals = any(_D2_EVAL.match(c) for c in cols)
    if not (trains and ("time" in cols or "data_time" in cols)) and not (
        evals and cols - {"iteration"} <= {c for c in cols if _D2_EVAL.match(c)}
    ):
        return None
    renames = {c: f"val/{c}" for c in df.columns if _D2_EVAL.match(c)}
    # COCOeval gives -1 where no ground truth fits (no small objects: APs), which
    # detectron2 writes as NaN: not a value gone bad, no value at all
    texts = [c for c in renames if df.schema[c] == pl.String]  # ("nan": the NaN token swapped)
    df = df.with_columns(
        [pl.col(c).str.strip_chars().cast(pl.Float64, strict=False) for c in texts]
    )
    floats = [c for c in renames if df.schema[c] == pl.Float64]
    n_nan = sum(int(df.get_column(c).is_nan().sum()) for c in floats)
    if n_nan:
        df = df.with_columns([pl.col(c).fill_nan(None) for c in floats])
    df = df.rename(renames)
    parts = sorted(c for c in cols if c.startswith("loss_"))
    notes = [
        "read as detectron2's metrics.json (JSONWriter): `iteration` is the step; "
        "`time` and `data_time` are seconds per iteration (detectron2's medians over "
        "its 20-iteration window), not a wall clock — the file has none"
    ]
    if "total_loss" in cols:
        notes.append(
            "`total_loss` is the train loss"
            + (
                f" (the sum of its {len(parts)} parts {', '.join(parts[:6])}"
                f"{'…' if len(parts) > 6 else ''}, kept under their own names)"
                if parts
                else ""
            )
        )
    if renames:
        notes.append(
            f"{len(renames)} evaluation result(s) (bbox/AP, …; detectron2 writes them in "
            "percent) read as val/<name>" + (f"; {_coco.undefined_note(n_nan)}" if n_nan else "")
        )
    return Layout(
        "detectron2",
        df,
        step_key="iteration",
        no_wall_time=True,
        aliases=_keep_case(
            list(renames.values()),
            {
                "total_loss": Alias("train/loss"),
                "time": Alias("step_time"),
                "data_time": Alias("dataloader_wait"),
            },
        ),
        notes=notes,
    )


# ---- MMEngine (LocalVisBackend) and MMCV 1.x (TextLoggerHook) -----------------------------

_MM_ALIASES = {
    "time": Alias("step_time"),
    "data_time": Alias("dataloader_wait"),
    "memory": Alias("mem/allocated", MIB),  # MMEngine/MMCV: max allocated, in MB
}
_MM_TRAIN_KEYS = ("loss", "lr", "base_lr", "grad_norm")


def _val_columns(df: pl.DataFrame, is_val: pl.Series, keep: set[str]) -> pl.DataFrame:
    """Validation rows' values moved to ``val/<name>`` columns (a name that both kinds of
    row use, like ``data_time``, is split in two), so a val line's timings are never
    read as the training loop's."""
    exprs: list[pl.Expr] = []
    out_names: list[str] = []
    for c in df.columns:
        if c in keep or c == "_line":
            exprs.append(pl.col(c))
            out_names.append(c)
            continue
        in_val = df.get_column(c).filter(is_val).null_count() < int(is_val.sum())
        in_train = df.get_column(c).filter(~is_val).null_count() < int((~is_val).sum())
        name = c if c.startswith("val/") else f"val/{c}"
        if in_val and not in_train:
            exprs.append(pl.col(c).alias(name))
            out_names.append(name)
        elif in_val:
            exprs.append(pl.when(is_val).then(None).otherwise(pl.col(c)).alias(c))
            exprs.append(pl.when(is_val).then(pl.col(c)).otherwise(None).alias(name))
            out_names += [c, name]
        else:
            exprs.append(pl.col(c))
            out_names.append(c)
    return df.select(exprs)


def _after_train_step(step: pl.Series, is_val: pl.Series) -> pl.Series:
    """Each validation row's step: the step of the training row before it (0 before any)."""
    frame = pl.DataFrame({"s": step, "v": is_val})
    return frame.select(
        pl.when(pl.col("v"))
        .then(pl.when(~pl.col("v")).then(pl.col("s")).forward_fill().fill_null(0))
        .otherwise(pl.col("s"))
        .alias(step.name)
    ).to_series()


def _loss_parts_note(cols: set[str]) -> list[str]:
    parts = sorted(c for c in cols if c.startswith("loss_") or re.match(r"^\w+\.loss_", c))
    if "loss" in cols and parts:
        return [
            f"`loss` is the train loss: the total of its {len(parts)} parts "
            f"({', '.join(parts[:6])}{'…' if len(parts) > 6 else ''}, kept under their own names)"
        ]
    return []


def _mmengine(df: pl.DataFrame, path: Path) -> Layout | None:
    cols = _cols(df)
    by_layout = path.parent.name == "vis_data"
    if "step" not in cols or "mode" in cols:
        return None
    if not (by_layout or {"data_time", "time"} <= cols):
        return None
    train_like = [c for c in _MM_TRAIN_KEYS if c in cols]
    if not train_like:
        return None
    if _is_clock(df, "time"):
        return None  # a hand-rolled log's `time` that is a timestamp: not MMEngine's
    is_val = df.select(pl.all_horizontal([pl.col(c).is_null() for c in train_like])).to_series()
    n_val = int(is_val.sum())
    if "iter" in cols:
        df = df.drop("iter")  # (LoggerHook's iteration again, beside `step`)
    step = df.get_column("step")
    if step.dtype.is_numeric():
        df = df.with_columns(_after_train_step(step, is_val))
    df = _val_columns(df, is_val, keep={"step"}) if n_val else df
    notes = [
        "read as MMEngine's scalars.json (LocalVisBackend, written by LoggerHook): a "
        "training line's `step` is the iteration; `time` and `data_time` are seconds per "
        "iteration; `memory` is the peak allocated memory in MB (read as bytes)"
    ]
    if n_val:
        notes.append(
            f"{n_val} validation line(s) (logged at step = epoch when by epoch) placed at the "
            "iteration they followed and read as val/<name>"
        )
    notes += _loss_parts_note(cols)
    aliases = _keep_case(df.columns, _MM_ALIASES)
    return Layout("mmengine", df, step_key="step", no_wall_time=True, aliases=aliases, notes=notes)


def _mmcv(df: pl.DataFrame, path: Path) -> Layout | None:
    cols = _cols(df)
    if not {"mode", "epoch", "iter"} <= cols or df.schema["mode"] != pl.String:
        return None
    mode = df.get_column("mode")
    modes = set(mode.drop_nulls().unique().to_list())
    if not modes or not modes <= {"train", "val"}:
        return None
    df = df.filter(mode.is_not_null())  # the first line: env_info, config, seed
    is_val = df.get_column("mode") == "val"
    epoch = df.get_column("epoch").cast(pl.Int64, strict=False)
    it = df.get_column("iter").cast(pl.Int64, strict=False)
    train = df.filter(~is_val)
    t_epoch = train.get_column("epoch").cast(pl.Int64, strict=False)
    t_iter = train.get_column("iter").cast(pl.Int64, strict=False)
    notes = [
        "read as an MMCV TextLoggerHook .log.json (MMDetection 2.x and its kin): `mode` "
        "tells training lines from validation lines; `time` and `data_time` are seconds "
        "per iteration; `memory` is the peak allocated memory in MB (read as bytes)"
    ]
    restarts = bool(
        train.height > 1 and ((t_iter.diff() < 0) & (t_epoch.diff() > 0)).fill_null(False).any()
    )
    if restarts:
        per_epoch = int(t_iter.max() or 0)  # type: ignore[arg-type]
        global_it = (epoch - 1).clip(lower_bound=0) * per_epoch + it
        notes.append(
            f"`iter` counts within each epoch: the step is (epoch - 1) × {per_epoch} + iter, "
            f"{per_epoch} being the largest iteration logged in an epoch (the epoch's true "
            "length, not in the file, may be up to one logging interval more)"
        )
    else:
        global_it = it
    df = df.with_columns(global_it.alias("_mm_step"))
    df = df.with_columns(_after_train_step(df.get_column("_mm_step"), is_val))
    # a validation line repeats the training lr and counts its own iterations in `iter`
    df = df.with_columns(
        [
            pl.when(is_val).then(None).otherwise(pl.col(c)).alias(c)
            for c in ("lr", "iter")
            if c in cols
        ]
    )
    df = df.drop("mode")
    if int(is_val.sum()):
        df = _val_columns(df, is_val, keep={"_mm_step", "epoch", "lr", "iter"})
        notes.append(f"{int(is_val.sum())} validation line(s) read as val/<name>")
    notes += _loss_parts_note(cols)
    aliases = _keep_case(df.columns, _MM_ALIASES)
    return Layout("mmcv", df, step_key="_mm_step", no_wall_time=True, aliases=aliases, notes=notes)


# ---- LLaMA-Factory ------------------------------------------------------------------------

_HMS = re.compile(r"^\s*(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)\s*$")


def _seconds(text: pl.Series) -> pl.Series:
    """``H:MM:SS`` (``str(timedelta)``, so also ``1 day, 2:03:04``) as seconds."""
    parts = text.str.extract_groups(_HMS.pattern)
    days = parts.struct.field("1").cast(pl.Float64).fill_null(0.0)
    h = parts.struct.field("2").cast(pl.Float64)
    m = parts.struct.field("3").cast(pl.Float64)
    s = parts.struct.field("4").cast(pl.Float64)
    return (days * 86400 + h * 3600 + m * 60 + s).alias("_elapsed")


def _all_zero(df: pl.DataFrame, col: str) -> bool:
    """Every value of ``col`` (numbers, or their text) is 0."""
    v = df.get_column(col).cast(pl.String).str.strip_chars().cast(pl.Float64, strict=False)
    v = v.drop_nulls()
    return v.len() > 0 and bool((v == 0).all())


def _llamafactory(df: pl.DataFrame, path: Path) -> Layout | None:
    cols = _cols(df)
    if not {"current_steps", "total_steps"} <= cols or not (
        {"percentage", "elapsed_time", "remaining_time"} & cols
    ):
        return None
    time_key = None
    if "elapsed_time" in cols and df.schema["elapsed_time"] == pl.String:
        df = df.with_columns(_seconds(df.get_column("elapsed_time")))
        time_key = "_elapsed"
    total = df.get_column("total_steps").drop_nulls()
    meta: dict[str, object] = {}
    if total.len() and total.dtype.is_numeric():
        meta["total_steps"] = int(total.max())  # type: ignore[arg-type]
    # LogCallback writes 0 for both unless the trainer counts tokens
    # (`include_num_input_tokens_seen`): no measurement, not a stalled job
    uncounted: list[str] = [
        c for c in ("throughput", "total_tokens") if c in cols and _all_zero(df, c)
    ]
    progress = ("total_steps", "percentage", "elapsed_time", "remaining_time")
    df = df.drop([c for c in progress if c in cols] + uncounted)
    notes = [
        "read as LLaMA-Factory's trainer_log.jsonl (LogCallback): `current_steps` is the "
        "step, `elapsed_time` (H:MM:SS since the start) the clock; `throughput` is tokens "
        "per second of the whole job (all ranks' input tokens over the elapsed time), "
        "`total_tokens` the input tokens seen"
    ]
    if uncounted:
        notes.append(
            f"{' and '.join(f'`{c}`' for c in uncounted)} "
            f"{'are' if len(uncounted) > 1 else 'is'} 0 on every line: the trainer "
            "counted no tokens (`include_num_input_tokens_seen` off), so no throughput is read"
        )
    return Layout(
        "llamafactory",
        df,
        step_key="current_steps",
        time_key=time_key,
        no_wall_time=time_key is None,
        aliases={"throughput": Alias("tokens_per_sec"), "total_tokens": Alias("tokens")},
        notes=notes,
        metadata=meta,
    )


# ---- Ray Tune -------------------------------------------------------------------------------

_RAY_BOOKKEEPING = (
    "pid",
    "done",
    "timesteps_total",
    "episodes_total",
    "iterations_since_restore",
    "time_since_restore",
    "timesteps_since_restore",
    "warmup_time",
    "should_checkpoint",
    "training_iteration_since_restore",
    "trial_id",
    "experiment_id",
    "experiment_tag",
    "date",
    "hostname",
    "node_ip",
    "checkpoint_dir_name",
)


def _ray_tune(df: pl.DataFrame, path: Path) -> Layout | None:
    cols = _cols(df)
    if "training_iteration" not in cols or not (
        {"time_this_iter_s", "time_total_s", "trial_id", "iterations_since_restore"} & cols
    ):
        return None
    config_cols = [c for c in df.columns if c.startswith("config/")]
    params: dict[str, object] = {}
    if df.height:
        first = df.row(0, named=True)
        params = {c[len("config/") :]: first[c] for c in config_cols if first[c] is not None}
    df = df.drop([c for c in df.columns if c in _RAY_BOOKKEEPING or c in config_cols])
    notes = [
        "read as a Ray Tune result.json (JsonLoggerCallback): `training_iteration` (one "
        "report of the trainable) is the step, `timestamp` the clock; `time_this_iter_s` "
        "is seconds per report (kept under its name: a report may span many optimizer "
        "steps), `time_total_s` the training time; the trial's bookkeeping fields and its "
        f"config ({len(config_cols)} value(s), kept as parameters) are not metrics"
    ]
    return Layout(
        "ray-tune",
        df,
        step_key="training_iteration",
        time_key="timestamp" if "timestamp" in cols else None,
        no_wall_time="timestamp" not in cols,
        aliases={"time_total_s": Alias("train_time")},
        notes=notes,
        metadata={"params": params} if params else {},
    )


# ---- DETR and the trainers that copy its main.py (Deformable-, Conditional-, DAB-DETR …) -

# pycocotools' `COCOeval.stats` in order, as DETR writes them in `test_coco_eval_bbox`
_COCO_STATS = (
    "AP", "AP50", "AP75", "APs", "APm", "APl", "AR@1", "AR@10", "AR@100", "ARs@100",
    "ARm@100", "ARl@100",
)  # fmt: skip


def _detr(df: pl.DataFrame, path: Path) -> Layout | None:
    """DETR's ``log.txt`` and the trainers whose main.py it was copied from or into (DeiT,
    ConvNeXt, MAE's fine-tuning, CF-ViT …): one line per epoch, ``{**train_stats as
    train_*, **test_stats as test_*, epoch, n_parameters}``. Its ``test_*`` are computed
    on the validation set (``evaluate(data_loader_val, ...)``): read as ``val/<name>``;
    ``train_lr`` is the LR; ``test_coco_eval_bbox`` (COCOeval's 12 stats) is
    ``val/coco/AP``, ``AP50`` … (fractions). Told by its keys: ``epoch``, a ``train_*``
    loss, ``test_*`` results and nothing else but ``n_parameters`` (a test loss or the
    parameter count must be there: a classifier's evaluation may log accuracies only,
    ``test_acc1``, ``test_384_acc1``)."""
    cols = _cols(df) - {"_line"}
    if not {"epoch", "train_loss"} <= cols:
        return None
    rest = cols - {"epoch", "n_parameters"}
    if not all(c.startswith(("train_", "test_")) for c in rest):
        return None
    if not any(c.startswith("test_") for c in rest):
        return None
    if "test_loss" not in cols and "n_parameters" not in cols:
        return None
    renames = {c: f"val/{c[len('test_') :]}" for c in df.columns if c.startswith("test_")}
    out = df
    stats = "test_coco_eval_bbox"
    expanded = 0
    if stats in df.columns and isinstance(df.schema[stats], pl.List):
        col = pl.col(stats)
        out = out.with_columns(
            [
                col.list.get(i, null_on_oob=True).cast(pl.Float64).alias(f"val/coco/{n}")
                for i, n in enumerate(_COCO_STATS)
            ]
        ).drop(stats)
        renames.pop(stats)
        expanded = len(_COCO_STATS)
    out = out.rename(renames).drop([c for c in ("n_parameters",) if c in out.columns])
    detr = expanded or "test_class_error" in cols or "train_loss_bbox" in cols
    writer = "DETR's log.txt" if detr else "the log.txt of DeiT's main.py (DETR's layout)"
    notes = [
        f"read as {writer} (one line per epoch, `epoch` the step): its `test_*` are "
        "the validation set's, read as val/<name>; `train_lr` is the LR"
        + (
            "; test_coco_eval_bbox (COCOeval's 12 stats) as val/coco/AP, AP50, … (fractions)"
            if expanded
            else ""
        )
    ]
    names = [c for c in out.columns if c.startswith("val/")]
    aliases = _keep_case(names, {"train_lr": Alias("lr")})
    name = "detr" if detr else "deit"
    return Layout(name, out, step_key="epoch", no_wall_time=True, aliases=aliases, notes=notes)


_LAYOUTS: tuple[Callable[[pl.DataFrame, Path], Layout | None], ...] = (
    _detr,
    _detectron2,
    _mmcv,
    _mmengine,
    _llamafactory,
    _ray_tune,
)


def recognise(df: pl.DataFrame, path: Path) -> Layout | None:
    """The layout of the framework that wrote ``df`` (a JSONL file's wide frame), if any."""
    for layout in _LAYOUTS:
        found = layout(df, path)
        if found is not None:
            return found
    return None


@dataclass
class Adapted:
    """What the JSONL reader reads: the frame (adapted when a layout was recognised, or
    its step found by rule), its line numbers, the step/clock columns for
    ``wide_to_long``, the aliases, metadata."""

    df: pl.DataFrame
    line_numbers: pl.Series
    aliases: AliasTable
    layout: Layout | None = None
    metadata: dict[str, object] = field(default_factory=dict)
    guess: StepGuess | None = None

    def notes(self, source: str) -> list[DataIssue]:
        if self.guess is not None:
            return [
                DataIssue(kind="inferred-step", source=source, message=n, severity="info")
                for n in self.guess.notes
            ]
        return self.layout.issues(source) if self.layout else []

    def to_long(self, source: str, unit: str) -> tuple[pl.DataFrame, list[DataIssue], list[int]]:
        """:func:`trainlens.readers._wide.wide_to_long` with the layout's step and clock."""
        lay, guess = self.layout, self.guess
        return wide_to_long(
            self.df,
            source=source,
            line_numbers=self.line_numbers,
            unit=unit,
            step_key=lay.step_key if lay else guess.step_key if guess else None,
            step_name=guess.step_name if guess else None,
            time_key=lay.time_key if lay else None,
            no_wall_time=lay.no_wall_time if lay else False,
        )


def adapt(
    df: pl.DataFrame, line_numbers: pl.Series, path: Path, aliases: AliasTable, *, use: bool
) -> Adapted:
    """``df`` read as its framework's layout when one is recognised (and ``use``), else
    at the step a rule finds (:mod:`trainlens.readers._step_rule`) when the usual step
    keys give none the plain reading would read right."""
    layout = recognise(df.with_columns(line_numbers.alias("_line")), path) if use else None
    if layout is None:
        guess = _step_rule.resolve(df, find_key(df.columns, STEP_KEYS)) if use else None
        if guess is None:
            return Adapted(df, line_numbers, aliases)
        return Adapted(guess.df, line_numbers, aliases, metadata=guess.metadata, guess=guess)
    return Adapted(
        layout.df.drop("_line"),
        layout.df.get_column("_line"),
        aliases.with_defaults(layout.aliases),
        layout,
        {"framework": layout.framework, **layout.metadata},
    )
