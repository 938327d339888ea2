"""Training frameworks' own tables (the CSV / TSV family): who wrote a table, told from
its columns, and what those columns mean.

Each writer was read to decide (its code is named beside each rule):

- **Ultralytics YOLO** ``results.csv`` (``BaseTrainer.save_metrics``: one row per epoch,
  ``epoch`` from 1, ``time`` the seconds since training began; before 8.1 every name and
  value padded to 23 characters, no ``time``) and its TensorBoard (the same names, the
  epoch the step): the loss parts (``train/box_loss``, ``train/cls_loss``,
  ``train/dfl_loss``, ``train/seg_loss`` …) are already weighted by their gains and the
  trainer backpropagates their sum, so ``train/loss`` is their sum (and ``val/loss`` the
  sum of the ``val/*_loss``), said in a note; ``lr`` is the weights' param group (see
  :func:`_ultralytics_lr`). Done on the Run (:func:`finish`), so both files agree.
- **timm** ``summary.csv`` (``timm.utils.summary.update_summary``: ``epoch`` from 0,
  ``train_*``, ``eval_*``, ``lr``): ``eval_top1`` / ``eval_top5`` are percentages, read as
  the fractions ``val/accuracy`` / ``val/accuracy_top5``.
- **fastai** ``CSVLogger`` ``history.csv`` (``Recorder.metric_names``: ``epoch``,
  ``train_loss`` — the smoothed loss at the epoch's end —, ``valid_loss``, the metrics,
  ``time`` as ``mm:ss``): the metrics are validation metrics, ``time`` the epoch's
  duration in seconds (``epoch_time``), not a wall clock.
- **Ray Train / Tune** ``progress.csv`` (``CSVLoggerCallback``: the result dict flattened
  with ``/``): ``training_iteration`` is the step, ``timestamp`` the wall time,
  ``time_this_iter_s`` the step time, ``time_total_s`` the training time; ``config/*`` are
  the run's params, Ray's bookkeeping (``done``, ``pid``, ``*_since_restore`` …) no metric.
- **Stable-Baselines3** ``progress.csv`` (``logger.CSVOutputFormat``, a column added
  when a key first appears, earlier rows empty): ``time/total_timesteps`` is the step
  (what SB3 passes to ``dump``), ``time/time_elapsed`` the wall time; ``time/fps`` is
  the mean rate since the start, kept under its own name (no throughput).
- **DVCLive** ``plots/metrics/<name>.tsv`` (``dvclive.plots.Metric``: ``[timestamp,]
  step, <leaf>``, the timestamp in ms): the metric is the file's path below
  ``plots/metrics`` (``train/loss.tsv`` is ``train/loss``); the folder reader is
  :mod:`trainlens.readers.dvclive`.

Every decision is a note on the run (kind ``framework``), so a summary says which writer
was recognised and what was derived.
"""

from __future__ import annotations

import functools
import operator
import re
from pathlib import Path
from typing import Any

import polars as pl

from trainlens.core.dataclass import dataclass, field
from trainlens.core.names import Alias, AliasTable
from trainlens.core.run import DataIssue, Run
from trainlens.readers._wide import STEP_KEYS

NOTE_KIND = "framework"
DERIVED = "framework_derived"  # metadata: the metrics a framework rule made (finish)
DVCLIVE_METRICS = ("plots", "metrics")  # dvclive's folder of one TSV per metric


@dataclass
class Prepared:
    """A wide table made ready for the generic reader, and what was decided."""

    df: pl.DataFrame
    framework: str | None = None
    notes: list[DataIssue] = field(default_factory=list)
    aliases: dict[str, Alias] = field(default_factory=dict)  # after the user's own
    metadata: dict[str, Any] = field(default_factory=dict)


def with_aliases(table: AliasTable, extra: dict[str, Alias]) -> AliasTable:
    """``table`` with a framework's own spellings added below the user's."""
    if not extra:
        return table
    out = AliasTable()
    out.user = {**{k.strip().lower(): v for k, v in extra.items()}, **table.user}
    return out


def _note(source: str, message: str) -> DataIssue:
    return DataIssue(kind=NOTE_KIND, source=source, message=message, severity="info")


# ---- shared table repairs -----------------------------------------------------------------


