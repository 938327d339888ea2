"""The stdout of training frameworks, as :class:`~.shapes.Shape` entries (issue 26).

Each entry was written from the framework's own printer and checked against logs people
committed (the tests name them):

* detectron2's ``CommonMetricPrinter`` (``[.. d2.utils.events]:`` on the terminal,
  ``[..] d2.utils.events INFO:`` in its ``log.txt``): ``eta: 0:03:49  iter: 19
  total_loss: 5.922  loss_cls: 1.709 ...  time: 0.8241  data_time: 0.8461  lr: 3.99e-05
  max_mem: 1966M``. ``iter`` is the step; ``time`` and ``data_time`` are seconds per
  iteration (medians over its window), ``max_mem`` is ``max_memory_allocated`` in MiB.
  Several launches appended to one file (a resumed job) are kept in order: where the
  iteration goes back, the reader's restart rule marks the later segment as the one that
  stands.
* MMEngine's ``LogProcessor`` (MMDetection, MMPretrain, ...; and mmcv 1.x's
  ``TextLoggerHook``): ``Epoch(train)  [1][ 50/1509]  lr: 2.16e-06  eta: 8:27:55  time:
  0.2526  data_time: 0.0334  memory: 9182  loss: 59.17 ...``. The step is the iteration
  over the run, ``(epoch - 1) * iterations_per_epoch + i`` (MMEngine's own ``iter``);
  ``Iter(train) [  50/90000]`` gives it directly. ``memory`` is ``max_memory_allocated``
  in MiB. ``Epoch(val) [1][500/500]  coco/bbox_mAP: 0.374 ...`` results are named
  ``val/<key>`` (``test/<key>``) at the last training step before them; the evaluation's
  own timings are left out.
* fairseq's ``simple`` progress bar: ``epoch 001:    100 / 1129 loss=9.2, ppl=512,
  wps=12345, ..., num_updates=100, lr=0.0005, gnorm=1.2, ...`` (the ``train_inner``
  lines), the epoch summary ``epoch 001 | loss 9.2 | ppl ... | num_updates 1129 | ...``
  and ``epoch 001 | valid on 'valid' subset | loss 8.1 | ... | num_updates 1129``, with
  or without a leading ``|`` and after any logging prefix. The step is ``num_updates``.
  The summary's means are ``train_epoch/<key>`` (the interval lines give ``train/loss``);
  when the log has no interval lines they take the plain names. Validation on subset
  ``valid`` is ``valid/<key>``, on another subset ``valid/<key>/<subset>``.
* torchvision's detection/classification references ``MetricLogger`` (copied by DETR,
  DeiT, MAE, DINO ...): ``Epoch: [0]  [ 10/625]  eta: 0:05:01  lr: 0.0001  loss: 0.41
  (0.52)  time: 0.46  data: 0.01  max mem: 5403``. The step is ``epoch * n + i``
  (epochs from 0); of ``0.41 (0.52)`` the first number (the window's median) is read;
  ``time`` and ``data`` are seconds per iteration, ``max mem`` MiB.
* PyTorch's ImageNet example (``imagenet/main.py``, copied widely): ``Epoch: [0][ 10/5005]
  Time 0.311 ( 0.522)  Data 0.000 ( 0.191)  Loss 6.896e+00 (6.914e+00)  Acc@1 0.00 (
  0.11)`` (step ``epoch * n + i``; the batch's value, not the bracketed running mean)
  and the evaluation's `` * Acc@1 76.130 Acc@5 92.862`` as ``val/Acc@1`` at the last
  step; its per-batch ``Test: [i/n]`` lines (running means) are left out.
* NeMo's Lightning progress bar: ``Epoch 0: 100%|███| 40/40 [00:31<00:00, ...,
  reduced_train_loss=10.90, global_step=39.00, consumed_samples=9984.0, train_step_timing
  in s=0.5]``. The step is ``global_step``; every state of a bar redrawn with a carriage
  return is read (a log written through ``tee`` holds all of them in one line); the
  bar's ``loss`` is Lightning's running mean and is named ``loss (running mean)``.
"""

