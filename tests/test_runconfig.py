"""Run configs beside a run: W&B config.yaml, Hydra .hydra/config.yaml, Lightning
hparams.yaml (written by Lightning's own CSVLogger) and MLflow params (written by the
mlflow client) reach the detectors' Context; a run's own config that cannot be understood
is a data-quality note and the analysis goes on; the user's --schedule stays strict."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

import trainlens
from trainlens.api import build_context
from trainlens.cli import main
from trainlens.core.config import Config
from trainlens.core.errors import ConfigError
from trainlens.core.run import Run
from trainlens.runconfig import find_run_config, model_info, normalize_schedule

PEAK, WARMUP, TOTAL = 3e-4, 100, 1000
DECLARED = {"shape": "cosine", "warmup_steps": WARMUP, "peak_lr": PEAK, "total_steps": TOTAL}


def _cosine(step: int) -> float:
    n = step + 1
    if n <= WARMUP:
        return PEAK * n / WARMUP
    p = min(1.0, (n - WARMUP) / (TOTAL - WARMUP))
    return PEAK * 0.5 * (1 + math.cos(math.pi * p))


def _jsonl(path: Path, n: int = 400) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "loss": 4.0 * math.exp(-s / 300) + 1.0, "lr": _cosine(s)} for s in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _context(path: Path, config: Config | None = None) -> tuple[Run, Any]:
    [run] = trainlens.read(path)
    return run, build_context(run, config or Config())


def _bad_config(run: Run) -> list[Any]:
    return [d for d in run.data_quality if d.kind == "bad-config"]


# ---- W&B ------------------------------------------------------------------------------------


def _wandb_config(values: dict[str, Any]) -> str:
    """config.yaml as wandb writes it: a header, then each key wrapped as {value, desc}
    with SafeDumper, plus W&B's own _wandb entry."""
    doc = {k: {"desc": None, "value": v} for k, v in values.items()}
    doc["_wandb"] = {
        "desc": None,
        "value": {"cli_version": "0.16.0", "python_version": "3.11.9", "t": {1: [1, 11, 49]}},
    }
    return "wandb_version: 1\n\n" + yaml.safe_dump(doc, default_flow_style=False)


def test_wandb_run_folder_config_is_unwrapped(tmp_path: Path) -> None:
    run_dir = tmp_path / "wandb" / "run-20240101_120000-abc123"
    (run_dir / "files").mkdir(parents=True)
    (run_dir / "files" / "config.yaml").write_text(
        _wandb_config(
            {
                "learning_rate": PEAK,
                "lr_scheduler_type": "cosine",
                "warmup_steps": WARMUP,
                "max_steps": TOTAL,
                "n_layer": 12,
            }
        )
    )
    log = _jsonl(run_dir / "history.jsonl")
    raw, origin = find_run_config(trainlens.read(log)[0])
    assert origin == str(run_dir / "files" / "config.yaml")
    assert "_wandb" not in raw and "wandb_version" not in raw and raw["n_layer"] == 12
    run, ctx = _context(log)
    assert ctx.schedule == DECLARED and ctx.schedule_source == origin
    assert ctx.model["layers"] == 12 and not _bad_config(run)


def test_wandb_config_beside_an_exported_file(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        _wandb_config({"optimizer": {"lr": PEAK, "scheduler": "cosine"}, "warmup": WARMUP}).replace(
            "  desc: null\n", "", 3
        )  # newer wandb drops desc: both shapes are W&B's
    )
    _run, ctx = _context(_jsonl(tmp_path / "export.jsonl"))
    assert ctx.schedule == {"shape": "cosine", "warmup_steps": WARMUP, "peak_lr": PEAK}


# ---- Hydra ----------------------------------------------------------------------------------

HYDRA = {
    "model": {"n_layer": 24, "n_head": 16, "seq_len": 2048, "name": "gpt"},
    "optim": {"name": "adamw", "lr": PEAK, "betas": [0.9, 0.95], "weight_decay": 0.1},
    "scheduler": {"name": "cosine", "warmup_steps": WARMUP, "min_lr": 0.0},
    "trainer": {"max_steps": TOTAL, "precision": "bf16-mixed", "devices": 8},
    "diffusion": {"schedule": "linear"},  # a noise schedule, not the LR's
    "data": {"steps": 5, "name": "openwebtext"},
}