def strip_header(df: pl.DataFrame) -> pl.DataFrame:
    """Names without the padding some writers put around them (Ultralytics before 8.1
    wrote ``'%23s,'``: ``"         train/box_loss"``); kept as they are if stripping would
    make two names one."""
    stripped = [c.strip() for c in df.columns]
    if stripped == df.columns or len(set(stripped)) != len(stripped):
        return df
    return df.rename(dict(zip(df.columns, stripped, strict=True)))


def numeric_text(df: pl.DataFrame) -> pl.DataFrame:
    """Text columns whose every cell is a number once its padding is stripped (a padded
    ``'%23.5g'`` cell) as numbers: whole numbers as Int64, so a padded ``epoch`` is still
    the step. A step column read as text is left so: the CSV reader reads one holding a
    fraction as text on purpose, to parse each step exactly (2**63-1 is no float)."""
    out = []
    steps = {k.lower() for k in STEP_KEYS}
    for name, dtype in df.schema.items():
        if dtype != pl.String or name.strip().lower() in steps:
            continue
        col = df.get_column(name).str.strip_chars()
        filled = int(col.is_not_null().sum()) - int((col == "").sum())
        for target in (pl.Int64, pl.Float64):
            num = col.cast(target, strict=False)
            if filled and int(num.is_not_null().sum()) == filled:
                out.append(num.alias(name))
                break
    return df.with_columns(out) if out else df


SOURCE_LINE = "_source_line"  # a row's line in the file, once rows were left out


def repeated_headers(df: pl.DataFrame, source: str) -> tuple[pl.DataFrame, list[DataIssue]]:
    """Rows that repeat the header (a logger that writes its header at each fit into a file
    opened for appending: fastai's ``CSVLogger(append=True)``) left out, with a note; the
    rows kept carry their line in the file (:data:`SOURCE_LINE`), for later notes."""
    if not df.width or df.schema[df.columns[0]] != pl.String:
        return df, []
    first = df.columns[0]
    again = df.get_column(first).str.strip_chars() == first.strip()
    n = int(again.sum())
    if not n:
        return df, []
    lines = (again.arg_true() + 2).head(5).to_list()  # data lines are numbered from 2
    note = DataIssue(
        kind="repeated-header",
        source=source,
        location=f"line {lines[0]}",
        message=(
            f"the header is written again at {n} line(s) ({', '.join(map(str, lines))}"
            f"{'…' if n > len(lines) else ''}): a file appended to by another run; "
            "those lines are no values"
        ),
        count=n,
        severity="info",
    )
    kept = df.with_columns(pl.int_range(2, df.height + 2, dtype=pl.Int64).alias(SOURCE_LINE))
    return numeric_text(kept.filter(~again)), [note]


# ---- recognising the writer ---------------------------------------------------------------

ULTRALYTICS_LOSS = re.compile(r"^train/[a-z0-9]+_loss$")
ULTRALYTICS_METRIC = re.compile(r"^metrics/[\w.-]+\([A-Z]\)$|^metrics/accuracy_top[15]$")
# YOLOv5 and the repositories that copy its train.py (YOLOv7, YOLOv9, yolov5_obb …):
# ``metrics/mAP_0.5``, ``metrics/mAP_0.5:0.95``, one ``x/lr<i>`` per param group
YOLOV5_METRIC = re.compile(r"^metrics/(?:precision|recall|mAP_0\.5(?::0\.95)?)$")
YOLOV5_LR = re.compile(r"^x/lr\d+$")
FASTAI_TIME = re.compile(r"^\s*(?:(\d+):)?(\d+):(\d\d)\s*$")