from __future__ import annotations

import polars as pl

from trainlens.readers.textlog.shapes import NUM, Shape, _unnamed

# ---- detectron2 ---------------------------------------------------------------------------

_D2_PAIR = rf"(?P<key>[A-Za-z_][A-Za-z0-9_./-]*):[ \t]*(?P<value>{NUM})(?P<unit>M)?"
DETECTRON2 = Shape(
    name="detectron2",
    line=(
        r"d2\.utils\.events(?:\]:|[ \t]+INFO:)[ \t]+(?:eta:[ \t]*(?:[0-9]+ days?, )?[0-9:]+[ \t]+)?"
        r"iter:[ \t]*(?P<step>[0-9]+)[ \t]+(?P<body>.*)$"
    ),
    hint=r"d2\.utils\.events(?:\]:|[ \t]+INFO:)",
    tokens=rf"[A-Za-z_][A-Za-z0-9_./-]*:[ \t]*{NUM}M?",
    field=_D2_PAIR,
    units={"M": ""},
    # its seconds per iteration; max_memory_allocated in MiB (see the alias table)
    names={"time": "iter_time", "max_mem": "max_mem_mib"},
)


def _epoch_iter_step() -> pl.Expr:
    """``(epoch - 1) * per_epoch + iter``: epochs counted from 1, iterations from 0."""
    epoch = pl.col("epoch").cast(pl.Int64) - 1
    return epoch * pl.col("per_epoch").cast(pl.Int64) + pl.col("iter").cast(pl.Int64)


# ---- MMEngine / mmcv ------------------------------------------------------------------------

# LogProcessor joins its fields with two spaces; a key may hold one (mmpose's
# `coco/AP .5`, `coco/AP (M)`: cut at the space they were `val/l)` and `val/m)`)
_MM_KEY = r"[A-Za-z_](?:[^ \t,:]| [^ \t,:])*"
_MM_TOKENS = rf"{_MM_KEY}:[ \t]*[^ \t,]+"
_MM_FIELD = rf"^(?P<key>{_MM_KEY}):[ \t]*(?P<value>{NUM})$"
_MM_NAMES = {"time": "iter_time", "memory": "max_mem_mib"}
_MM_HINT = r"(?:Epoch|Iter)(?:\((?:train|val|test)\))?[ \t]*\["

MMENGINE_EPOCH = Shape(
    name="mmengine",
    line=(
        r"(?:^|[^A-Za-z0-9_])Epoch(?:\(train\))?[ \t]*\[(?P<epoch>[0-9]+)\]"
        r"\[[ \t]*(?P<iter>[0-9]+)/[ \t]*(?P<per_epoch>[0-9]+)\][ \t,]*(?P<body>.*:.*)$"
    ),
    hint=_MM_HINT,
    tokens=_MM_TOKENS,
    field=_MM_FIELD,
    names=_MM_NAMES,
    skip=frozenset({"eta"}),
    step_from=_epoch_iter_step,
)
MMENGINE_ITER = Shape(
    name="mmengine",
    line=(
        r"(?:^|[^A-Za-z0-9_])Iter(?:\(train\))?[ \t]*\[[ \t]*(?P<step>[0-9]+)/[ \t]*"
        r"(?P<total>[0-9]+)\][ \t,]*(?P<body>.*:.*)$"
    ),
    hint=_MM_HINT,
    tokens=_MM_TOKENS,
    field=_MM_FIELD,
    names=_MM_NAMES,
    skip=frozenset({"eta"}),
)
MMENGINE_EVAL = Shape(
    name="mmengine",
    line=(
        r"(?:^|[^A-Za-z0-9_])(?:Epoch|Iter)\((?P<split>val|test)\)[ \t]*(?:\[[0-9]+\])?"
        r"\[[ \t]*[0-9]+(?:/[ \t]*[0-9]+)?\][ \t,]*(?P<body>.*:.*)$"
    ),
    hint=_MM_HINT,
    sniff="",
    tokens=_MM_TOKENS,
    field=_MM_FIELD,
    # the evaluation's own timings are no result
    skip=frozenset({"eta", "time", "data_time", "memory"}),
    metric=lambda: pl.col("split") + pl.lit("/") + pl.col("key"),
    follows=True,
)

