"""Fast paths give what the general paths give, value for value.

Each fast path (JSONL read with a sampled schema, files read by polars from their path,
the canonical frame built on metric codes without the restart machinery, per-metric views
cut as slices, the summary and detectors from those views) is compared with the path it
short-cuts, on files written the way training loops write them: NaN and ±Infinity
tokens, bad lines, blank lines, keys that appear late, restarts, repeated steps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.conftest import BENCH
from trainlens.core.names import AliasTable
from trainlens.core.run import (
    FRAME_SCHEMA,
    DataIssue,
    Run,
    build_run,
    frame_from_long,
    mark_restarts,
    metric_views,
)
from trainlens.detectors import nonfinite, tensors
from trainlens.readers import ReadOptions, jsonl
from trainlens.readers import csv as csv_reader
from trainlens.summary import _distinct_steps, _metric_counts, _non_finite, summarize

# ---- the general path of frame_from_long, as it was before the fast path -----------------------


def reference_frame_from_long(
    df: pl.DataFrame, *, source: str, aliases: AliasTable | None = None
) -> tuple[pl.DataFrame, list[DataIssue], dict[str, str]]:
    aliases = aliases or AliasTable()
    if "wall_time" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("wall_time"))
    df = df.select(
        pl.col("step").cast(pl.Int64),
        pl.col("metric").cast(pl.String),
        pl.col("value").cast(pl.Float64),
        pl.col("wall_time").cast(pl.Float64).fill_nan(None),
    )
    raw = df.get_column("metric").unique(maintain_order=True).to_list()
    resolved = aliases.resolve(raw)
    renamed = {k: v.canonical for k, v in resolved.items() if v.canonical != k}
    scaled = {k: v.scale for k, v in resolved.items() if v.scale != 1.0}
    if scaled:
        df = df.with_columns(
            (
                pl.col("value")
                * pl.col("metric").replace_strict(scaled, default=1.0, return_dtype=pl.Float64)
            ).alias("value")
        )
    if renamed:
        df = df.with_columns(pl.col("metric").replace(renamed))
    canonical_to_raw = {v.canonical: k for k, v in resolved.items()}
    frame, issues = mark_restarts(df, source=source)
    return frame.with_columns(pl.col("metric").cast(pl.Categorical)), issues, canonical_to_raw


def assert_same_run(a: Run, b: Run) -> None:
    assert a.frame.schema == b.frame.schema == pl.Schema(FRAME_SCHEMA)
    assert a.frame.equals(b.frame)  # NaN == NaN and null == null, row order included
    assert [d.to_dict() for d in a.data_quality] == [d.to_dict() for d in b.data_quality]
    assert a.raw_names == b.raw_names
    assert a.cursor == b.cursor


# ---- frame_from_long: codes, blocks, the restart machinery skipped only when it may be -----


def _long_frames() -> Iterator[tuple[str, pl.DataFrame]]:
    rng = np.random.default_rng(7)
    names = ["loss", "lr", "grad_norm/a", "step_time_ms", "my metric", "val_loss"]
    n = 300
    steps = np.arange(n)
    # metric-major blocks, every metric at every step (what the wide readers give)
    blocks = pl.DataFrame(
        {
            "step": np.tile(steps, len(names)),
            "metric": np.repeat(names, n),
            "value": rng.normal(size=n * len(names)),
            "wall_time": np.tile(1e9 + steps * 0.5, len(names)),
        }
    )
    yield "blocks", blocks
    yield "blocks, Enum", blocks.with_columns(pl.col("metric").cast(pl.Enum(names)))
    yield "blocks, no wall time", blocks.drop("wall_time")
    # record order: per step, every metric (TensorBoard), one metric missing some steps
    inter = pl.DataFrame(
        {
            "step": np.repeat(steps, len(names)),
            "metric": np.tile(names, n),
            "value": rng.normal(size=n * len(names)),
            "wall_time": np.repeat(1e9 + steps * 0.5, len(names)),
        }
    ).filter(~((pl.col("metric") == "val_loss") & (pl.col("step") % 10 != 0)))
    yield "interleaved", inter
    # per step, metrics not in first-seen order
    shuffled = inter.sample(fraction=1.0, seed=3).sort("step", maintain_order=True)
    yield "interleaved, shuffled within steps", shuffled
    # a restart: steps 200.. logged again after step 250
    back = pl.concat([inter.filter(pl.col("step") <= 250), inter.filter(pl.col("step") >= 200)])
    yield "interleaved, restart", back
    yield (
        "blocks, restart",
        pl.concat(
            [blocks.filter(pl.col("step") <= 250), blocks.filter(pl.col("step") >= 200)]
        ).sort("metric", maintain_order=True),
    )
    # a repeated step with a different value, and one with the same value
    dup = pl.concat([blocks, blocks.filter(pl.col("step") == 5)]).sort(
        "metric", "step", maintain_order=True
    )
    yield (
        "blocks, repeated steps",
        dup.with_columns(
            pl.when((pl.col("step") == 5) & (pl.col("metric") == "lr"))
            .then(pl.col("value") + pl.int_range(pl.len()))
            .otherwise(pl.col("value"))
            .alias("value")
        ),
    )
    # one metric split in two blocks (not contiguous)
    yield (
        "split blocks",
        pl.concat(
            [
                blocks.filter((pl.col("metric") == "loss") & (pl.col("step") < 100)),
                blocks.filter(pl.col("metric") == "lr"),
                blocks.filter((pl.col("metric") == "loss") & (pl.col("step") >= 100)),
            ]
        ),
    )
    # non-finite values and a null wall time
    yield (
        "non-finite",
        blocks.with_columns(
            pl.when(pl.col("step") == 3)
            .then(float("nan"))
            .when(pl.col("step") == 4)
            .then(float("inf"))
            .otherwise(pl.col("value"))
            .alias("value"),
            pl.when(pl.col("step") == 7)
            .then(None)
            .otherwise(pl.col("wall_time"))
            .alias("wall_time"),
        ),
    )
    yield (
        "null values",
        blocks.with_columns(
            pl.when(pl.col("step") == 9).then(None).otherwise(pl.col("value")).alias("value")
        ),
    )
    yield "empty", blocks.head(0)
    yield "one row", blocks.head(1)
    yield "descending steps", blocks.with_columns(-pl.col("step"))
    # two raw names for one canonical name ('loss' and 'train_loss'): not merged
    yield (
        "alias conflict",
        pl.concat(
            [
                blocks,
                blocks.filter(pl.col("metric") == "loss").with_columns(metric=pl.lit("train_loss")),
            ]
        ),
    )


@pytest.mark.parametrize("case", [name for name, _ in _long_frames()])
def test_frame_from_long_matches_the_general_path(case: str) -> None:
    df = dict(_long_frames())[case]
    aliases = AliasTable({"my metric": "mine"})
    fast = frame_from_long(df, source="s", aliases=aliases)
    ref = reference_frame_from_long(df, source="s", aliases=aliases)
    assert fast[0].schema == ref[0].schema
    assert fast[0].equals(ref[0]), case
    assert [d.to_dict() for d in fast[1]] == [d.to_dict() for d in ref[1]]
    assert fast[2] == ref[2]
    if case.endswith("restart"):
        assert fast[0]["superseded"].any() and any(d.kind == "restart" for d in fast[1])
    if case == "blocks":  # ms were scaled to seconds
        t = fast[0].filter(pl.col("metric") == "step_time")["value"]
        assert (
            t.to_list() == (df.filter(pl.col("metric") == "step_time_ms")["value"] * 1e-3).to_list()
        )


@pytest.mark.parametrize("case", [name for name, _ in _long_frames()])
def test_views_and_summary_match_the_general_path(case: str) -> None:
    df = dict(_long_frames())[case]
    run = build_run(df, name="r", source="s", fmt="jsonl")
    standing = run.standing()
    parts = standing.partition_by("metric", as_dict=True, maintain_order=True)
    ref = {str(k[0]): v.drop("metric") for k, v in parts.items()}
    views = run._by_metric()
    assert list(views) == list(ref)
    assert all(views[m].equals(ref[m]) for m in ref)
    assert metric_views(standing).keys() == ref.keys()
    # the summary's per-metric numbers from the views equal those from grouping
    if standing is run.frame:
        assert _metric_counts(run, views) == _metric_counts(run, None)
        assert _distinct_steps(views) == standing["step"].n_unique()
    general = (
        standing.filter(pl.col("value").is_nan() | pl.col("value").is_infinite())
        .group_by("metric")
        .agg(pl.len().alias("n"), pl.col("step").min().alias("first_step"))
    )
    assert _non_finite(run) == {
        r["metric"]: {"count": r["n"], "first_step": r["first_step"]}
        for r in general.iter_rows(named=True)
    }
    assert list(_non_finite(run)) == sorted(_non_finite(run))  # the same order every run
    if run.frame.height:
        summary = summarize(run)
        assert summary["values"] == run.frame.height


@pytest.mark.parametrize("case", [name for name, _ in _long_frames()])
def test_detectors_on_views_match_the_general_path(case: str) -> None:
    df = dict(_long_frames())[case]
    run = build_run(df, name="r", source="s", fmt="jsonl")
    if run.frame.height == 0:
        return
    params = nonfinite.Params()
    found = nonfinite.detect(run, params, nonfinite.Context())
    assert [f.to_dict() for f in found] == [
        f.to_dict() for f in nonfinite._grouped(run, run.standing(), params)
    ]
    names = [m for m in run.metrics if m.startswith("grad_norm/")] + ["train/loss"]
    steps, table = tensors._table(run, names)
    wide = run.wide(names)
    assert np.array_equal(steps, wide["step"].to_numpy())
    assert np.array_equal(table, wide.select(names).to_numpy(), equal_nan=True)


def test_tensor_table_joins_metrics_logged_at_different_steps() -> None:
    rows = [(s, "grad_norm/a", float(s)) for s in range(0, 50)]
    rows += [(s, "grad_norm/b", -float(s)) for s in range(0, 50, 5)]
    rows += [(s, "grad_norm/b", 1.0) for s in (60, 61)]
    run = build_run(
        pl.DataFrame(rows, schema=["step", "metric", "value"], orient="row"),
        name="r",
        source="s",
        fmt="jsonl",
    )
    names = ["grad_norm/a", "grad_norm/b"]
    steps, table = tensors._table(run, names)
    wide = run.wide(names)
    assert steps.tolist() == [*range(50), 60, 61]
    assert np.array_equal(table, wide.select(names).to_numpy(), equal_nan=True)


# ---- JSONL: the sampled-schema read against the general read -----------------------------------


def _write_jsonl(path: Path, records: list[dict[str, Any]], extra: str = "") -> Path:
    with path.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")  # NaN / Infinity as Python's json writes them
        fh.write(extra)
    return path


def _records(n: int = 400, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        rec: dict[str, Any] = {
            "step": i,
            "time": 1.7e9 + 0.25 * i,
            "loss": float(rng.normal(3, 0.1)),
            "lr": 3e-4,
            "mem_bytes": (32 << 30) + i,
            "grad_norm/layer_0": float(rng.lognormal()),
        }
        if i % 50 == 0:
            rec["val_loss"] = float(rng.normal(3, 0.1))
        out.append(rec)
    return out


@pytest.fixture
def small_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the fast paths run on small files, with a small sample."""
    monkeypatch.setattr(jsonl, "FAST_MIN_BYTES", 0)
    monkeypatch.setattr(jsonl, "SAMPLE_HEAD_LINES", 20)
    monkeypatch.setattr(jsonl, "SAMPLE_SPREAD_LINES", 10)
    monkeypatch.setattr(csv_reader, "FAST_MIN_BYTES", 0)


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, Run, str]:
    """The run read as usual, the run read by the general path only, and which path the
    usual read took ("mapped", "bytes-fast" or "general")."""
    took = {"mapped": False, "fast": False}
    real_mapped, real_fast = jsonl._read_mapped, jsonl._parse_fast

    def spy_mapped(p: Path) -> Any:
        got = real_mapped(p)
        took["mapped"] = got is not None
        return got

    def spy_fast(body: bytes) -> Any:
        got = real_fast(body)
        took["fast"] = got is not None
        return got

    with monkeypatch.context() as m:
        m.setattr(jsonl, "_read_mapped", spy_mapped)
        m.setattr(jsonl, "_parse_fast", spy_fast)
        [fast] = jsonl.read(path, ReadOptions())
    with monkeypatch.context() as m:
        m.setattr(jsonl, "_read_mapped", lambda p: None)
        m.setattr(jsonl, "_parse_fast", lambda body: None)
        [general] = jsonl.read(path, ReadOptions())
    how = "mapped" if took["mapped"] else ("bytes-fast" if took["fast"] else "general")
    return fast, general, how