def recognise(columns: list[str]) -> str | None:
    """The framework whose writer makes a table with these (stripped) column names."""
    cols = set(columns)
    if any(ULTRALYTICS_METRIC.match(c) for c in cols) and any(
        c.startswith("lr/pg") or ULTRALYTICS_LOSS.match(c) for c in cols
    ):
        return "ultralytics"  # (its TensorBoard before 8.1 holds no lr/pg*)
    if any(YOLOV5_METRIC.match(c) for c in cols) and any(
        YOLOV5_LR.match(c) or ULTRALYTICS_LOSS.match(c) for c in cols
    ):
        return "yolov5"  # (the same rules: gain-weighted loss parts, a bias group)
    if "training_iteration" in cols and cols & {"time_this_iter_s", "time_total_s"}:
        return "ray"
    if ("time/total_timesteps" in cols and cols & {"time/fps", "time/iterations"}) or (
        any(c.startswith("rollout/") for c in cols)
        and all(c.startswith(SB3_NAMESPACES) for c in cols)
    ):
        return "stable-baselines3"
    if columns and columns[0] == "epoch" and "train_loss" in cols:
        if columns[-1] == "time" and "valid_loss" in cols:
            return "fastai"
        rest = [c for c in columns[1:] if c != "lr"]
        if any(c.startswith("eval_") for c in rest) and all(
            c.startswith(("train_", "eval_")) for c in rest
        ):
            return "timm"
    return None


def dvclive_metric(path: Path) -> str | None:
    """The metric a DVCLive TSV holds, from its place below ``plots/metrics``; None when
    the file is not in such a folder."""
    parts = path.resolve().parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i - 1 : i + 1] == DVCLIVE_METRICS:
            rel = "/".join(parts[i + 1 :])
            return rel[: -len(".tsv")] if rel.endswith(".tsv") else None
    return None


def prepare(df: pl.DataFrame, path: Path) -> Prepared:
    """The table with its padding stripped and, when a framework's writer is recognised,
    its columns made to mean what that writer meant (see the module docstring)."""
    source = str(path)
    df = numeric_text(strip_header(df))
    df, notes = repeated_headers(df, source)
    metric = dvclive_metric(path) if path.suffix == ".tsv" else None
    if metric is not None and "step" in df.columns and df.width <= 3:
        out = _dvclive(df, metric, source)
    else:
        fw = recognise([c for c in df.columns if c != SOURCE_LINE])
        out = _PREPARE[fw](df, source) if fw in _PREPARE else Prepared(df)
    out.notes[:0] = notes
    return out


def _dvclive(df: pl.DataFrame, metric: str, source: str) -> Prepared:
    leaf = [c for c in df.columns if c not in ("step", "timestamp")]
    if len(leaf) != 1:
        return Prepared(df)
    cols = [pl.col("step"), pl.col(leaf[0]).alias(metric)]
    if "timestamp" in df.columns:  # milliseconds since the epoch
        cols.append((pl.col("timestamp").cast(pl.Float64) / 1000).alias("wall_time"))
    note = _note(
        source,
        f"read as a DVCLive metric file: its place below plots/metrics names it {metric!r}",
    )
    return Prepared(df.select(cols), "dvclive", [note])


def _timm(df: pl.DataFrame, source: str) -> Prepared:
    aliases: dict[str, Alias] = {}
    scaled = []
    for col, name in (("eval_top1", "val/accuracy"), ("eval_top5", "val/accuracy_top5")):
        if col in df.columns:
            top = df.get_column(col).cast(pl.Float64, strict=False)
            percent = bool((top.drop_nans().drop_nulls() > 1).any())
            aliases[col] = Alias(name, 0.01 if percent else 1.0)
            if percent:
                scaled.append(col)
    msg = "read as a timm summary.csv: one row per epoch, `epoch` the step"
    if scaled:
        msg += f"; {', '.join(scaled)} are percentages, read as fractions"
    return Prepared(df, "timm", [_note(source, msg)], aliases)


def _fastai(df: pl.DataFrame, source: str) -> Prepared:
    notes = []
    time = df.get_column("time")
    if time.dtype == pl.String:
        parts = time.str.extract_groups(FASTAI_TIME.pattern)
        secs = (
            parts.struct.field("1").cast(pl.Float64).fill_null(0) * 3600
            + parts.struct.field("2").cast(pl.Float64) * 60
            + parts.struct.field("3").cast(pl.Float64)
        )
        df = df.with_columns(secs.alias("time")).rename({"time": "epoch_time"})
        notes.append("`time` is each epoch's duration (mm:ss), read as `epoch_time` in seconds")
    table = AliasTable()
    aliases = {}
    for col in df.columns:
        if col in (
            "epoch",
            "train_loss",
            "valid_loss",
            "epoch_time",
            SOURCE_LINE,
        ) or col.startswith("train_"):
            continue
        base = col[len("valid_") :] if col.startswith("valid_") else col
        hit = table.lookup(base)
        name = hit.canonical if hit else base
        aliases[col] = Alias(
            name if name.startswith("val/") else "val/" + name.removeprefix("train/")
        )
    msg = (
        "read as a fastai CSVLogger history: one row per epoch, `epoch` the step; "
        "train_loss is fastai's smoothed loss at the epoch's end"
    )
    if aliases:
        are = "are validation metrics" if len(aliases) > 1 else "is a validation metric"
        msg += f"; {', '.join(aliases)} {are}"
    return Prepared(df, "fastai", [_note(source, "; ".join([msg, *notes]))], aliases)