# ---- PaddleClas (ppcls): `[Train][Epoch 1/400][Iter: 10/98]lr(LinearWarmup): 2.2e-05,
# CELoss: 6.93, loss: 6.93, batch_cost: 0.49343s, reader_cost: 0.00027, ips: 259.4 samples/s,
# eta: 5:22:17`; the evaluation's means `[Eval][Epoch 1][Avg]CELoss: 6.90, loss: 6.90,
# top1: 0.00146, top5: 0.00606` (its running `[Eval]…[Iter: i/n]` batches are no result)

_PP_TOKENS = (
    rf"[A-Za-z_][A-Za-z0-9_]*(?:\([A-Za-z0-9_]*\))?:[ \t]*{NUM}s?(?:[ \t]+[a-z]+/s(?:ec)?)?"
)
_PP_FIELD = (
    rf"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?:\([A-Za-z0-9_]*\))?:[ \t]*(?P<value>{NUM})"
    r"(?P<unit>s)?(?:[ \t]+[a-z]+/s(?:ec)?)?$"
)
_PP_HINT = r"\[(?:Train|Eval)\]\[Epoch [0-9]+"
# batch_cost and reader_cost are seconds a batch; ips samples a second
_PP_NAMES = {"batch_cost": "iter_time", "reader_cost": "data_time", "ips": "samples_per_sec"}
PADDLECLAS_TRAIN = Shape(
    name="paddleclas",
    line=(
        r"\[Train\]\[Epoch (?P<epoch>[0-9]+)/(?P<epochs>[0-9]+)\]"
        r"\[Iter: (?P<iter>[0-9]+)/(?P<per_epoch>[0-9]+)\](?P<body>.*:.*)$"
    ),
    hint=_PP_HINT,
    tokens=_PP_TOKENS,
    field=_PP_FIELD,
    units={"s": ""},
    names=_PP_NAMES,
    skip=frozenset({"eta"}),
    step_from=_epoch_iter_step,
)
PADDLECLAS_EVAL = Shape(
    name="paddleclas",
    line=r"\[Eval\]\[Epoch [0-9]+\]\[Avg\](?P<body>.*:.*)$",
    hint=_PP_HINT,
    sniff="",
    tokens=_PP_TOKENS,
    field=_PP_FIELD,
    skip=frozenset({"batch_cost", "reader_cost", "ips"}),
    metric=lambda: pl.lit("val/") + pl.col("key"),
    follows=True,
)

# ---- fairseq --------------------------------------------------------------------------------

_FS_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_FS_FIELD = rf"^[ \t]*(?P<key>{_FS_KEY})[ \t]+(?P<value>{NUM})[ \t]*$"
_FS_HINT = r"epoch [0-9]+(?::| \|)"
FAIRSEQ_INNER = Shape(
    name="fairseq",
    line=(
        r"(?:^|[^A-Za-z0-9_])epoch (?P<epoch>[0-9]+):[ \t]+[0-9]+ / [0-9]+ "
        rf"(?P<body>{_FS_KEY}=.*num_updates=.*)$"
    ),
    hint=_FS_HINT,
    split=",",
    pair="=",
    step_field="num_updates",
    follows=True,
)
FAIRSEQ_EPOCH = Shape(
    name="fairseq_epoch",
    line=(r"(?:^|[^A-Za-z0-9_])epoch (?P<epoch>[0-9]+) \|(?P<body> loss [^|]+\|.*)$"),
    hint=_FS_HINT,
    split="|",
    field=_FS_FIELD,
    step_field="num_updates",
    follows=True,
    metric=lambda: pl.lit(EPOCH_PREFIX) + pl.col("key"),
)
FAIRSEQ_VALID = Shape(
    name="fairseq_valid",
    line=(
        r"(?:^|[^A-Za-z0-9_])epoch [0-9]+ \| valid on '(?P<subset>[^']*)' subset \|"
        r"(?P<body>.*)$"
    ),
    hint=_FS_HINT,
    split="|",
    field=_FS_FIELD,
    step_field="num_updates",
    follows=True,
    metric=lambda: (
        pl.when(pl.col("subset") == "valid")
        .then(pl.lit("valid/") + pl.col("key"))
        .otherwise(pl.lit("valid/") + pl.col("key") + pl.lit("/") + pl.col("subset"))
    ),
)
#: the fairseq epoch summary's metric prefix, dropped when the log has no interval lines
EPOCH_PREFIX = "train_epoch/"

