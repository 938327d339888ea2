"""A run configuration archived beside the run: the declared LR schedule and the model.

**Where.** An MLflow run's own params; else beside the run (the run's folder, or the
folder of the file it was read from):
``<stem>.config.json``, config.json, run_config.json, trainlens.json, hparams.yaml/.yml
(Lightning), config.yaml/.yml (W&B beside an exported file), ``files/config.yaml`` (a W&B
run folder), ``.hydra/config.yaml`` (Hydra), then ``.hydra/config.yaml`` in the folders
above, up to :data:`PARENT_LEVELS` levels: a logger's folder inside a Hydra output dir
(``outputs/<date>/<time>/`` holding ``.hydra/`` beside ``tb/``, ``tb/lightning_logs/
version_0/`` or ``wandb/run-…/``). The first file that holds a mapping is the run config;
one found above the run's folder is said in an info note (``run-config``: which file, how
many levels up), since nothing in the run's own folder points there.
YAML is read by :mod:`trainlens.core.yamlio` (safe, bounded; Lightning's ``!!python/…``
tags are read as the plain data under them). A W&B ``config.yaml`` is unwrapped: each key
is ``{value: …, desc: …}``, and ``_wandb`` / ``wandb_version`` are W&B's own.

**Keys.** Nested mappings are searched, so Hydra's ``optim.lr`` or
``scheduler.warmup_steps`` is found without listing paths: each key is looked up by the
spellings frameworks use (:data:`SCHEDULE_KEYS`, :data:`MODEL_KEYS`), preferring a key
under a scheduler / optimizer / training section, then the shallowest. Spellings that
mean something else elsewhere (``schedule``, ``type``, ``lr``, ``steps``, …) count only
at the top level or under such a section, so a diffusion model's ``noise.schedule`` is
not taken for the LR schedule. A string ``${a.b}`` (a Hydra interpolation left in the
file) is looked up in the same config.

**Strict or lenient.** What the user passes (``--schedule``, ``[tool.trainlens]``) is
strict: a value that cannot be understood is a :class:`ConfigError`. A run's own config
is not the user's to fix: a file that cannot be read, or a schedule whose shape or numbers
cannot be understood, is a data-quality note on the run (file and key), the run is judged
without a declared schedule, and the analysis goes on.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from trainlens.core.dataclass import dataclass
from trainlens.core.errors import ConfigError
from trainlens.core.run import DataIssue, Run
from trainlens.core.yamlio import RefusedFile, read_bounded, read_yaml

CANDIDATES = (
    "config.json",
    "run_config.json",
    "trainlens.json",
    "hparams.yaml",
    "hparams.yml",
    "config.yaml",
    "config.yml",
    "files/config.yaml",
    ".hydra/config.yaml",
)
#: looked for in the folders above the run's (a Hydra output dir holding the logger's)
PARENT_CANDIDATES = (".hydra/config.yaml",)
#: how many folders up: ``tb/`` (1), ``wandb/run-…/`` (2), ``tb/lightning_logs/version_0/``
#: (3) inside ``outputs/<date>/<time>/``
PARENT_LEVELS = 3

SCHEDULE_KEYS: dict[str, tuple[str, ...]] = {
    "shape": (
        "shape",
        "lr_schedule",
        "schedule",
        "lr_scheduler_type",
        "scheduler",
        "lr_decay_style",
        "decay_style",
        "type",
        "name",
        "_target_",
    ),
    "warmup_steps": (
        "warmup_steps",
        "num_warmup_steps",
        "lr_warmup_steps",
        "warmup",
        "lr_warmup_iters",
        "warmup_iters",
    ),
    "peak_lr": ("peak_lr", "max_lr", "lr", "learning_rate", "base_lr"),
    "min_lr": ("min_lr", "lr_min", "final_lr", "end_lr", "eta_min"),
    "total_steps": (
        "total_steps",
        "max_steps",
        "num_training_steps",
        "train_iters",
        "lr_decay_iters",
        "decay_end",
        "steps",
    ),
    "decay_steps": ("decay_steps", "cooldown_steps", "num_decay_steps"),
    "stable_steps": ("stable_steps", "num_stable_steps"),
    "step_size": ("step_size", "lr_step_size"),
    "gamma": ("gamma", "lr_gamma", "decay_rate"),
    "first_step": ("first_step",),
}

MODEL_KEYS: dict[str, tuple[str, ...]] = {
    "n_params": (
        "n_params",
        "num_params",
        "params",
        "model_params",
        "n_params_non_embedding",
        "non_embedding_params",
    ),
    "gpu": ("gpu", "device", "hardware", "accelerator"),
    "n_gpus": ("n_gpus", "num_gpus", "world_size", "gpus"),
    "dtype": ("dtype", "precision"),
    "layers": ("n_layer", "n_layers", "num_layers", "num_hidden_layers", "layers"),
    "heads": ("n_head", "n_heads", "num_heads", "num_attention_heads", "heads"),
    "head_dim": ("head_dim",),
    "seq_len": ("seq_len", "seq_length", "block_size", "max_seq_length", "context_length"),
}

#: every key name looked up, lower case
_SPELLINGS = frozenset(
    s for table in (SCHEDULE_KEYS, MODEL_KEYS) for spellings in table.values() for s in spellings
) | {"warmup_ratio", "warmup_frac"}

#: sections whose keys describe the schedule and the optimizer: a key under one wins
SECTIONS = frozenset(
    {
        "scheduler",
        "lr_scheduler",
        "lr_schedule",
        "schedule",
        "sched",
        "lr",
        "optim",
        "optimizer",
        "optimization",
        "training",
        "trainer",
        "train",
    }
)
#: spellings too generic to trust anywhere: only at the top level or under a section
GENERIC = frozenset({"shape", "schedule", "scheduler", "lr", "steps", "gamma", "warmup"})
#: spellings that name the schedule only directly under a scheduler section
SCHEDULER_ONLY = frozenset({"type", "name", "_target_"})
SCHEDULER_PARENTS = frozenset({"scheduler", "lr_scheduler", "lr_schedule", "schedule", "sched"})

#: integer schedule keys; a value past 2**62 is no step count (and overflows int64 later)
_INT_KEYS = (
    "warmup_steps",
    "total_steps",
    "decay_steps",
    "stable_steps",
    "step_size",
    "first_step",
)
_MAX_STEPS = float(2**62)
_MAX_DEPTH = 32  # configs nest under 10 levels; deeper content is not searched
_INTERPOLATION = re.compile(r"^\$\{([A-Za-z0-9_.\-]+)\}$")
_WANDB_OWN = ("_wandb", "wandb_version")
_KEY_SEP = re.compile(r"[/.]")


@dataclass(frozen=True)
class ConfigProblem:
    """A schedule key whose value cannot be understood."""

    key: str  # the key as found in the config, e.g. "optim.warmup_steps"
    message: str  # what is wrong, one clause


# ---- finding and loading ------------------------------------------------------------------


def _candidates(run: Run) -> list[Path]:
    src = Path(run.source)
    if src.is_dir():
        folder, names = src, list(CANDIDATES)
    elif src.is_file():
        folder, names = src.parent, [f"{src.stem}.config.json", *CANDIDATES]
    else:  # a Run made in memory: its source names no place to look
        return []
    above = [folder.parents[i] for i in range(min(PARENT_LEVELS, len(folder.parents)))]
    return [folder / n for n in names] + [d / n for d in above for n in PARENT_CANDIDATES]


def _levels_up(config: Path, run: Run) -> int:
    """How many folders above the run's own the config file's folder lies (0: beside)."""
    src = Path(run.source)
    folder = src if src.is_dir() else src.parent
    owner = config.parent.parent if config.parent.name == ".hydra" else config.parent
    return folder.parents.index(owner) + 1 if owner in folder.parents else 0


def _read(path: Path) -> Any:
    """The document in a JSON or YAML file (RefusedFile when it cannot be read)."""
    if path.suffix != ".json":
        return read_yaml(path)
    text = read_bounded(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RefusedFile(str(path), f"not valid JSON (line {exc.lineno}): {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # nested past the recursion limit
        raise RefusedFile(str(path), f"not read: {type(exc).__name__}") from None


def unwrap_wandb(data: dict[str, Any]) -> dict[str, Any]:
    """A W&B ``config.yaml`` (each key ``{value: …, desc: …}``) as a plain config;
    anything else unchanged."""

    def wrapped(v: Any) -> bool:
        return isinstance(v, dict) and "value" in v and set(v) <= {"value", "desc"}

    own = [k for k in _WANDB_OWN if k in data]
    rest = {k: v for k, v in data.items() if k not in _WANDB_OWN}
    if not (own or (rest and all(wrapped(v) for v in rest.values()))):
        return data
    return {k: v["value"] if wrapped(v) else v for k, v in rest.items()}


def find_run_config(
    run: Run, notes: list[DataIssue] | None = None
) -> tuple[dict[str, Any], str | None]:
    """The run's configuration and where it came from: its own MLflow params first (a
    file beside a SQLite store of many runs belongs to none of them in particular), else
    the first file found beside the run. A file that is there but cannot be read is noted
    in ``notes`` and the search goes on."""
    params = run.metadata.get("params")
    if isinstance(params, dict) and params:
        return dict(params), f"{run.source} (params)"
    for cand in _candidates(run):
        if not cand.is_file():
            continue
        try:
            data = _read(cand)
        except RefusedFile as exc:
            if notes is not None:
                notes.append(
                    DataIssue(
                        kind="bad-config",
                        source=str(cand),
                        message=f"{exc.reason}; not used as the run's config",
                    )
                )
            continue
        if isinstance(data, dict) and data:  # a list or a scalar is no run config
            _note_above(cand, run, notes)
            return unwrap_wandb(data), str(cand)
    return {}, None


def _note_above(cand: Path, run: Run, notes: list[DataIssue] | None) -> None:
    """An info note when the config used lies in a folder above the run's own."""
    up = _levels_up(cand, run)
    if up and notes is not None:
        notes.append(
            DataIssue(
                kind="run-config",
                source=str(cand),
                message=(
                    f"run config read from {cand} ({up} folder{'s' * (up > 1)} above the "
                    "run's): its declared schedule and model are used"
                ),
                severity="info",
            )
        )