# Ray's own keys that are no metric (ray.air.constants / ray.tune.result)
RAY_BOOKKEEPING = (
    "done",
    "pid",
    "iterations_since_restore",
    "time_since_restore",
    "timesteps_since_restore",
    "warmup_time",
    "should_checkpoint",
    "episodes_this_iter",
    "checkpoint_dir_name",
    "trial_id",
    "experiment_id",
    "experiment_tag",
    "date",
    "hostname",
    "node_ip",
)
RAY_IDENTITY = ("trial_id", "experiment_id", "experiment_tag", "hostname")  # -> metadata


def _ray(df: pl.DataFrame, source: str) -> Prepared:
    config = [c for c in df.columns if c.startswith("config/")]
    params: dict[str, Any] = {}
    if config:
        last = df.select(config).tail(1).to_dicts()[0]
        params = {k[len("config/") :]: v for k, v in last.items() if v is not None}
    ray = (
        {
            k: v
            for k, v in df.select([c for c in RAY_IDENTITY if c in df.columns])
            .tail(1)
            .row(0, named=True)
            .items()
            if v is not None
        }
        if any(c in df.columns for c in RAY_IDENTITY)
        else {}
    )
    drop = [c for c in (*RAY_BOOKKEEPING, *config) if c in df.columns]
    df = df.drop(drop)
    renames = {"training_iteration": "step"}
    if "step" in df.columns:  # the trainable reported its own step: a metric then
        renames = {"step": "reported/step", **renames}
    if "timestamp" in df.columns:
        renames["timestamp"] = "wall_time"
    df = df.rename(renames)
    aliases = {"time_this_iter_s": Alias("step_time"), "time_total_s": Alias("train_time")}
    msg = (
        "read as a Ray Tune/Train progress.csv: training_iteration is the step, "
        "timestamp the wall time"
    )
    if config:
        msg += f"; {len(config)} config/ column(s) are the run's params"
    if drop := [c for c in drop if not c.startswith("config/")]:
        msg += f"; Ray's bookkeeping ({', '.join(drop)}) is not a metric"
    meta: dict[str, Any] = {"ray": ray} if ray else {}
    if params:
        meta["params"] = params
    return Prepared(df, "ray", [_note(source, msg)], aliases, meta)


SB3_NAMESPACES = ("rollout/", "time/", "train/", "eval/")
SB3_PARTS = {  # algorithms that log only parts of their objective (weights not in the file)
    "train/policy_loss",
    "train/actor_loss",
    "train/critic_loss",
    "train/value_loss",
    "train/ent_coef_loss",
}


def _sb3(df: pl.DataFrame, source: str) -> Prepared:
    renames = {}
    said = ["read as a Stable-Baselines3 progress.csv"]
    if "time/total_timesteps" in df.columns:
        renames["time/total_timesteps"] = "step"
        said.append("time/total_timesteps (environment steps) is the step")
    if "time/time_elapsed" in df.columns:
        renames["time/time_elapsed"] = "wall_time"
        said.append("time/time_elapsed the wall time (seconds since the start)")
    df = df.drop([c for c in renames.values() if c in df.columns]).rename(renames)
    msg = ": ".join([said[0], ", ".join(said[1:])]) if len(said) > 1 else said[0]
    aliases = {}
    if "train/loss" in df.columns:
        # (PPO's clipped surrogate + value loss, DQN's TD loss: their targets move with
        # the policy, so they rise as returns grow; judged as a training loss, three
        # healthy public SB3 runs (PPO, DQN) drew 64 findings, one an error)
        aliases["train/loss"] = Alias(SB3_LOSS)
        msg += f"; {SB3_LOSS_NOTE}"
    df, undefined = _undefined_nans(df, "train/explained_variance")
    if undefined:
        msg += f"; {_sb3_undefined_note(undefined)}"
    parts = sorted(SB3_PARTS & set(df.columns))
    if "train/loss" not in df.columns and parts:
        msg += (
            f"; only loss parts are logged ({', '.join(parts)}), no total: no train/loss "
            "(the algorithm's weights of the parts are not in the file)"
        )
    if "time/fps" in df.columns:
        # (SB3: fps = timesteps since the start / seconds since the start; as throughput,
        # the first rollout's warm-up read as a 24 % drop on a healthy PPO run)
        msg += f"; {SB3_FPS_NOTE}"
    return Prepared(df, "stable-baselines3", [_note(source, msg)], aliases)