# ---- NeMo (Lightning's progress bar) ------------------------------------------------------

NEMO = Shape(
    name="nemo",
    line=(
        r"(?:^|[^A-Za-z0-9_])Epoch (?P<epoch>[0-9]+):[^\[\n]*\[(?P<body>[^\]\n]*"
        r"global_step=[^\]\n]*)"
    ),
    hint="global_step=",
    split=",",
    pair="=",
    step_field="global_step",
    skip=frozenset({"v_num"}),
    names={"loss": "loss (running mean)"},
    redrawn=True,
)

# ---- torchvision's references MetricLogger (DETR, DeiT, MAE, DINO, ... copy it) --------------

_TV_KEY = r"max mem|[A-Za-z_][A-Za-z0-9_./]*"
TORCHVISION = Shape(
    name="torchvision_metric_logger",
    line=(
        r"(?:^|[^A-Za-z0-9_])Epoch: \[(?P<epoch>[0-9]+)\][ \t]+\[[ \t]*(?P<iter>[0-9]+)/"
        r"(?P<per_epoch>[0-9]+)\][ \t]+(?P<body>.*:.*)$"
    ),
    hint=r"Epoch: \[[0-9]+\][ \t]+\[",
    tokens=rf"(?:{_TV_KEY}):[ \t]*{NUM}",
    field=rf"^(?P<key>{_TV_KEY}):[ \t]*(?P<value>{NUM})$",
    skip=frozenset({"eta"}),
    # `time`/`data` are seconds per iteration; `max mem` is max_memory_allocated in MiB;
    # of `0.41 (0.52)` the first is the window's median, the bracket the run's mean
    names={"time": "iter_time", "data": "data_time", "max mem": "max_mem_mib"},
    step_from=lambda: (
        pl.col("epoch").cast(pl.Int64) * pl.col("per_epoch").cast(pl.Int64)
        + pl.col("iter").cast(pl.Int64)
    ),
)

# ---- Swin Transformer's logger (microsoft/Swin-Transformer main.py, and its copies) ------
# `Train: [3/300][100/1251]\teta 0:05:12 lr 0.000125\ttime 0.3346 (0.3680)\tloss 1.4072
# (1.7318)\tgrad_norm 2.31 (2.10)\tmem 4954MB`: step epoch × n + i (the epoch alone where a
# copy prints no `[i/n]`); of `1.4072 (1.7318)` the batch's value is read; `mem` is
# max_memory_allocated in MiB. Its evaluation, `Test: [10/49]` / `Validate:` with the
# running means in brackets: the last line's means are the evaluation's, as val/<key>