def config_above(
    run: Run, used: str | None, notes: list[DataIssue] | None = None
) -> tuple[dict[str, Any], str | None]:
    """A Hydra config in a folder above the run's, other than ``used``: asked when the
    config beside the run declares no schedule (a W&B run folder's own ``config.yaml``
    holds only W&B's keys unless the script passed its config to ``wandb.init``)."""
    src = Path(run.source)
    folder = src if src.is_dir() else src.parent
    for d in [folder.parents[i] for i in range(min(PARENT_LEVELS, len(folder.parents)))]:
        for n in PARENT_CANDIDATES:
            cand = d / n
            if str(cand) == used or not cand.is_file():
                continue
            try:
                data = _read(cand)
            except RefusedFile:
                continue  # (noted when find_run_config met it first; else not the run's)
            if isinstance(data, dict) and data:
                _note_above(cand, run, notes)
                return data, str(cand)
    return {}, None


# ---- looking keys up ----------------------------------------------------------------------


def _placed(path: tuple[str, ...], spelling: str) -> bool:
    parents = [p.lower() for p in path[:-1]]
    if spelling in SCHEDULER_ONLY:
        return bool(parents) and parents[-1] in SCHEDULER_PARENTS
    if spelling in GENERIC:
        return not parents or any(p in SECTIONS for p in parents)
    return True