SB3_LOSS = "train/rl_loss"
SB3_LOSS_NOTE = (
    f"train/loss is the RL objective, whose targets move with the policy: read as "
    f"{SB3_LOSS}, not judged as a training loss (rollout/ep_rew_mean is the signal)"
)
SB3_FPS_NOTE = "time/fps is a mean since the start, not the rate at the step: no throughput"


def _sb3_undefined_note(n: int) -> str:
    return (
        f"{n} NaN value(s) of train/explained_variance are SB3's 'undefined' (returns with "
        "no variance), not a numeric failure: left out"
    )


def _undefined_nans(df: pl.DataFrame, col: str) -> tuple[pl.DataFrame, int]:
    """``col`` with its NaN cells made absent, and how many there were."""
    if col not in df.columns or not df.schema[col].is_float():
        return df, 0
    nan = df.get_column(col).is_nan()
    n = int(nan.sum())
    return (df.with_columns(pl.when(nan).then(None).otherwise(pl.col(col)).alias(col)), n)


def _ultralytics(df: pl.DataFrame, source: str) -> Prepared:
    return Prepared(df, "ultralytics")  # the rules are the Run's: see finish()


_PREPARE = {
    "timm": _timm,
    "fastai": _fastai,
    "ray": _ray,
    "stable-baselines3": _sb3,
    "ultralytics": _ultralytics,
}


# ---- on the Run: rules one file kind shares with another (Ultralytics' CSV and TB) ---------


def finish(run: Run) -> None:
    """Rules that hold for a framework whatever file it was read from: Ultralytics' CSV
    and its TensorBoard give the same names, and the same derived ``train/loss`` and ``lr``."""
    raws = [run.raw_names.get(m, m) for m in run.metrics]
    fw = recognise(raws)
    if fw == "stable-baselines3" and run.format == "tensorboard":
        _sb3_run(run)
    if fw not in ("ultralytics", "yolov5") or DERIVED in run.metadata:
        return
    run.metadata["framework"] = fw
    run.metadata[DERIVED] = derived = list[str]()
    shifted = fw == "ultralytics" and run.format == "csv" and _epochs_from_zero(run)
    said = [
        "read as Ultralytics YOLO metrics: one row per epoch, the epoch the step"
        if fw == "ultralytics"
        else "read as YOLOv5's results (YOLOv5 and the trainers that copy its train.py): "
        "one row per epoch, the epoch the step"
    ]
    if shifted:
        said.append(
            "its epochs count from 0 (save_metrics before 8.1): read as epoch + 1, the step "
            "its TensorBoard callback gives the same epoch"
        )
    for split in ("train", "val"):
        parts = [m for m in run.metrics if re.fullmatch(rf"{split}/[a-z0-9]+_loss", m)]
        total = f"{split}/loss"
        if run.has(total) or not parts:
            continue
        _add_sum(run, total, parts)
        derived.append(total)
        if split == "train":  # (units' "parts and no total: no train loss judged" no longer holds)
            run.data_quality[:] = [
                i for i in run.data_quality if "parts of its loss" not in i.message
            ]
        said.append(
            f"{len(parts)} {split} loss parts ({', '.join(parts)}) and no total: "
            f"{total} is their sum (the loss the trainer backpropagates)"
        )
    if not run.has("lr"):
        group = _ultralytics_lr(run)
        if group is not None:
            run.add_derived("lr", run.series_frame(group))
            run.raw_names["lr"] = group
            derived.append("lr")
            said.append(
                f"lr is {group} (the weights' param group; the bias group warms up "
                "from warmup_bias_lr downwards)"
            )
    if any(i.kind == "duplicate-step" for i in run.data_quality):
        said.append(
            "values repeating an epoch are expected: before 8.1 the TensorBoard callback "
            "wrote the epoch's running mean loss at every batch (the last, the epoch's mean, "
            "stands), and the final validation of best.pt is logged at the last epoch again"
        )
    run.data_quality.append(_note(run.source, "; ".join(said)))