@pytest.mark.parametrize("where", ["beside", "one level up"])
def test_hydra_config_nested_keys(tmp_path: Path, where: str) -> None:
    out = tmp_path / "outputs" / "2024-01-01" / "12-00-00"
    (out / ".hydra").mkdir(parents=True)
    (out / ".hydra" / "config.yaml").write_text(yaml.safe_dump(HYDRA, sort_keys=False))
    (out / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["optim.lr=0.1"]))
    log = _jsonl(out / "metrics.jsonl" if where == "beside" else out / "logs" / "metrics.jsonl")
    run, ctx = _context(log)
    assert ctx.schedule == {**DECLARED, "min_lr": 0.0}
    assert ctx.schedule_source == str(out / ".hydra" / "config.yaml")
    assert ctx.model == {"layers": 24, "heads": 16, "seq_len": 2048, "dtype": "bf16-mixed"}
    assert not _bad_config(run)


def test_generic_spellings_count_only_in_their_sections() -> None:
    # a beta schedule, an optimizer's name, a data "steps": none of them is the LR schedule
    raw = {"diffusion": {"schedule": "linear"}, "optimizer": {"name": "adamw", "lr": 0.1}}
    assert normalize_schedule(raw) == {}
    raw = {"lr_scheduler": {"type": "cosine"}, "data": {"steps": 7}, "trainer": {"steps": 50}}
    assert normalize_schedule(raw) == {"shape": "cosine", "total_steps": 50}
    # a key under a scheduler/optimizer section wins over one elsewhere
    raw = {"head": {"lr": 1.0}, "optimizer": {"lr": 0.5}, "schedule": "linear"}
    assert normalize_schedule(raw)["peak_lr"] == 0.5


def test_hydra_target_of_a_transformers_schedule() -> None:
    raw = {
        "scheduler": {
            "_target_": "transformers.get_cosine_schedule_with_warmup",
            "num_warmup_steps": WARMUP,
            "num_training_steps": TOTAL,
        },
        "model": {"_target_": "models.GPT"},  # a _target_ elsewhere is no schedule
        "optim": {"_target_": "torch.optim.AdamW", "lr": PEAK},
    }
    assert normalize_schedule(raw) == DECLARED
    # a scheduler class whose steps may be epochs is not modelled: strict says so
    raw["scheduler"] = {"_target_": "torch.optim.lr_scheduler.CosineAnnealingLR", "T_max": 90}
    with pytest.raises(ConfigError, match=r"CosineAnnealingLR.*key 'scheduler._target_'"):
        normalize_schedule(raw)


def test_mlflow_string_nulls_and_flags_are_no_values() -> None:
    # mlflow.log_params(vars(args)) writes None and booleans as strings
    params = {
        "lr_scheduler_type": "cosine",
        "warmup_steps": "None",
        "warmup": "True",
        "num_warmup_steps": "100",
        "max_steps": "1000",
        "learning_rate": "0.0003",
        "min_lr": "",
    }
    assert normalize_schedule(params) == DECLARED


def test_hydra_interpolation_is_resolved(tmp_path: Path) -> None:
    cfg = {
        "trainer": {"max_steps": TOTAL},
        "scheduler": {
            "name": "cosine",
            "warmup_steps": WARMUP,
            "total_steps": "${trainer.max_steps}",
        },
        "optim": {"lr": PEAK},
    }
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    _run, ctx = _context(_jsonl(tmp_path / "run.jsonl"))
    assert ctx.schedule == DECLARED


# ---- Lightning ------------------------------------------------------------------------------


def test_lightning_hparams_with_python_tags(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    import argparse

    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(str(tmp_path), name="lightning_logs")
    logger.log_hyperparams(
        {
            "optimizer": {"name": "adamw", "lr": PEAK, "betas": (0.9, 0.999)},
            "lr_schedule": {"schedule": "cosine", "warmup_steps": WARMUP},
            "max_steps": TOTAL,
            "args": argparse.Namespace(seed=3),
        }
    )
    for s in range(0, 400, 10):
        logger.log_metrics({"train/loss": 4.0 * math.exp(-s / 300) + 1.0, "lr": _cosine(s)}, s)
    logger.save()
    folder = Path(logger.log_dir)
    text = (folder / "hparams.yaml").read_text()
    assert "!!python/tuple" in text and "!!python/object:argparse.Namespace" in text
    assert not (tmp_path / "pwned").exists()
    run, ctx = _context(folder / "metrics.csv")
    assert ctx.schedule == DECLARED
    assert ctx.schedule_source == str(folder / "hparams.yaml")
    raw, _origin = find_run_config(run)
    # tags are read as the plain data under them, never constructed
    assert raw["optimizer"]["betas"] == [0.9, 0.999] and raw["args"] == {"seed": 3}


def test_python_object_tags_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "hparams.yaml").write_text(
        f"x: !!python/object/apply:os.system ['touch {marker}']\n"
        "y: !!python/object/new:builtins.list [[1, 2]]\nschedule: constant\nlr: 0.1\n"
    )
    run, ctx = _context(_jsonl(tmp_path / "run.jsonl"))
    assert not marker.exists()
    assert ctx.schedule == {"shape": "constant", "peak_lr": 0.1}
    raw, _ = find_run_config(run)
    assert raw["x"] == [f"touch {marker}"] and raw["y"] == [[1, 2]]