#: leaf key (lower case) -> (document order, key path, key as written, value) of every
#: leaf so named
_Index = dict[str, list[tuple[int, tuple[str, ...], str, Any]]]


def _index(raw: dict[str, Any]) -> _Index:
    """One pass over the config, keeping only the leaves some spelling names: a lookup then
    costs its hits, not the config's size (measured on a 300,000-value config: 3.3 s to
    read the schedule spelling by spelling over every leaf, 0.3 s so). Mappings deeper than
    32 levels are not searched, which also bounds the recursion."""
    wanted = _SPELLINGS
    out: _Index = {}
    order = 0

    def walk(d: dict[Any, Any], path: tuple[str, ...]) -> None:
        nonlocal order
        for key, value in d.items():
            if isinstance(value, dict):
                if len(path) < _MAX_DEPTH:
                    walk(value, (*path, str(key)))
                continue
            # a flattened key is a path: Lightning's MLFlowLogger logs "optimizer/lr",
            # Hydra overrides and some params say "optim.lr"
            parts = tuple(_KEY_SEP.split(str(key)))
            name = parts[-1].lower()
            if name in wanted:
                shown = ".".join((*path, str(key)))
                out.setdefault(name, []).append((order, (*path, *parts), shown, value))
                order += 1

    walk(raw, ())
    return out