def _add_sum(run: Run, name: str, parts: list[str]) -> None:
    frames = [run.series_frame(p).rename({"value": f"_v{i}"}) for i, p in enumerate(parts)]
    joined = functools.reduce(
        lambda a, b: a.join(b.drop("wall_time"), on="step", how="inner"), frames
    )
    total = functools.reduce(operator.add, [pl.col(f"_v{i}") for i in range(len(parts))])
    run.add_derived(name, joined.select("step", total.alias("value"), "wall_time"))
    run.raw_names[name] = " + ".join(run.raw_names.get(p, p) for p in parts)


def _ultralytics_lr(run: Run) -> str | None:
    """The param group that is the weights': the bias group is built first before 8.4
    (``lr/pg0``) and last since (``lr/pg2``), and only it warms up from
    ``warmup_bias_lr`` down, while the two weight groups (with and without decay) follow
    one schedule. So: the first group equal to another on every epoch; failing that
    (all differ: MuSGD's boosted head), ``lr/pg0``."""
    groups = sorted(m for m in run.metrics if re.fullmatch(r"lr/pg\d+|x/lr\d+", m))
    if not groups:
        return None
    values = {g: run.series_frame(g).get_column("value").to_list() for g in groups}
    for g in groups:
        if any(values[g] == values[o] for o in groups if o != g):
            return g
    return groups[0]


def _sb3_run(run: Run) -> None:
    """Stable-Baselines3's TensorBoard (its ``TensorBoardOutputFormat``: the names of its
    progress.csv, the step ``num_timesteps``) read by the rules of its progress.csv
    (:func:`_sb3`): ``train/loss`` is the RL objective, a NaN ``train/explained_variance``
    SB3's 'undefined', ``time/fps`` a mean since the start."""
    if run.metadata.get("framework") == "stable-baselines3":
        return
    run.metadata["framework"] = "stable-baselines3"
    said = ["read as Stable-Baselines3's TensorBoard: the step is its num_timesteps"]
    keep = pl.lit(True)
    if run.has("train/loss") and not run.has(SB3_LOSS):
        run.add_derived(SB3_LOSS, run.series_frame("train/loss"))
        run.raw_names[SB3_LOSS] = run.raw_names.pop("train/loss", "train/loss")
        keep = pl.col("metric") != "train/loss"
        said.append(SB3_LOSS_NOTE)
    ev = "train/explained_variance"
    undefined = 0
    if run.has(ev):
        nan = (pl.col("metric") == ev) & pl.col("value").is_nan()
        undefined = run.frame.filter(nan).height
        keep = keep & ~nan
    if undefined:
        said.append(_sb3_undefined_note(undefined))
    if len(said) > 1:
        run.frame = run.frame.filter(keep)
        run._blocks = None
    if run.has("time/fps"):
        said.append(SB3_FPS_NOTE)
    run.data_quality.append(_note(run.source, "; ".join(said)))


def _epochs_from_zero(run: Run) -> bool:
    """Whether an Ultralytics results.csv numbers its epochs from 0 (before 8.1, where
    ``save_metrics`` wrote ``self.epoch``; since, ``self.epoch + 1``, as its TensorBoard
    callback always did); if so its steps are moved to epoch + 1, so that the CSV and the
    TensorBoard of one run give the same steps."""
    steps = run.frame.get_column("step")
    if steps.len() == 0 or int(steps.min()) != 0:  # type: ignore[arg-type]
        return False
    run.frame = run.frame.with_columns(pl.col("step") + 1)
    run._blocks = None
    return True