_SWIN_TOKENS = rf"[A-Za-z][A-Za-z0-9@_]*:?[ \t]+{NUM}(?:MB)?"
SWIN_TRAIN = Shape(
    name="swin",
    line=(
        r"(?:^|[^A-Za-z0-9_])Train: \[(?P<epoch>[0-9]+)/[0-9]+\]"
        r"(?:\[(?P<iter>[0-9]+)/(?P<per_epoch>[0-9]+)\])?[ \t]+(?P<body>[A-Za-z].*)$"
    ),
    hint=r"Train: \[[0-9]+/[0-9]+\]",
    tokens=_SWIN_TOKENS,
    field=rf"^(?P<key>[A-Za-z][A-Za-z0-9@_]*):?[ \t]+(?P<value>{NUM})(?P<unit>MB)?$",
    units={"MB": ""},
    skip=frozenset({"eta", "wd"}),
    names={"time": "iter_time", "mem": "max_mem_mib", "Mem": "max_mem_mib"},
    step_from=lambda: (
        pl.when(pl.col("iter").is_not_null())
        .then(
            pl.col("epoch").cast(pl.Int64) * pl.col("per_epoch").cast(pl.Int64, strict=False)
            + pl.col("iter").cast(pl.Int64, strict=False)
        )
        .otherwise(pl.col("epoch").cast(pl.Int64))
    ),
)
SWIN_EVAL = Shape(
    name="swin",
    line=(
        r"(?:^|[^A-Za-z0-9_])(?:Validate:|Test: \[[0-9]+/[0-9]+\])[ \t]+"
        r"(?P<body>[A-Za-z].*\(.*)$"
    ),
    hint=r"(?:Validate:|Test: \[[0-9]+/[0-9]+\])[ \t]+[A-Za-z]",
    sniff="",
    tokens=rf"[A-Za-z][A-Za-z0-9@_]*[ \t]+{NUM}[ \t]+\({NUM}\)",
    field=rf"^(?P<key>[A-Za-z][A-Za-z0-9@_]*)[ \t]+{NUM}[ \t]+\((?P<value>{NUM})\)$",
    skip=frozenset({"Time", "time", "Mem", "mem"}),
    metric=lambda: pl.lit("val/") + pl.col("key"),
    follows=True,
)

# ---- PyTorch's ImageNet example (pytorch/examples imagenet/main.py, and its copies) -------

_PX_PAIR = rf"(?P<key>[A-Za-z][A-Za-z0-9@_]*)[ \t]+(?P<value>{NUM})"
PYTORCH_IMAGENET = Shape(
    name="pytorch_imagenet",
    line=(
        r"(?:^|[^A-Za-z0-9_])Epoch: \[(?P<epoch>[0-9]+)\]\[[ \t]*(?P<iter>[0-9]+)/"
        r"(?P<per_epoch>[0-9]+)\][ \t]+(?P<body>[A-Za-z].*)$"
    ),
    hint=r"Epoch: \[[0-9]+\]\[",
    tokens=rf"[A-Za-z][A-Za-z0-9@_]*[ \t]+{NUM}",
    field=rf"^{_PX_PAIR}$",
    # its AverageMeters: the batch's value, then the epoch's running mean in brackets
    names={"Time": "iter_time", "Data": "data_time", "Loss": "loss"},
    step_from=lambda: (
        pl.col("epoch").cast(pl.Int64) * pl.col("per_epoch").cast(pl.Int64)
        + pl.col("iter").cast(pl.Int64)
    ),
)
# its copies that print no per-epoch count (SwAV's, DeepCluster's: `Epoch: [0][50]
# Time 2.376 (1.927)  Data 0.000 (0.014)  Loss 4.2079 (4.2377)  Lr: 0.0019`): the step is
# kept as (epoch, iteration) until the file is read, then made epoch * n + iteration with
# n estimated from the whole file (builtin.Reader.finish, epoch_iter_steps)
EPOCH_ITER_SHIFT = 32
EPOCH_ITER = Shape(
    name="epoch_iter",
    line=(
        r"(?:^|[^A-Za-z0-9_])Epoch: \[(?P<epoch>[0-9]+)\]\[[ \t]*(?P<iter>[0-9]+)\][ \t]+"
        r"(?P<body>[A-Za-z].*)$"
    ),
    hint=r"Epoch: \[[0-9]+\]\[[ \t]*[0-9]+\][ \t]",
    tokens=rf"[A-Za-z][A-Za-z0-9@_]*:?[ \t]+{NUM}",
    field=rf"^(?P<key>[A-Za-z][A-Za-z0-9@_]*):?[ \t]+(?P<value>{NUM})$",
    names={"Time": "iter_time", "Data": "data_time", "Loss": "loss", "Lr": "lr"},
    step_from=lambda: (
        pl.col("epoch").cast(pl.Int64) * (1 << EPOCH_ITER_SHIFT) + pl.col("iter").cast(pl.Int64)
    ),
)