def _pick(
    index: _Index,
    spellings: tuple[str, ...],
    prefer: frozenset[str],
    accept: Any = None,
) -> tuple[str, Any] | None:
    """(key path, value) of the first spelling found, preferring a key under one of the
    ``prefer`` sections, then the shallowest, then the first in the file."""
    for spelling in spellings:
        hits = [
            (0 if any(p.lower() in prefer for p in path[:-1]) else 1, len(path), i, shown, v)
            for i, path, shown, v in index.get(spelling, ())
            if _placed(path, spelling) and (accept is None or accept(v))
        ]
        if hits:
            _r, _d, _i, shown, value = min(hits, key=lambda h: h[:3])
            return shown, value
    return None


def _resolve(value: Any, raw: dict[str, Any]) -> Any:
    """A Hydra interpolation ``${a.b}`` left in the file, looked up in the config."""
    m = _INTERPOLATION.match(value) if isinstance(value, str) else None
    if m is None:
        return value
    node: Any = raw
    for part in m.group(1).split("."):
        if not isinstance(node, dict) or part not in node:
            return value
        node = node[part]
    return value if isinstance(node, dict) else node


#: what a null or a flag looks like once written as a string (MLflow params are strings:
#: ``log_params(vars(args))`` turns ``warmup_steps=None`` into "None")
_NOT_A_VALUE = frozenset({"", "none", "null", "~", "true", "false"})


def _is_value(v: Any) -> bool:
    # flags such as ``warmup: true`` or ``scheduler: null`` are not the value of the key
    if isinstance(v, str):
        return v.strip().lower() not in _NOT_A_VALUE
    return v is not None and not isinstance(v, bool)


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and _is_value(v)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if math.isfinite(out) else None


_HF_FACTORY = re.compile(r"get_(\w+?)_schedule(_with_warmup)?")


def _shape(value: str, where: str) -> str | None:
    # the one table of shape spellings is the schedule model's
    from trainlens.core.schedules import shape_of

    name = value.strip()
    if _KEY_SEP.split(where)[-1] == "_target_":
        # Hydra instantiates the scheduler: transformers.get_cosine_schedule_with_warmup is
        # cosine with warmup; a class (torch's CosineAnnealingLR counts T_max in its own
        # steps, often epochs) is not modelled and stays an unknown shape
        name = name.rsplit(".", 1)[-1]
        m = _HF_FACTORY.fullmatch(name)
        if m:
            name = m.group(1) + (m.group(2) or "")
    try:
        return shape_of({"shape": name})
    except ValueError:
        return None


# ---- the schedule -------------------------------------------------------------------------


def read_schedule(raw: dict[str, Any]) -> tuple[dict[str, Any], list[ConfigProblem]]:
    """A declared schedule with canonical keys, and the keys whose values cannot be
    understood. Empty when no shape is declared (and then no problem is reported: without a
    shape nothing is judged against the plan), or when a key cannot be understood."""
    leaves = _index(raw)
    out: dict[str, Any] = {}
    problems: list[ConfigProblem] = []
    for key, spellings in SCHEDULE_KEYS.items():
        accept = _is_name if key == "shape" else _is_value
        hit = _pick(leaves, spellings, SECTIONS, accept)
        if hit is None:
            continue
        where, value = hit[0], _resolve(hit[1], raw)
        if key == "shape":
            shape = _shape(str(value), where)
            if shape is None:
                from trainlens.core.schedules import SHAPES

                problems.append(
                    ConfigProblem(
                        where, f"unknown schedule shape {value!r}; use one of {', '.join(SHAPES)}"
                    )
                )
            out["shape"] = shape
            continue
        number = _number(value)
        if number is None or (key in _INT_KEYS and abs(number) > _MAX_STEPS):
            problems.append(ConfigProblem(where, f"{key} must be a number, got {value!r}"))
            continue
        out[key] = number
    if "shape" not in out:
        return {}, []
    if problems:
        return {}, problems
    # HF TrainingArguments: warmup_ratio of the total steps, when warmup_steps is 0/absent
    ratio_hit = _pick(leaves, ("warmup_ratio", "warmup_frac"), SECTIONS, _is_value)
    if ratio_hit is not None and not out.get("warmup_steps") and out.get("total_steps"):
        ratio = _number(_resolve(ratio_hit[1], raw))
        if ratio is None:
            problems.append(
                ConfigProblem(ratio_hit[0], f"warmup_ratio must be a number, got {ratio_hit[1]!r}")
            )
        else:
            out["warmup_steps"] = math.ceil(ratio * out["total_steps"])
    if problems:
        return {}, problems
    for key in _INT_KEYS:
        if key in out:
            out[key] = int(out[key])
    return out, []