def test_real_lightning_version_13_schedule_reaches_context(
    shared_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = shared_dir / "real-logs/Arshya-Guru_deepmind-research/lightning_logs/version_13"
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(folder / "metrics.csv"), "--json"]) in (0, 1)
    [r] = json.loads(capsys.readouterr().out)["runs"]
    assert r["schedule_source"] == str(folder / "hparams.yaml")
    # hparams.yaml: lr_schedule.schedule cosine, lr_schedule.warmup_steps 12500,
    # optimizer.lr 0.001 (beside a !!python/tuple), max_steps 375000
    assert r["schedule"] == {
        "shape": "cosine",
        "warmup_steps": 12500,
        "peak_lr": 0.001,
        "total_steps": 375000,
    }
    assert not [d for d in r["data_quality"] if d["kind"] == "bad-config"]


# ---- a run's own config that cannot be understood --------------------------------------------


def _mlflow_run(root: Path, params: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    mlflow = pytest.importorskip("mlflow")
    from mlflow.entities import Metric, Param

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = mlflow.tracking.MlflowClient(tracking_uri=f"file:{root}")
    exp = client.create_experiment("pretrain")
    run_id = client.create_run(exp, run_name="run-a").info.run_id
    metrics = [
        Metric("loss", 4.0 * math.exp(-s / 300) + 1.0, 1_700_000_000_000 + s, s) for s in range(300)
    ]
    metrics += [Metric("lr", _cosine(s), 1_700_000_000_000 + s, s) for s in range(300)]
    for i in range(0, len(metrics), 900):
        client.log_batch(run_id, metrics=metrics[i : i + 900])
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    client.set_terminated(run_id)
    return root


def test_lightning_mlflow_logger_params_are_nested_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("lightning")
    from lightning.pytorch.loggers import MLFlowLogger

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    logger = MLFlowLogger(experiment_name="e", tracking_uri=f"file:{tmp_path / 'mlruns'}")
    # MLFlowLogger flattens nested hparams to "optimizer/lr", "lr_schedule/schedule", ...
    logger.log_hyperparams(
        {
            "optimizer": {"name": "adamw", "lr": PEAK, "betas": (0.9, 0.999)},
            "lr_schedule": {"schedule": "cosine", "warmup_steps": WARMUP},
            "max_steps": TOTAL,
        }
    )
    for s in range(0, 300, 10):
        logger.log_metrics({"loss": 1.0 / (s + 1), "lr": _cosine(s)}, step=s)
    logger.finalize("success")
    [run] = trainlens.read(tmp_path / "mlruns")
    assert "optimizer/lr" in run.metadata["params"]
    ctx = build_context(run, Config())
    assert ctx.schedule == DECLARED and ctx.schedule_source == f"{run.source} (params)"


@pytest.mark.slow
def test_sqlite_runs_use_their_own_params_over_a_file_beside_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow")
    from mlflow.entities import Metric, Param

    db = tmp_path / "mlflow.db"
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.create_experiment("e")
    shapes = {"a": "cosine", "b": "linear"}
    for name, shape in shapes.items():
        rid = client.create_run(exp, run_name=name).info.run_id
        client.log_batch(
            rid,
            metrics=[Metric("loss", 1.0 / (s + 1), 1_700_000_000_000 + s, s) for s in range(50)],
            params=[Param("lr_scheduler_type", shape), Param("learning_rate", "0.1")],
        )
    (tmp_path / "config.yaml").write_text("schedule: constant\nlr: 9.0\n")  # the project's
    runs = trainlens.read(db)
    got = {r.name: build_context(r, Config()).schedule for r in runs}
    assert got == {n: {"shape": s, "peak_lr": 0.1} for n, s in shapes.items()}


@pytest.mark.parametrize(
    ("params", "key", "why"),
    [
        (
            {"lr_schedule": "linear warmup + cosine to 0.1*lr", "lr": "3e-4"},
            "lr_schedule",
            "unknown schedule shape 'linear warmup + cosine to 0.1*lr'",
        ),
        (
            {"lr_scheduler_type": "cosine", "warmup_steps": "auto", "max_steps": "1000"},
            "warmup_steps",
            "warmup_steps must be a number, got 'auto'",
        ),
        (
            {"lr_scheduler_type": "cosine", "max_steps": "1e400"},
            "max_steps",
            "total_steps must be a number, got '1e400'",
        ),
    ],
)
def test_mlflow_params_not_understood_are_a_note(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    params: dict[str, str],
    key: str,
    why: str,
) -> None:
    root = _mlflow_run(tmp_path / "mlruns", params, monkeypatch)
    monkeypatch.chdir(tmp_path)
    code = main(["analyze", str(root), "--json"])
    assert code in (0, 1), capsys.readouterr().err  # never 2: the run itself is fine
    [r] = json.loads(capsys.readouterr().out)["runs"]
    assert r["schedule"] is None and r["schedule_source"] is None
    [note] = [d for d in r["data_quality"] if d["kind"] == "bad-config"]
    assert note["location"] == f"param {key}" and why in note["message"]
    assert "judged without a declared schedule" in note["message"]
    assert Path(note["source"]).parent.parent == root  # the MLflow run folder
    assert r["summary"]["steps"] == {"first": 0, "last": 299, "count": 300}
    # and the text output carries the note as well
    assert main(["analyze", str(root)]) in (0, 1)
    assert f"param {key}: {why}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("hparams.yaml", "lr_schedule: {schedule: cosine, warmup_steps: auto}\n", "'auto'"),
        ("hparams.yaml", "scheduler:\n  type: OneCycleLR\n", "unknown schedule shape"),
        ("config.yaml", "a: [1, 2\nb: 3\n", "not valid YAML (line 2)"),
        ("config.json", '{"lr": 0.1,', "not valid JSON (line 1)"),
    ],
)
def test_unreadable_or_unknown_run_config_is_a_note(
    tmp_path: Path, name: str, text: str, why: str
) -> None:
    (tmp_path / name).write_text(text)
    run, ctx = _context(_jsonl(tmp_path / "run.jsonl"))
    assert ctx.schedule == {}
    [note] = _bad_config(run)
    assert note.source == str(tmp_path / name) and why in note.message
    # built twice (analyze, then report): still one note
    build_context(run, Config())
    assert len(_bad_config(run)) == 1