def _truth(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Per raw key, (step, value) in file order, as json.loads sees them."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        for k, v in r.items():
            if k not in ("step", "time") and isinstance(v, (int, float)):
                out.setdefault(k, []).append((r["step"], float(v)))
    return out


def _same_values(run: Run, records: list[dict[str, Any]]) -> None:
    truth = _truth(records)
    for raw, pairs in truth.items():
        canonical = next(c for c, r in run.raw_names.items() if r == raw)
        got = run.frame.filter(pl.col("metric") == canonical)
        assert got["step"].to_list() == [s for s, _ in pairs]
        want = np.array([v for _, v in pairs])
        assert np.array_equal(got["value"].to_numpy(), want, equal_nan=True), raw


@pytest.mark.usefixtures("small_fast_path")
def test_jsonl_plain_floats_take_the_mapped_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _records()
    fast, general, how = _read_both(_write_jsonl(tmp_path / "run.jsonl", recs), monkeypatch)
    assert how == "mapped"
    assert_same_run(fast, general)
    _same_values(fast, recs)
    # metrics in order of first appearance in the file
    assert fast.frame["metric"].unique(maintain_order=True).to_list() == [
        "train/loss",
        "lr",
        "mem/allocated",
        "grad_norm/layer_0",
        "val/loss",
    ]


@pytest.mark.usefixtures("small_fast_path")
def test_jsonl_nonfinite_tokens_are_swapped_and_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _records()
    recs[30]["loss"] = math.nan
    recs[31]["loss"] = math.inf
    recs[32]["grad_norm/layer_0"] = -math.inf
    recs[150]["lr"] = math.nan  # far from the sample lines
    path = _write_jsonl(tmp_path / "run.jsonl", recs)
    fast, general, how = _read_both(path, monkeypatch)
    assert how == "bytes-fast"
    assert_same_run(fast, general)
    _same_values(fast, recs)
    loss = fast.series("train/loss")[1]
    assert math.isnan(loss[30]) and loss[31] == math.inf
    assert fast.series("grad_norm/layer_0")[1][32] == -math.inf


@pytest.mark.usefixtures("small_fast_path")
@pytest.mark.parametrize(
    "change",
    [
        "late key",
        "late keys tied",
        "null literal",
        "colon in text",
        "nan in text",
        "sentinel value",
        "int then float",
        "bool",
        "nested",
        "blank line",
        "bad line",
        "crlf",
        "no newline at end",
        "key with capital N",
    ],
)
def test_jsonl_cases_the_sample_cannot_prove_fall_back_to_the_same_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    recs = _records()
    extra = ""
    if change == "late key":
        recs[333]["final_eval"] = 1.25
    elif change == "late keys tied":
        recs[333].update({"z_eval": 1.0, "a_eval": 2.0})
        recs[380].update({"a_eval": 3.0, "z_eval": 4.0})
    elif change == "null literal":
        recs[100]["loss"] = None
    elif change == "colon in text":
        recs[200]["note"] = "a: b"
    elif change == "nan in text":
        recs[5]["note"] = "NaN seen"
        recs[200]["loss"] = math.nan
    elif change == "sentinel value":
        recs[100]["lr"] = float(jsonl._SENTINELS[2][1])
        recs[200]["loss"] = math.nan
    elif change == "int then float":
        for r in recs:
            r["epoch"] = r["step"] // 100
        recs[350]["epoch"] = 3.5
    elif change == "bool":
        recs[0]["flag"] = True
    elif change == "nested":
        recs[10]["optim"] = {"lr": 1e-3}
    elif change == "key with capital N":
        for r in recs:
            r["NLL"] = 1.0
    path = _write_jsonl(tmp_path / "run.jsonl", recs, extra)
    raw = path.read_bytes()
    if change == "blank line":
        lines = raw.split(b"\n")
        raw = b"\n".join([*lines[:100], b"", *lines[100:]])
    elif change == "bad line":
        lines = raw.split(b"\n")
        raw = b"\n".join([*lines[:100], b'{"step": oops}', *lines[100:]])
    elif change == "crlf":
        raw = raw.replace(b"\n", b"\r\n")
    elif change == "no newline at end":
        raw = raw.rstrip(b"\n")
    path.write_bytes(raw)
    fast, general, how = _read_both(path, monkeypatch)
    assert_same_run(fast, general)
    kept = [r for r in recs if not (change == "bool" and "flag" in r)]
    if change not in ("bool", "nested"):
        _same_values(fast, kept)
    if change in ("late key", "null literal", "colon in text", "blank line", "bad line"):
        assert how == "general"
    if change in ("crlf", "key with capital N", "no newline at end"):
        assert how in ("mapped", "bytes-fast")
    if change == "late keys tied":  # tied first appearance: in the order of that line
        order = fast.frame["metric"].unique(maintain_order=True).to_list()
        assert order.index("z_eval") < order.index("a_eval")
    if change == "bad line":
        assert [d.location for d in fast.data_quality] == ["line 101"]
    if change == "blank line":
        assert fast.frame.height == general.frame.height


@pytest.mark.usefixtures("small_fast_path")
def test_jsonl_restart_fast_and_general(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recs = _records(300)
    recs += [dict(r, loss=r["loss"] + 1) for r in _records(300)[200:260]]  # resumed at 200
    fast, general, how = _read_both(_write_jsonl(tmp_path / "run.jsonl", recs), monkeypatch)
    assert how == "mapped"
    assert_same_run(fast, general)
    [restart] = [d for d in fast.data_quality if d.kind == "restart"]
    assert restart.details["from_step"] == 299 and restart.details["to_step"] == 200
    steps, loss = fast.series("train/loss")
    assert steps.size == 260 and loss[210] == pytest.approx(recs[310]["loss"])  # 300 + 10


@pytest.mark.usefixtures("small_fast_path")
def test_jsonl_resume_offset_uses_the_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _records(200)
    path = _write_jsonl(tmp_path / "run.jsonl", recs)
    [first] = jsonl.read(path, ReadOptions())
    _write_jsonl(tmp_path / "more.jsonl", _records(250)[200:])
    with path.open("ab") as fh:
        fh.write((tmp_path / "more.jsonl").read_bytes())
    [more] = jsonl.read(path, ReadOptions(start_offset=first.cursor[str(path)]))
    assert more.series("train/loss")[0].tolist() == list(range(200, 250))


# ---- CSV: polars reading the path against the bytes read and decoded -----------------------------


def _write_csv(path: Path, n: int = 400, header: str = "step,time,loss,lr,val_loss") -> Path:
    rng = np.random.default_rng(1)
    lines = [header]
    for i in range(n):
        val = repr(float(rng.normal())) if i % 50 == 0 else ""
        lines.append(f"{i},{1.7e9 + i * 0.5},{float(rng.normal())!r},3e-4,{val}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _csv_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, Run, bool]:
    mapped = csv_reader._read_mapped(path) is not None
    [fast] = csv_reader.read(path, ReadOptions())
    with monkeypatch.context() as m:
        m.setattr(csv_reader, "_read_mapped", lambda p: None)
        [general] = csv_reader.read(path, ReadOptions())
    return fast, general, mapped


@pytest.mark.usefixtures("small_fast_path")
@pytest.mark.parametrize("variant", ["ascii", "utf8 header", "bad utf8", "text cell", "late type"])
def test_csv_path_read_matches_bytes_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    path = _write_csv(tmp_path / "metrics.csv")
    raw = path.read_bytes()
    if variant == "utf8 header":
        raw = raw.replace(b"val_loss", "val_loss_é".encode())
    elif variant == "bad utf8":
        raw = raw.replace(b"val_loss", b"val_lo\xffss")
    elif variant == "text cell":
        raw = raw.replace(b",3e-4,", b",n/a,", 1)
    elif variant == "late type":
        lines = raw.split(b"\n")
        lines[300] = lines[300].replace(b"3e-4", b"high")
        raw = b"\n".join(lines)
    path.write_bytes(raw)
    fast, general, mapped = _csv_both(path, monkeypatch)
    assert_same_run(fast, general)
    assert mapped == (variant in ("ascii", "text cell", "late type"))
    if variant == "bad utf8":
        assert fast.data_quality[0].kind == "encoding"


# ---- the bench's TensorBoard generator writes what tensorboardX writes ---------------------


def test_bench_generator_writes_tensorboardx_bytes() -> None:
    pytest.importorskip("tensorboardX")
    import sys

    bench = BENCH
    sys.path.insert(0, str(bench))
    try:
        import generate  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(bench))
    generate.verify_tensorboard(steps=300)  # raises SystemExit when a byte differs


def test_a_nan_loss_is_told_as_an_error_when_many_series_go_nan_with_it() -> None:
    """More series than max_metrics go NaN at one step: the loss is among those told, as
    an error, whatever its name sorts as (it sorted after `grad_norm/...` and was folded)."""
    from tests.detector_cases.series import run_of

    steps = np.arange(100)
    bad = np.where(steps >= 60, np.nan, 1.0)
    series = {f"grad_norm/layer{i:02d}": (steps, bad.copy()) for i in range(25)}
    series["train/loss"] = (steps, np.where(steps >= 60, np.nan, 2.0))
    run = run_of(series)
    found = nonfinite.detect(run, nonfinite.Params(), nonfinite.Context())
    loss = [f for f in found if f.metric == "train/loss"]
    assert loss and loss[0].severity.value == "error" and loss[0].step_start == 60
    assert len(found) == 21  # 20 told, the other 6 in one summary
    assert len(found[-1].evidence["metrics"]) == 6