#: keys the user's schedule may hold: the canonical ones and every spelling of them
USER_SCHEDULE_KEYS = frozenset(SCHEDULE_KEYS) | _SPELLINGS - frozenset(
    s for spellings in MODEL_KEYS.values() for s in spellings
)


def normalize_schedule(raw: dict[str, Any], origin: str = "schedule") -> dict[str, Any]:
    """The user's declared schedule with canonical keys (empty when no shape is declared);
    strict: a key it does not know, a value that cannot be understood or one that cannot
    be (a negative step count, a floor above the peak) is a ConfigError naming the key."""
    from trainlens.core.errors import did_you_mean

    for key in raw:
        if str(key).lower() not in USER_SCHEDULE_KEYS and not isinstance(raw[key], dict):
            # a typo ("warmupp") was dropped without a word, and the plan judged without it
            known = sorted({*SCHEDULE_KEYS, "warmup_ratio"})
            raise ConfigError(
                f"{origin}: unknown key {key!r}{did_you_mean(str(key), known)} (the keys: "
                f"{', '.join(known)})"
            )
    out, problems = read_schedule(raw)
    if problems:
        p = problems[0]
        raise ConfigError(f"{origin}: {p.message} (key {p.key!r})")
    for key in (*_INT_KEYS, "peak_lr", "min_lr"):
        if key in out and out[key] < 0:
            raise ConfigError(f"{origin}: {key} must be 0 or more, got {out[key]:g}")
    if out.get("peak_lr") is not None and out.get("min_lr", 0) > out["peak_lr"]:
        raise ConfigError(
            f"{origin}: min_lr {out['min_lr']:g} is above peak_lr {out['peak_lr']:g} (the "
            "floor the schedule decays to is at most its peak)"
        )
    return out


def run_schedule(raw: dict[str, Any], origin: str, notes: list[DataIssue]) -> dict[str, Any]:
    """A run's own declared schedule, lenient: what cannot be understood is a note in
    ``notes`` (file and key) and the run is judged without a declared schedule, since a
    plan half understood (a warmup dropped, a shape guessed) would raise false alarms."""
    out, problems = read_schedule(raw)
    if not problems:
        return out
    params = origin.endswith(" (params)")
    for p in problems:
        notes.append(
            DataIssue(
                kind="bad-config",
                source=origin.removesuffix(" (params)"),
                location=f"param {p.key}" if params else f"key {p.key}",
                message=f"{p.message}; the LR is judged without a declared schedule",
                details={"key": p.key},
            )
        )
    return {}


# ---- the model ----------------------------------------------------------------------------


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


#: device kinds frameworks write where a GPU model could be (Lightning's accelerator,
#: ``device: cuda:0``): they name no model, so MFU would only say "unknown GPU"
_NOT_A_GPU = re.compile(r"^(auto|gpu|gpus|cuda(:\d+)?|cpu|mps|tpu|hpu|ipu|xla|npu|meta)$", re.I)


def _gpu(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip()) and not _NOT_A_GPU.match(v.strip())


def model_keys(raw: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Model size and hardware keys, each with the key as written in the config (so a
    figure computed from it can say where it came from: ``dtype: float32``)."""
    leaves = _index(raw)
    out: dict[str, tuple[str, Any]] = {}
    for key, spellings in MODEL_KEYS.items():
        accept = _gpu if key == "gpu" else _scalar
        hit = _pick(leaves, spellings, frozenset({"model", "hardware"}), accept)
        if hit is not None:
            out[key] = hit
    return out


def model_info(raw: dict[str, Any]) -> dict[str, Any]:
    """Model size and hardware keys (scalars only: a list of layer widths is no count)."""
    return {key: value for key, (_shown, value) in model_keys(raw).items()}
