"""Canonical metric names and the one alias table that maps every framework's spelling.

The table is documented in docs/metrics.md. Matching is on a normalized key
(lower case, surrounding white space removed), exact first, then the patterns below in
order. A user's own aliases (config ``[tool.trainlens.aliases]``) are consulted first.
Metrics that match nothing keep their own name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from trainlens.core.dataclass import dataclass

CANONICAL_METRICS: dict[str, str] = {
    "train/loss": "training loss (per step, or per logging interval)",
    "val/loss": "validation loss; per-domain losses are val/loss/<domain>",
    "lr": "learning rate actually used at the step (first param group)",
    "grad_norm": "global gradient norm before clipping",
    "grad_norm/<tensor>": "per-tensor gradient norm before clipping",
    "update_ratio": "global ||Δw|| / ||w|| of the optimizer step",
    "update_ratio/<tensor>": "per-tensor update/weight ratio",
    "entropy": "mean entropy of the output distribution (nats)",
    "tokens_per_sec": "tokens processed per second (whole job)",
    "samples_per_sec": "samples (sequences) per second (whole job)",
    "step_time": "wall-clock seconds per optimizer step",
    "step_time_avg": "running mean of seconds per step (as some logs print it)",
    "train_time": "cumulative training seconds",
    "mem/allocated": "device memory allocated (bytes)",
    "mem/reserved": "device memory reserved by the allocator (bytes)",
    "mem/rss": "host resident set size (bytes)",
    "padding_frac": "fraction of tokens in the batch that are padding",
    "dataloader_wait": "seconds per step spent waiting for data",
    "epoch": "epoch counter (may be fractional)",
    "loss_scale": "mixed-precision loss scale",
    "tflops_per_gpu": "achieved TFLOP/s per GPU as the framework reports it",
    "mfu": "model FLOPs utilization (0..1)",
    "train/accuracy": "training accuracy",
    "val/accuracy": "validation accuracy",
    "val/perplexity": "validation perplexity as logged",
    "train/perplexity": "training perplexity as logged",
    "weight_norm": "global weight norm",
    "tokens": "cumulative tokens seen",
    "gpu<i>/power_w": "power drawn by GPU <i> (W), as sampled; the input of measured energy",
    "gpu<i>/power_pct": "power drawn by GPU <i> as a percentage of its power limit",
    "gpu<i>/util": "utilization of GPU <i> (percent of time a kernel ran)",
    "gpu<i>/mem_used": "memory in use on GPU <i> (bytes)",
    "gpu<i>/mem_used_pct": "memory in use on GPU <i> (percent of the device's memory)",
    "gpu<i>/temp": "temperature of GPU <i> (°C)",
}


@dataclass(frozen=True)
class Alias:
    canonical: str
    scale: float = 1.0  # multiply the value by this to get canonical units


def _a(canonical: str, scale: float = 1.0) -> Alias:
    return Alias(canonical, scale)


# Exact aliases on the normalized key. Sources noted once per framework.
EXACT_ALIASES: dict[str, Alias] = {
    # plain keys written by hand-rolled loops
    "loss": _a("train/loss"),
    "train_loss": _a("train/loss"),
    "training_loss": _a("train/loss"),
    "train/loss_step": _a("train/loss"),
    "train_loss_step": _a("train/loss"),
    "loss/train": _a("train/loss"),
    "lm_loss": _a("train/loss"),
    "val_loss": _a("val/loss"),
    "valid_loss": _a("val/loss"),
    "validation_loss": _a("val/loss"),
    "eval_loss": _a("val/loss"),
    "loss/val": _a("val/loss"),
    "loss/validation": _a("val/loss"),
    "loss/eval": _a("val/loss"),
    "lr": _a("lr"),
    "learning_rate": _a("lr"),
    # reid-strong-baseline's ignite logger: `Epoch[2] Iteration[150/3385] … Base Lr: 7.28e-05`
    "base_lr": _a("lr"),
    "grad_norm": _a("grad_norm"),
    "gnorm": _a("grad_norm"),
    "gradnorm": _a("grad_norm"),
    "total_norm": _a("grad_norm"),
    "norm": _a("grad_norm"),  # llm.c: "norm:" is the pre-clip global grad norm
    "update_ratio": _a("update_ratio"),
    "update_to_weight": _a("update_ratio"),
    "entropy": _a("entropy"),
    "output_entropy": _a("entropy"),
    "tokens_per_sec": _a("tokens_per_sec"),
    "tokens_per_second": _a("tokens_per_sec"),
    "tok/s": _a("tokens_per_sec"),
    "tok_per_sec": _a("tokens_per_sec"),
    "tokens/s": _a("tokens_per_sec"),
    "samples_per_sec": _a("samples_per_sec"),
    "samples_per_second": _a("samples_per_sec"),
    "train_samples_per_second": _a("samples_per_sec"),
    "step_time": _a("step_time"),
    "step_time_s": _a("step_time"),
    "iter_time": _a("step_time"),
    "time/step": _a("step_time"),
    "step_time_ms": _a("step_time", 1e-3),
    "dt_ms": _a("step_time", 1e-3),
    "step_avg": _a("step_time_avg"),
    "train_time": _a("train_time"),
    "mem_allocated": _a("mem/allocated"),
    "memory_allocated": _a("mem/allocated"),
    "mem_bytes": _a("mem/allocated"),
    "mem_reserved": _a("mem/reserved"),
    "memory_reserved": _a("mem/reserved"),
    "mem_rss": _a("mem/rss"),
    "rss": _a("mem/rss"),
    # W&B's system metrics, as its run reader names them (system/<key>, lower case)
    "system/proc.memory.rssmb": _a("mem/rss", 2**20),
    "padding_frac": _a("padding_frac"),
    "padding_fraction": _a("padding_frac"),
    "dataloader_wait": _a("dataloader_wait"),
    "data_time": _a("dataloader_wait"),
    "data_wait": _a("dataloader_wait"),
    "epoch": _a("epoch"),
    "loss_scale": _a("loss_scale"),
    "mfu": _a("mfu"),
    # Keras names the training metric plainly (`accuracy`) and the validation one
    # `val_accuracy`; its TensorBoard logdir gives train/accuracy
    "accuracy": _a("train/accuracy"),
    "train_accuracy": _a("train/accuracy"),
    "train_acc": _a("train/accuracy"),
    "val_accuracy": _a("val/accuracy"),
    "val_acc": _a("val/accuracy"),
    "valid_acc": _a("val/accuracy"),
    "valid_accuracy": _a("val/accuracy"),
    "validation_acc": _a("val/accuracy"),
    "validation_accuracy": _a("val/accuracy"),
    # a test set evaluated each epoch is the held-out set the run is watched on: the
    # validation's role when no validation series claims it (see AliasTable.resolve)
    "test_acc": _a("val/accuracy"),
    "test_accuracy": _a("val/accuracy"),
    "test_loss": _a("val/loss"),
    "eval_accuracy": _a("val/accuracy"),
    "val_ppl": _a("val/perplexity"),
    "eval_perplexity": _a("val/perplexity"),
    "ppl": _a("train/perplexity"),
    "weight_norm": _a("weight_norm"),
    "tokens": _a("tokens"),
    # llm.c / modded-nanogpt key:value logs
    "trl": _a("train/loss"),
    "tel": _a("val/loss"),
    # Megatron-LM / Megatron-DeepSpeed iteration lines
    "tflops": _a("tflops_per_gpu"),
    "elapsed time per iteration (ms)": _a("step_time", 1e-3),
    "elapsed time per iteration (s)": _a("step_time"),
    # nanotron's iteration lines (`iteration: N / M | lm_loss: ... |`)
    "elapsed_time_per_iteration_ms": _a("step_time", 1e-3),
    "model_tflops_per_gpu": _a("tflops_per_gpu"),
    "cuda_memory_allocated": _a("mem/allocated"),
    "cuda_max_memory_reserved": _a("mem/reserved"),
    # Megatron validation lines, named like Megatron's own TensorBoard tags
    "lm loss validation": _a("val/loss"),
    "lm loss validation ppl": _a("val/perplexity"),
    # TensorBoard tags people use
    "loss/train_step": _a("train/loss"),
    "train/loss_iter": _a("train/loss"),
    # Megatron-LM's TensorBoard tags (`iteration-time`, `params-norm`, …: see the
    # separator rule) and NeMo's
    "iteration_time": _a("step_time"),
    "params_norm": _a("weight_norm"),
    "mem_allocated_bytes": _a("mem/allocated"),
    "mem_reserved_bytes": _a("mem/reserved"),
    "reduced_train_loss": _a("train/loss"),
    "train_step_timing": _a("step_time"),
    "train_step_timing_in_s": _a("step_time"),
    # torchtitan's metric logger (under loss_metrics/, memory/, time_metrics/ folders)
    "global_avg_loss": _a("train/loss"),
    "throughput(tps)": _a("tokens_per_sec"),
    "tps": _a("tokens_per_sec"),
    "mfu(%)": _a("mfu", 0.01),
    "n_tokens_seen": _a("tokens"),
    "end_to_end(s)": _a("step_time"),
    "data_loading(s)": _a("dataloader_wait"),
    "max_active(gib)": _a("mem/allocated", float(1 << 30)),
    "max_reserved(gib)": _a("mem/reserved", float(1 << 30)),
    # ---- issue 26, JSON family (t23-fwjson): a total beside its parts is the train loss
    # (detectron2's total_loss, MMDetection-style loss/total); see trainlens/core/units.py
    "total_loss": _a("train/loss"),
    "loss_total": _a("train/loss"),
    "loss/total": _a("train/loss"),
    "train_total_loss": _a("train/loss"),
    # ---- end t23-fwjson
}

# ---- issue 26, text logs: frameworks' stdout names (readers/textlog/frameworks.py, blocks.py)
TEXT_FRAMEWORK_ALIASES: dict[str, Alias] = {
    # detectron2 and MMEngine: the sum of the loss terms is the train loss
    "total_loss": _a("train/loss"),
    # detectron2's `max_mem: 2725M`, MMEngine's `memory: 9182`: max_memory_allocated in MiB
    "max_mem_mib": _a("mem/allocated", float(1 << 20)),
    # fairseq: words (target tokens) per second of the whole job; training wall seconds
    "wps": _a("tokens_per_sec"),
    "train_wall": _a("train_time"),
    # Composer / LLM Foundry: the total of the loss terms is the train loss
    "loss/train/total": _a("train/loss"),
    "metrics/eval/languagecrossentropy": _a("val/loss"),
    # OLMo and OLMo-core (peak memory in MB of 10^6 bytes: olmo's peak_gpu_memory)
    "train/crossentropyloss": _a("train/loss"),
    "train/ce loss": _a("train/loss"),
    "system/peak gpu memory (mb)": _a("mem/allocated", 1e6),
    "optim/total grad norm": _a("grad_norm"),
    "optim/lr (group 0)": _a("lr"),
    "optim/learning rate group 0": _a("lr"),
    # PyTorch's word_language_model example and its copies: `| ms/batch 11.77 |`
    "ms/batch": _a("step_time", 1e-3),
    "ms/step": _a("step_time", 1e-3),
}
EXACT_ALIASES.update(TEXT_FRAMEWORK_ALIASES)

# Patterns, tried in order after the exact table. ``\1`` keeps a suffix.
PATTERN_ALIASES: list[tuple[re.Pattern[str], str]] = [
    # Lightning LearningRateMonitor: lr-AdamW, lr-Adam/pg1, lr-SGD-momentum
    (re.compile(r"^lr-[a-z0-9_]+$"), "lr"),
    (re.compile(r"^lr-[a-z0-9_]+/pg(\d+)$"), r"lr/pg\1"),
    # per-domain validation losses
    # (not `_epoch` / `_step`: Lightning's per-epoch and per-step aggregates of one loss;
    # not `_vs_iterations`: Keras' iteration-indexed evaluation, see readers/tensorboard)
    (
        re.compile(
            r"^(?:val|valid|validation|eval)[/_]loss[/_](?!(?:epoch|step|vs_iterations)$)(.+)$"
        ),
        r"val/loss/\1",
    ),
    # the same, named the HF Trainer way: each eval set's loss is eval_<set>_loss (a dict
    # of eval datasets), which the eval_* rule below would make val/<set>_loss
    (
        re.compile(r"^(?:val|valid|validation|eval)_(.+)_loss$"),
        r"val/loss/\1",
    ),
    # per-tensor signals
    (re.compile(r"^(?:grad_norm|grad_norms|gradnorm|grad-norm)/(.+)$"), r"grad_norm/\1"),
    (re.compile(r"^(?:update_ratio|update_to_weight)/(.+)$"), r"update_ratio/\1"),
    # HF Trainer eval_* and Lightning val_*
    (re.compile(r"^eval_(.+)$"), r"val/\1"),
    (re.compile(r"^val_(.+)$"), r"val/\1"),
]


#: The per-tensor families: ``<family>/<tensor>``, one series per parameter tensor (a large
#: model logs hundreds), beside the family's global figure (``grad_norm``).
TENSOR_FAMILIES = ("grad_norm", "update_ratio")


def tensor_family(metric: str) -> str | None:
    """``grad_norm`` for ``grad_norm/<tensor>`` (a per-tensor series), else None."""
    head, sep, rest = metric.partition("/")
    return head if sep and rest and head in TENSOR_FAMILIES else None


# Per-device GPU metrics (the device rule): ``gpu<i>/<field>``, one name per device, so
# measured energy (calculators/energy.py) finds every GPU's power by one name. A device
# prefix — W&B's system metrics ``gpu.<i>.`` (``system/gpu.0.powerWatts``; ``system.`` in
# the public API's history dumps), or ``gpu<i>/``, ``gpu_<i>/``, ``gpu<i>.`` — followed by
# a field spelled as below. W&B's ``gpu.process.<i>.*`` (the same GPU again, counted for
# this process) is left alone: mapping it too would count a device twice.
GPU_DEVICE_PREFIX = re.compile(r"^(?:system\.)?gpu[._]?(\d+)[./](.+)$")
GPU_FIELDS: dict[str, Alias] = {
    # W&B's system metric keys (wandb-core's nvidia monitor), lower case
    "powerwatts": Alias("power_w"),
    "powerpercent": Alias("power_pct"),
    "gpu": Alias("util"),
    "memoryallocatedbytes": Alias("mem_used"),
    "memoryallocated": Alias("mem_used_pct"),
    "temp": Alias("temp"),
    # nvidia-smi --query-gpu fields, with the units its CSV header carries
    "power.draw": Alias("power_w"),
    "power.draw [w]": Alias("power_w"),
    "utilization.gpu": Alias("util"),
    "utilization.gpu [%]": Alias("util"),
    "memory.used": Alias("mem_used", 2**20),  # nvidia-smi reports MiB
    "memory.used [mib]": Alias("mem_used", 2**20),
    "temperature.gpu": Alias("temp"),
    # the canonical fields themselves
    "power_w": Alias("power_w"),
    "power_pct": Alias("power_pct"),
    "util": Alias("util"),
    "mem_used": Alias("mem_used"),
    "mem_used_pct": Alias("mem_used_pct"),
}
# a canonical per-device name: device and field
GPU_METRIC = re.compile(r"^gpu(\d+)/(power_w|power_pct|util|mem_used|mem_used_pct|temp)$")
GPU_POWER_FIELD = "power_w"


def gpu_alias(key: str) -> Alias | None:
    """The device rule on a normalized key: ``gpu.0.powerwatts`` -> ``gpu0/power_w``."""
    m = GPU_DEVICE_PREFIX.match(key)
    field = GPU_FIELDS.get(m.group(2)) if m else None
    if m is None or field is None:
        return None
    return Alias(f"gpu{int(m.group(1))}/{field.canonical}", field.scale)


# Namespaces by rule (after the exact table and the patterns): a name under one of these
# folders is the rest of it looked up again, so `perf/tokens_per_sec`, `optim/grad_norm`,
# `sys/mem_bytes`, `train/update_to_weight` or `time/step_time_ms` need no entry each.
# W&B, TensorBoard and hand-rolled loggers group tags this way; the folder names what
# kind of signal it is, never which split. A rest that maps to nothing keeps the whole
# name (`train/accuracy` stays `train/accuracy`).
NAMESPACES = frozenset(
    {
        "perf",
        "performance",
        "sys",
        "system",
        "train",
        "training",
        "optim",
        "optimizer",
        "opt",
        "throughput",
        "speed",
        "charts",
        "time",
        "timing",
        "timers",
        "metrics",
        "stats",
        "losses",
        "loss_metrics",
        "time_metrics",
        "trainer",
        "gpu",
        "cuda",
        "memory",
        "mem",
    }
)
# memory folders: `memory/allocated` is `mem_allocated` looked up
MEMORY_NAMESPACES = frozenset({"memory", "mem", "gpu", "cuda", "sys", "system"})
# split folders: the rest's canonical name moved to the validation split (`eval/loss` ->
# `val/loss`, `eval/ppl` -> `val/perplexity`, `test/accuracy` -> `val/accuracy`); a value
# under these is never a training metric, even when the rest alone would be one.
SPLIT_NAMESPACES = frozenset(
    {"val", "valid", "validation", "eval", "evaluation", "test", "dev", "validation_metrics"}
)
_SEPARATORS = re.compile(r"[- ]+")
_MAX_NAMESPACE_DEPTH = 4  # `train/optim/lr` is two; deeper is a per-tensor path, not folders


def _is_test_name(name: str) -> bool:
    """True for a test set's name (`test_acc`, `Test Acc`, `test/loss`)."""
    return re.match(r"test(?:[_ /-]|$)", normalize_key(name)) is not None