# MXNet's Speedometer callback (Module.fit, GluonCV's train scripts): `Epoch[0] Batch [49]
# Speed: 2489.32 samples/sec  accuracy=0.001182  lr=0.041613` (newer: `Batch [0-50]`),
# no per-epoch count either: read as EPOCH_ITER is
_MX_PAIR = rf"(?P<key>[A-Za-z][A-Za-z0-9_-]*)(?:=|:[ \t]*)(?P<value>{NUM})(?:[ \t]+samples/sec)?"
MXNET_SPEEDOMETER = Shape(
    name="epoch_iter",
    line=(
        r"(?:^|[^A-Za-z0-9_])Epoch\[(?P<epoch>[0-9]+)\][ \t]+Batch[ \t]*"
        r"\[(?:[0-9]+-)?(?P<iter>[0-9]+)\][ \t]+(?P<body>[A-Za-z].*)$"
    ),
    hint=r"Epoch\[[0-9]+\][ \t]+Batch[ \t]*\[",
    tokens=_unnamed(_MX_PAIR),
    field=rf"^{_MX_PAIR}$",
    names={"Speed": "samples_per_sec", "accuracy": "train/accuracy"},
    step_from=EPOCH_ITER.step_from,
)
# its evaluations: Module.fit's `Epoch[0] Validation-accuracy=0.17`, GluonCV's `[Epoch 0]
# validation: top1=0.171816 top5=0.379668`; at the last step before them
MXNET_VALIDATION = Shape(
    name="epoch_iter",
    line=(
        r"(?:^|[^A-Za-z0-9_])(?:Epoch\[[0-9]+\][ \t]+Validation-|\[Epoch [0-9]+\][ \t]+"
        r"validation:[ \t]*)(?P<body>[A-Za-z].*=.*)$"
    ),
    hint=r"Epoch(?:\[[0-9]+\][ \t]+Validation-| [0-9]+\][ \t]+validation:)",
    sniff="",
    tokens=_unnamed(_MX_PAIR),
    field=rf"^{_MX_PAIR}$",
    metric=lambda: pl.lit("val/") + pl.col("key"),
    follows=True,
)


