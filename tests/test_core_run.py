"""The canonical frame: alias mapping, restarts, duplicates, views."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from tests.conftest import DOCS
from trainlens.core.config import ConfigError, load_config, parse_config
from trainlens.core.names import AliasTable
from trainlens.core.run import build_run


def _long(rows: list[tuple[int, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["step", "metric", "value"], orient="row")


def test_aliases_map_framework_spellings() -> None:
    table = AliasTable()
    cases = {
        "loss": "train/loss",
        "train_loss": "train/loss",
        "Loss/train": "train/loss",
        "lm loss": "train/loss",
        "trl": "train/loss",
        "tel": "val/loss",
        "eval_loss": "val/loss",
        "learning_rate": "lr",
        "lr-AdamW": "lr",
        "learning rate": "lr",
        "gnorm": "grad_norm",
        "grad norm": "grad_norm",
        "norm": "grad_norm",
        "tok/s": "tokens_per_sec",
        "samples per second": "samples_per_sec",
        "TFLOPs": "tflops_per_gpu",
        "loss scale": "loss_scale",
        "eval_accuracy": "val/accuracy",
        "eval_bleu": "val/bleu",
        "val_loss_code": "val/loss/code",
        "grad_norm/layer0.attn": "grad_norm/layer0.attn",
        "step_avg": "step_time_avg",
    }
    for raw, canonical in cases.items():
        alias = table.lookup(raw)
        assert alias is not None and alias.canonical == canonical, raw


def test_unit_scaling_and_unknown_names_kept() -> None:
    df = _long([(0, "elapsed time per iteration (ms)", 1500.0), (0, "my_metric", 3.0)])
    run = build_run(df, name="r", source="s", fmt="t")
    assert run.series("step_time")[1].tolist() == [1.5]
    assert run.series("my_metric")[1].tolist() == [3.0]
    assert run.raw_names["step_time"] == "elapsed time per iteration (ms)"


def test_two_names_for_one_canonical_are_not_merged() -> None:
    df = _long([(0, "loss", 1.0), (0, "train/loss", 2.0), (1, "loss", 1.5), (1, "train/loss", 2.5)])
    run = build_run(df, name="r", source="s", fmt="t")
    # the name already spelled canonically wins; the other keeps its own name
    assert run.series("train/loss")[1].tolist() == [2.0, 2.5]
    assert run.series("loss")[1].tolist() == [1.0, 1.5]


def test_user_alias_overrides_table() -> None:
    df = _long([(0, "loss", 1.0), (0, "objective", 2.0)])
    run = build_run(
        df,
        name="r",
        source="s",
        fmt="t",
        aliases=AliasTable({"objective": "train/loss", "loss": "aux/loss"}),
    )
    assert run.series("train/loss")[1].tolist() == [2.0]
    assert run.series("aux/loss")[1].tolist() == [1.0]


def test_restart_keeps_both_segments_and_later_stands() -> None:
    rows = [(s, "loss", float(s)) for s in range(0, 8)]  # 0..7
    rows += [(s, "loss", 100.0 + s) for s in range(5, 10)]  # resume from 5
    run = build_run(_long(rows), name="r", source="f.jsonl", fmt="jsonl")
    assert run.frame.height == 13  # nothing dropped
    assert int(run.frame.get_column("superseded").sum()) == 3  # steps 5, 6, 7 of segment 1
    steps, values = run.series("train/loss")
    assert steps.tolist() == list(range(10))
    assert values[5:].tolist() == [105.0, 106.0, 107.0, 108.0, 109.0]
    [restart] = [d for d in run.data_quality if d.kind == "restart"]
    assert restart.details == {"from_step": 7, "to_step": 5, "superseded": 3}


def test_two_restarts_reported_separately() -> None:
    rows = [(s, "loss", 1.0) for s in range(0, 10)]
    rows += [(s, "loss", 2.0) for s in range(6, 20)]
    rows += [(s, "loss", 3.0) for s in range(15, 25)]
    run = build_run(_long(rows), name="r", source="f", fmt="t")
    restarts = [d.details for d in run.data_quality if d.kind == "restart"]
    assert [(r["from_step"], r["to_step"]) for r in restarts] == [(9, 6), (19, 15)]
    assert run.series("train/loss")[1][-1] == 3.0


def test_duplicate_steps_with_different_values_are_reported() -> None:
    rows = [(0, "loss", 1.0), (1, "loss", 2.0), (1, "loss", 2.5), (2, "loss", 3.0)]
    run = build_run(_long(rows), name="r", source="f", fmt="t")
    [dup] = [d for d in run.data_quality if d.kind == "duplicate-step"]
    assert dup.count == 1 and dup.details["first_step"] == 1
    assert run.frame.height == 4
    assert run.series("train/loss")[1].tolist() == [1.0, 2.5, 3.0]  # the last one stands


def test_nan_and_inf_preserved() -> None:
    rows = [(0, "loss", float("nan")), (1, "loss", float("inf")), (2, "loss", float("-inf"))]
    run = build_run(_long(rows), name="r", source="f", fmt="t")
    v = run.series("train/loss")[1]
    assert math.isnan(v[0]) and v[1] == np.inf and v[2] == -np.inf
    assert run.series("train/loss", finite=True)[1].size == 0


def test_wide_view_one_row_per_step() -> None:
    rows = [(0, "loss", 1.0), (0, "lr", 0.1), (1, "loss", 0.9), (2, "val_loss", 1.2)]
    wide = build_run(_long(rows), name="r", source="f", fmt="t").wide()
    assert wide.get_column("step").to_list() == [0, 1, 2]
    assert set(wide.columns) == {"step", "train/loss", "lr", "val/loss"}


def test_config_unknown_key_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "trainlens.toml"
    p.write_text("selct = ['GRAD']\n")
    with pytest.raises(ConfigError, match=r"'selct'.*did you mean 'select'"):
        load_config(p)
    cfg = parse_config({"select": ["grad"], "aliases": {"x": "train/loss"}})
    assert cfg.select == ["GRAD"] and cfg.aliases == {"x": "train/loss"}


def test_pyproject_tool_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "pyproject.toml"
    p.write_text(
        "[tool.trainlens]\nfail_on = 'warning'\n[tool.trainlens.severity]\nDATA001 = 'info'\n"
    )
    cfg = load_config(p)
    assert cfg.fail_on == "warning" and cfg.severity == {"DATA001": "info"}


def test_metrics_doc_is_current() -> None:
    import importlib.util

    docs = DOCS
    spec = importlib.util.spec_from_file_location("gen_metrics", docs / "gen_metrics.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (docs / "metrics.md").read_text() == mod.render(), "run python docs/gen_metrics.py"


def test_hf_warmup_ratio_becomes_warmup_steps() -> None:
    from trainlens.runconfig import normalize_schedule

    sched = normalize_schedule(
        {
            "lr_scheduler_type": "cosine",
            "learning_rate": 5e-5,
            "warmup_ratio": 0.1,
            "warmup_steps": 0,
            "max_steps": 1000,
        }
    )
    assert sched == {"shape": "cosine", "warmup_steps": 100, "peak_lr": 5e-5, "total_steps": 1000}


def _enum_blocks(
    blocks: list[tuple[str, list[int], list[float]]],
) -> tuple[pl.DataFrame, list[int]]:
    names = [n for n, _s, _v in blocks]
    rows = [(s, n, v) for n, steps, vals in blocks for s, v in zip(steps, vals, strict=True)]
    long = pl.DataFrame(rows, schema=["step", "metric", "value"], orient="row")
    long = long.with_columns(pl.col("metric").cast(pl.Enum(names)))
    return long, [len(s) for _n, s, _v in blocks]


@pytest.mark.parametrize("restart", [False, True])
def test_block_lengths_from_the_reader_give_the_same_run(restart: bool) -> None:
    loss_steps = [0, 1, 2, 1, 2, 3] if restart else [0, 1, 2, 3, 4, 5]
    long, counts = _enum_blocks(
        [
            ("loss", loss_steps, [3.0, 2.9, 2.8, 2.85, 2.7, 2.6]),
            ("unused_metric", [], []),  # a category with no rows
            ("step_time_ms", [0, 2, 4], [500.0, 510.0, 490.0]),  # scaled to seconds
        ]
    )
    told = build_run(long, name="r", source="s", fmt="jsonl", blocks=counts)
    found = build_run(long, name="r", source="s", fmt="jsonl")
    assert told.frame.equals(found.frame)
    assert [i.message for i in told.data_quality] == [i.message for i in found.data_quality]
    assert told.series("step_time")[1].tolist() == [0.5, 0.51, 0.49]
    assert len([i for i in told.data_quality if i.kind == "restart"]) == int(restart)
    # lengths that do not fit the frame are not trusted
    wrong = build_run(long, name="r", source="s", fmt="jsonl", blocks=[1, 2, 3])
    assert wrong.frame.equals(found.frame)


@pytest.mark.parametrize("logged_too", [False, True])
def test_add_derived_keeps_views_and_replaces_a_logged_metric(logged_too: bool) -> None:
    blocks = [("loss", [0, 1, 2], [3.0, 2.9, 2.8]), ("tokens_per_sec", [0, 1, 2], [10.0] * 3)]
    if logged_too:
        blocks.append(("mfu", [0, 1, 2], [0.9, 0.9, 0.9]))
    long, counts = _enum_blocks(blocks)
    run = build_run(long, name="r", source="s", fmt="jsonl", blocks=counts)
    before = run.series_frame("train/loss")
    derived = run.series_frame("tokens_per_sec").with_columns(pl.col("value") / 100.0)
    loss_view = run._by_metric()["train/loss"]
    run.add_derived("mfu", derived)
    # views built before the append stay in use unless a logged metric was replaced
    kept = run._views_of is run.frame and run._by_metric()["train/loss"] is loss_view
    assert kept != logged_too
    assert run.frame.schema == build_run(long, name="r", source="s", fmt="jsonl").frame.schema
    assert run.series("mfu")[1].tolist() == [0.1, 0.1, 0.1]  # the derived values stand
    assert run.frame.filter(pl.col("metric") == "mfu").height == 3  # the logged one is gone
    assert run.series_frame("train/loss").equals(before)
    assert before.height == 3
    assert sorted(run.metrics) == ["mfu", "tokens_per_sec", "train/loss"]