def normalize_key(name: str) -> str:
    return name.strip().lower()


def _as_val(canonical: str) -> str:
    if canonical.startswith("val/"):
        return canonical
    if canonical.startswith("train/"):
        return "val/" + canonical[len("train/") :]
    return "val/" + canonical


# ---- trainlens' own writers ---------------------------------------------------------
# What trainlens writes, trainlens reads (issue 25). The monitor's files carry canonical
# names as they are; where its figures go into another tool's logger beside that tool's
# own (LightningCallback(log_to_lightning=True) into CSVLogger, TensorBoardLogger,
# WandbLogger, ...) they are named OWN_PREFIX + the canonical name, and read back as the
# canonical name: the rest after the prefix is looked up as the monitor's own file would
# have it (an alias when it has one, else the rest itself, its case kept).
OWN_PREFIX = "trainlens/"


def own_name(raw: str) -> str | None:
    """The name a trainlens writer put under :data:`OWN_PREFIX`, else None."""
    name = raw.strip()
    if name[: len(OWN_PREFIX)].lower() != OWN_PREFIX or len(name) == len(OWN_PREFIX):
        return None
    return name[len(OWN_PREFIX) :]


# ---- end of trainlens' own writers ---------------------------------------------------


class AliasTable:
    """Maps raw metric names to canonical ones, with user overrides first."""

    def __init__(self, user: Mapping[str, str] | None = None) -> None:
        self.user: dict[str, Alias] = {normalize_key(k): Alias(v) for k, v in (user or {}).items()}

    def with_defaults(self, defaults: Mapping[str, Alias]) -> AliasTable:
        """This table with a reader's own aliases for one file's framework (detectron2's
        ``time`` is seconds per iteration) consulted after the user's, before the table."""
        table = AliasTable()
        table.user = {**{normalize_key(k): v for k, v in defaults.items()}, **self.user}
        return table

    def lookup(self, raw: str) -> Alias | None:
        key = normalize_key(raw)
        own = own_name(raw) if key not in self.user else None
        if own is not None:  # see OWN_PREFIX
            return self.lookup(own) or Alias(own)
        return self._lookup(key, _MAX_NAMESPACE_DEPTH)

    def _lookup(self, key: str, depth: int) -> Alias | None:
        hit = self.user.get(key) or EXACT_ALIASES.get(key)
        if hit is not None:
            return hit
        for pattern, template in PATTERN_ALIASES:
            m = pattern.match(key)
            if m:
                return Alias(m.expand(template))
        device = gpu_alias(key)
        if device is not None:
            return device
        return self._namespaced(key, depth) or self._separated(key, depth)

    def _separated(self, key: str, depth: int) -> Alias | None:
        """The separator rule: words joined by `-` or a space are the same name joined by
        `_` (Megatron's `grad norm` and `learning-rate`, NeMo's `train_step_timing in s`)."""
        flat = _SEPARATORS.sub("_", key)
        return self._lookup(flat, depth - 1) if flat != key and depth > 0 else None

    def _namespaced(self, key: str, depth: int) -> Alias | None:
        """The namespace rule (see NAMESPACES): ``<folder>/<rest>`` is ``<rest>``'s
        alias, moved to the validation split under a split folder."""
        folder, sep, rest = key.partition("/")
        if not sep or not rest or depth <= 0:
            return None
        if folder in SPLIT_NAMESPACES:
            inner = self._lookup(rest, depth - 1)
            return Alias(_as_val(inner.canonical if inner else rest), inner.scale if inner else 1.0)
        if folder not in NAMESPACES:
            return None
        inner = self._lookup(rest, depth - 1)
        if inner is None and folder in MEMORY_NAMESPACES and "/" not in rest:
            inner = self._lookup("mem_" + rest, depth - 1)
        return inner

    def resolve(self, raw_names: Iterable[str]) -> dict[str, Alias]:
        """Canonical alias for each raw name. When two raw names claim one canonical
        name, the one spelled exactly like it wins, else the first seen; the others
        keep their own names (nothing is merged silently)."""
        out: dict[str, Alias] = {}
        claimed: dict[str, str] = {}
        looked = {raw: self.lookup(raw) for raw in dict.fromkeys(raw_names)}

        # names already spelled canonically claim first (stable sort keeps file order; a
        # name that keeps its own must find it free), then trainlens' own (OWN_PREFIX):
        # its `trainlens/lr`, measured every optimizer step, before a LearningRateMonitor's
        # `lr-AdamW` of every 50th
        def claims_first(name: str) -> int:
            alias = looked[name]
            if alias is None or alias.canonical == name:
                return 0
            if _is_test_name(name) and alias.canonical.startswith("val/"):
                return 3  # a test set takes the validation's name only when it is free
            return 1 if own_name(name) is not None else 2

        ordered = sorted(looked, key=claims_first)
        for raw in ordered:
            alias = looked[raw] or Alias(raw)
            if alias.canonical in claimed:
                alias = Alias(raw)
            claimed.setdefault(alias.canonical, raw)
            out[raw] = alias
        return out