def epoch_iter_steps(long: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """``long`` with its (epoch, iteration) steps made ``epoch * n + iteration``: ``n``,
    the iterations of an epoch, is the largest iteration logged plus the logging interval
    (the median step between consecutive iterations of an epoch). Returns the frame and n."""
    base = 1 << EPOCH_ITER_SHIFT
    epoch, it = pl.col("step") // base, pl.col("step") % base
    ei = long.select(epoch.alias("e"), it.alias("i")).unique().sort("e", "i")
    gaps = ei.select(pl.col("i").diff().over("e").alias("d")).get_column("d").drop_nulls()
    gaps = gaps.filter(gaps > 0)
    interval = int(gaps.median()) if gaps.len() else 1  # type: ignore[arg-type]
    last = ei.get_column("i").max()
    n = (int(last) if isinstance(last, int) else 0) + interval
    # an epoch's first iteration waits for the loader to start its workers: logged every
    # 50 iterations, it was half the points and made a 0.2 % wait read as 34 %
    first = (it == 0) & pl.col("metric").is_in(["data_time", "iter_time"])
    return long.filter(~first).with_columns((epoch * n + it).alias("step")), n


# the evaluation's result, ` * Acc@1 76.130 Acc@5 92.862` (its per-batch `Test: [i/n]`
# lines are running means and are left out)
PYTORCH_IMAGENET_EVAL = Shape(
    name="pytorch_imagenet",
    line=rf"^[ \t]*\* (?P<body>(?:Acc|Prec)@1[ \t]+{NUM}.*)$",
    hint=r"^[ \t]*\* (?:Acc|Prec)@1",
    sniff="",
    tokens=rf"[A-Za-z][A-Za-z0-9@_]*[ \t]+{NUM}",
    field=rf"^{_PX_PAIR}$",
    metric=lambda: pl.lit("val/") + pl.col("key"),
    follows=True,
)

# ---- YOLOX (its Trainer.after_iter) --------------------------------------------------------

# `epoch: 1/20, iter: 10/112, mem: 4605Mb, iter_time: 0.671s, data_time: 0.001s,
# total_loss: 11.8, iou_loss: 2.0, l1_loss: 0.0, conf_loss: 6.7, cls_loss: 3.0, lr:
# 9.965e-08, size: 640, ETA: 0:24:55` after loguru's prefix
_YX_PAIR = rf"(?P<key>[A-Za-z_][A-Za-z0-9_]*):[ \t]*(?P<value>{NUM})(?P<unit>Mb|s)?"
YOLOX = Shape(
    name="yolox",
    line=(
        r"(?:^|[^A-Za-z0-9_])epoch: (?P<epoch>[0-9]+)/[0-9]+, iter: (?P<iter>[0-9]+)/"
        r"(?P<per_epoch>[0-9]+), (?P<body>.*total_loss: .*)$"
    ),
    hint=r"epoch: [0-9]+/[0-9]+, iter: [0-9]+/",
    split=",",
    field=rf"^[ \t]*{_YX_PAIR}[ \t]*$",
    units={"Mb": "", "s": ""},
    # `size` is the multi-scale input size of the iteration, not a measurement
    skip=frozenset({"ETA", "size"}),
    # `mem` is gpu_mem_usage(): max_memory_allocated in MiB; times are seconds
    names={"mem": "max_mem_mib"},
    step_from=_epoch_iter_step,
)

# ---- pycocotools' summary (printed by YOLOX, detectron2, torchvision's references, DETR,
# MMDetection ...): ` Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all |
# maxDets=100 ] = 0.374`; -1.000 where nothing fits (left out as COCO's undefined)

_COCO_IOU = {"0.50:0.95": "", "0.50": "50", "0.75": "75"}
_COCO_AREA = {"all": "", "small": "s", "medium": "m", "large": "l"}


def _coco_metric() -> pl.Expr:
    """``val/coco/AP``, ``val/coco/AP50``, ``val/coco/APs``, ``val/coco/AR@100`` …"""
    iou = pl.col("iou").replace_strict(_COCO_IOU, default="", return_dtype=pl.String)
    area = pl.col("area").replace_strict(_COCO_AREA, default="", return_dtype=pl.String)
    ap = pl.lit("val/coco/AP") + iou + area
    ar = pl.lit("val/coco/AR") + iou + area + pl.lit("@") + pl.col("dets")
    return pl.when(pl.col("key").str.contains("Precision")).then(ap).otherwise(ar)


COCO_SUMMARY = Shape(
    name="coco_summary",
    line=(
        r"^[ \t]*(?P<key>Average (?:Precision|Recall))[ \t]+\(A[PR]\)[ \t]*@\[[ \t]*"
        r"IoU=(?P<iou>[0-9.:]+)[ \t]*\|[ \t]*area=[ \t]*(?P<area>[a-z]+)[ \t]*\|[ \t]*"
        rf"maxDets=[ \t]*(?P<dets>[0-9]+)[ \t]*\][ \t]*=[ \t]*(?P<value>{NUM})[ \t]*$"
    ),
    hint=r"Average (?:Precision|Recall)",
    sniff="",
    metric=_coco_metric,
    follows=True,
)

#: the framework shapes, read after the built-in ones (see registry.SHAPES)
SHAPES: tuple[Shape, ...] = (
    DETECTRON2,
    MMENGINE_EPOCH,
    MMENGINE_ITER,
    MMENGINE_EVAL,
    PADDLECLAS_TRAIN,
    PADDLECLAS_EVAL,
    FAIRSEQ_INNER,
    FAIRSEQ_EPOCH,
    FAIRSEQ_VALID,
    NEMO,
    TORCHVISION,
    PYTORCH_IMAGENET,
    EPOCH_ITER,
    MXNET_SPEEDOMETER,
    MXNET_VALIDATION,
    SWIN_TRAIN,
    SWIN_EVAL,
    PYTORCH_IMAGENET_EVAL,
    YOLOX,
    COCO_SUMMARY,
)
