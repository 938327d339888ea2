"""A run configuration archived beside the run: the declared LR schedule and the model.

Looked for next to the run (the run's directory): config.json, run_config.json,
trainlens.json, hparams.yaml/.yml, config.yaml/.yml, ``<stem>.config.json``, and the
params of an MLflow run. Keys are matched under the spellings frameworks use.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from trainlens.core.errors import ConfigError
from trainlens.core.run import Run

CANDIDATES = (
    "config.json",
    "run_config.json",
    "trainlens.json",
    "hparams.yaml",
    "hparams.yml",
    "config.yaml",
    "config.yml",
)

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

SHAPES = {
    "cosine": "cosine",
    "cosine_with_warmup": "cosine",
    "cos": "cosine",
    "linear": "linear",
    "linear_with_warmup": "linear",
    "constant": "constant",
    "constant_with_warmup": "constant",
    "inverse_sqrt": "inverse-sqrt",
    "inverse-sqrt": "inverse-sqrt",
    "rsqrt": "inverse-sqrt",
    "step": "step",
    "steplr": "step",
    "warmup-stable-decay": "warmup-stable-decay",
    "warmup_stable_decay": "warmup-stable-decay",
    "wsd": "warmup-stable-decay",
}


def _load(path: Path) -> dict[str, Any] | None:
    text = path.read_text("utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return None
    else:
        try:
            import yaml  # optional: only for YAML run configs
        except ImportError:
            return None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
    return data if isinstance(data, dict) else None


def find_run_config(run: Run) -> tuple[dict[str, Any], str | None]:
    """The first run configuration found beside the run, and its path."""
    src = Path(run.source)
    folder = src if src.is_dir() else src.parent
    names = [f"{src.stem}.config.json", *CANDIDATES] if src.is_file() else list(CANDIDATES)
    for name in names:
        cand = folder / name
        if cand.is_file():
            data = _load(cand)
            if data is not None:
                return data, str(cand)
    params = run.metadata.get("params")
    if isinstance(params, dict) and params:
        return dict(params), f"{run.source} (params)"
    return {}, None


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _pick(flat: dict[str, Any], spellings: tuple[str, ...], prefer: tuple[str, ...]) -> Any:
    """A value by any spelling, preferring keys under the given sections."""
    by_leaf: dict[str, list[tuple[str, Any]]] = {}
    for key, value in flat.items():
        by_leaf.setdefault(key.rsplit(".", 1)[-1].lower(), []).append((key, value))
    for spelling in spellings:
        hits = by_leaf.get(spelling)
        if not hits:
            continue
        for section in prefer:
            for key, value in hits:
                if key.lower().startswith(section + "."):
                    return value
        return hits[0][1]
    return None


def _number(value: Any, key: str, origin: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{origin}: schedule key {key!r} must be a number, got {value!r}"
        ) from None


def normalize_schedule(raw: dict[str, Any], origin: str = "schedule") -> dict[str, Any]:
    """A declared schedule with canonical keys; empty when no shape is declared."""
    flat = _flatten(raw)
    prefer = ("schedule", "lr_schedule", "scheduler", "optim", "optimizer", "training")
    out: dict[str, Any] = {}
    for key, spellings in SCHEDULE_KEYS.items():
        value = _pick(flat, spellings, prefer)
        if value is None:
            continue
        if key == "shape":
            if not isinstance(value, str):
                continue
            shape = SHAPES.get(value.strip().lower().replace(" ", "_"))
            if shape is None:
                raise ConfigError(
                    f"{origin}: unknown schedule shape {value!r}; use one of "
                    "constant, linear, cosine, inverse-sqrt, step, warmup-stable-decay"
                )
            out["shape"] = shape
        else:
            out[key] = _number(value, key, origin)
    if "shape" not in out:
        return {}
    # HF TrainingArguments: warmup_ratio of the total steps, when warmup_steps is 0/absent
    ratio = _pick(flat, ("warmup_ratio", "warmup_frac"), prefer)
    if ratio is not None and not out.get("warmup_steps") and out.get("total_steps"):
        out["warmup_steps"] = math.ceil(_number(ratio, "warmup_ratio", origin) * out["total_steps"])
    for key in (
        "warmup_steps",
        "total_steps",
        "decay_steps",
        "stable_steps",
        "step_size",
        "first_step",
    ):
        if key in out:
            out[key] = int(out[key])
    return out


def model_info(raw: dict[str, Any]) -> dict[str, Any]:
    flat = _flatten(raw)
    out: dict[str, Any] = {}
    for key, spellings in MODEL_KEYS.items():
        value = _pick(flat, spellings, ("model", "hardware"))
        if value is not None:
            out[key] = value
    return out