def test_a_refused_file_is_skipped_for_the_next_candidate(tmp_path: Path) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefg", "bcdefgh", strict=True):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 10) + "]")
    (tmp_path / "config.yaml").write_text("\n".join(lines) + "\n")  # 10**8 once expanded
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(HYDRA))
    run, ctx = _context(_jsonl(tmp_path / "run.jsonl"))
    assert ctx.schedule_source == str(tmp_path / ".hydra" / "config.yaml")
    assert ctx.schedule["shape"] == "cosine"
    [note] = _bad_config(run)
    assert note.source == str(tmp_path / "config.yaml")
    assert "aliases are expanded" in note.message


# ---- what the user passes stays strict ------------------------------------------------------


def test_user_schedule_stays_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    log = _jsonl(tmp_path / "run.jsonl")
    assert main(["analyze", str(log), "--schedule", "onecycle:warmup_steps=10"]) == 2
    assert "unknown schedule shape 'onecycle'" in capsys.readouterr().err
    assert main(["analyze", str(log), "--schedule", "cosine:warmup_steps=auto"]) == 2
    assert "warmup_steps must be a number, got 'auto'" in capsys.readouterr().err
    (tmp_path / "trainlens.toml").write_text('[schedule]\nshape = "cosine"\nwarmup_steps = "x"\n')
    with pytest.raises(ConfigError, match="warmup_steps must be a number"):
        trainlens.analyze(log, config=tmp_path / "trainlens.toml")
    # and a user schedule wins over the run's own, unreadable or not
    (tmp_path / "hparams.yaml").write_text("scheduler: {type: OneCycleLR}\n")
    [a] = trainlens.analyze(log, config=Config(schedule=dict(DECLARED)))
    assert a.context.schedule == DECLARED and a.context.schedule_source == "flags"
    assert not _bad_config(a.run)


def test_model_info_keeps_scalars_only() -> None:
    raw = {"model": {"layers": [64, 64], "n_layer": 6}, "trainer": {"gpus": [0, 1], "devices": 2}}
    assert model_info(raw) == {"layers": 6}
    assert model_info({"hardware": {"gpu": "H100", "n_gpus": 8}}) == {"gpu": "H100", "n_gpus": 8}
    # a device kind is no GPU model (Lightning's accelerator: auto / gpu / cuda)
    raw = {"trainer": {"accelerator": "auto"}, "device": "cuda:0", "hardware": {"gpu": "A100"}}
    assert model_info(raw) == {"gpu": "A100"}
    assert model_info({"trainer": {"accelerator": "gpu"}}) == {}
