"""Bad rows in text logs (JSONL, CSV, trainer_state.json, llm.c / Megatron text): the row
is skipped with a note that says where, every other value is kept, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import trainlens
from tests.conftest import REPO
from trainlens.core.errors import TrainlensError
from trainlens.core.run import Run


def _only(path: Path) -> Run:
    [run] = trainlens.read(path)
    return run


def _loss(run: Run) -> list[tuple[int, float]]:
    steps, values = run.series("train/loss")
    return list(zip(steps.tolist(), values.tolist(), strict=True))


def _notes(run: Run, kind: str) -> list[str]:
    return [str(d) for d in run.data_quality if d.kind == kind]


# ---- steps out of range ---------------------------------------------------------------------

BAD_JSON_STEPS = ["NaN", "Infinity", "-Infinity", "123456789012345678901", "1e400", '"ten"']


@pytest.mark.parametrize("bad", BAD_JSON_STEPS)
def test_jsonl_bad_step_skips_that_line_only(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"step": 0, "loss": 1.0}\n'
        f'{{"step": {bad}, "loss": 2.0, "lr": 0.1}}\n'
        '{"step": 2, "loss": 0.5}\n'
    )
    run = _only(path)
    assert _loss(run) == [(0, 1.0), (2, 0.5)]
    [note] = _notes(run, "bad-step")
    assert "line 2" in note and "2 value(s)" in note


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "123456789012345678901", "x"])
def test_csv_bad_step_skips_that_row_only(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text(f"step,loss\n0,1.0\n{bad},2.0\n2,0.5\n")
    run = _only(path)
    assert _loss(run) == [(0, 1.0), (2, 0.5)]
    [note] = _notes(run, "bad-step")
    assert "line 3" in note


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "null", "10e400", "123456789012345678901"])
def test_trainer_state_bad_step_skips_that_entry_only(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(
        '{"log_history": [{"step": 1, "loss": 1.0}, '
        f'{{"step": {bad}, "loss": 2.0}}, {{"step": 3, "loss": 0.5}}]}}'
    )
    run = _only(path)
    assert _loss(run) == [(1, 1.0), (3, 0.5)]
    [note] = _notes(run, "bad-step")
    assert "log_history[1]" in note and "1 value(s)" in note


def test_trainer_state_value_beyond_float_is_infinite_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(
        '{"log_history": [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 1%s}]}' % ("0" * 400)
    )
    assert _loss(_only(path)) == [(1, 1.0), (2, float("inf"))]


def test_llmc_step_beyond_int64_skips_that_line_only(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("s:0 trl:1.0\ns:12345678901234567890 trl:2.0\ns:2 trl:0.5\n")
    run = _only(path)
    assert _loss(run) == [(0, 1.0), (2, 0.5)]
    [note] = _notes(run, "bad-step")
    assert "line 2" in note


def test_megatron_iteration_beyond_int64_skips_that_line_only(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(
        " iteration        1/      10 | lm loss: 2.0 |\n"
        " iteration 99999999999999999999/      10 | lm loss: 3.0 |\n"
        " iteration        3/      10 | lm loss: 1.0 |\n"
    )
    run = _only(path)
    assert _loss(run) == [(1, 2.0), (3, 1.0)]
    assert "line 2" in _notes(run, "bad-step")[0]


# ---- values in == values out + values reported ----------------------------------------------


def test_jsonl_lines_without_a_step_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"step": 0, "loss": 1.0}\n{"loss": 2.0, "acc": 3}\n{"step": 2, "loss": 0.5}\n{"acc": 4}\n'
    )
    run = _only(path)
    assert _loss(run) == [(0, 1.0), (2, 0.5)]
    [note] = run.data_quality
    assert note.kind == "bad-step" and note.count == 3
    assert note.details["lines"] == [2, 4]
    assert run.frame.height + note.count == 5  # loss 1.0, 2.0, 0.5; acc 3, 4


# ---- nesting ----------------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return '{"step": 1, "loss": 9.0, "a": ' + '{"b": ' * depth + "1" + "}" * depth + "}"


@pytest.mark.parametrize("depth", [250, 5000])
def test_jsonl_deep_line_is_skipped_and_the_rest_kept(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 0, "loss": 1.0}\n' + _nested(depth) + '\n{"step": 2, "loss": 0.5}\n')
    run = _only(path)
    assert _loss(run) == [(0, 1.0), (2, 0.5)]
    [note] = _notes(run, "too-deep")
    assert "line 2" in note


def test_jsonl_line_700_deep_does_not_kill_the_process(tmp_path: Path) -> None:
    # a polars segfault would kill pytest itself: read in a child process
    path = tmp_path / "run.jsonl"
    lines = [json.dumps({"step": i, "loss": 1.0}) for i in range(3)] + [_nested(700)]
    path.write_text("\n".join(lines) + "\n" + _nested(700))
    code = "import sys, trainlens; [r] = trainlens.read(sys.argv[1]); print(r.frame.height)"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "3"


def test_jsonl_a_little_nesting_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": 0, "loss": 1.0, "optim": {"grad": {"norm": 2.0}}}\n')
    run = _only(path)
    assert run.data_quality == []
    assert run.series("optim/grad/norm")[1].tolist() == [2.0]


def test_trainer_state_deep_entry_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    deep = "[" * 5000 + "]" * 5000
    path.write_text(
        json.dumps({"log_history": [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.7}]})
        .replace('"loss": 0.7}', '"loss": 0.7, "x": ' + deep + "}")
        .replace("]}", ', {"step": 3, "loss": 0.5}]}')
    )
    run = _only(path)
    assert _loss(run) == [(1, 1.0), (3, 0.5)]
    assert len(_notes(run, "too-deep")) == 1


# ---- width --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_wide_rows_read_in_linear_time(tmp_path: Path, suffix: str) -> None:
    # 4,000 keys took about a minute when the schema was rebuilt per column (2,000: 15 s);
    # linear, it is about a second: the bound is far from both
    import time

    width, rows = 4000, 5
    path = tmp_path / f"wide{suffix}"
    if suffix == ".jsonl":
        recs = [{"step": s, **{f"m{j}": s + j / width for j in range(width)}} for s in range(rows)]
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    else:
        header = "step," + ",".join(f"m{j}" for j in range(width))
        body = [f"{s}," + ",".join(str(s + j / width) for j in range(width)) for s in range(rows)]
        path.write_text("\n".join([header, *body]) + "\n")
    start = time.perf_counter()
    [run] = trainlens.read(path, format=suffix[1:])
    elapsed = time.perf_counter() - start
    assert run.frame.height == width * rows
    assert run.series("m3999")[1].tolist() == [s + 3999 / width for s in range(rows)]
    assert elapsed < 20, f"{elapsed:.1f} s for {width} columns"


def test_jsonl_true_and_false_are_not_steps(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"step": true, "loss": 1}\n{"step": false, "loss": 2}\n')
    with pytest.raises(TrainlensError, match=r"without a usable step.*no value is left"):
        trainlens.read(path)


def test_user_regex_step_beyond_int64_skips_that_line_only(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("it 1 loss 2.0\nit 123456789012345678901 loss 3.0\nit 3 loss 1.0\n")
    [run] = trainlens.read(path, regex=r"it (?P<step>\d+) loss (?P<loss>\S+)")
    assert _loss(run) == [(1, 2.0), (3, 1.0)]
    assert "line 2" in _notes(run, "bad-step")[0]


def test_mlflow_step_or_timestamp_beyond_int64_is_a_bad_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow")
    from mlflow.entities import Metric

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path / "mlruns"
    client = mlflow.MlflowClient(f"file:{root}")
    exp = client.create_experiment("e")
    rid = client.create_run(exp).info.run_id
    t0 = 1_700_000_000_000
    client.log_batch(rid, metrics=[Metric("loss", 1.0 / (s + 1), t0 + s, s) for s in range(5)])
    loss_file = root / exp / rid / "metrics" / "loss"
    with loss_file.open("a") as fh:
        fh.write(f"{t0} 9.0 123456789012345678901\n99999999999999999999999 8.0 6\n{t0} 7.0 7\n")
    [run] = trainlens.read(root)
    assert _loss(run) == [(s, 1.0 / (s + 1)) for s in range(5)] + [(7, 7.0)]
    [bad] = [d for d in run.data_quality if d.kind == "bad-line"]
    assert bad.details["lines"] == [6, 7]


def test_jsonl_a_list_under_the_step_or_time_key(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"step": 0, "loss": 1.0, "time": [1, 2]}\n{"step": [1], "loss": 2.0, "time": [3]}\n'
        '{"step": true, "loss": 3.0}\n{"step": 2, "loss": 0.5, "time": [4]}\n'
    )
    run = _only(path)
    assert _loss(run) == [(0, 1.0), (2, 0.5)]
    assert run.frame.get_column("wall_time").null_count() == run.frame.height
    [note] = _notes(run, "bad-step")
    assert "lines 2, 3" in note


def test_jsonl_odd_keys(tmp_path: Path) -> None:
    # an empty key, a flat "a/b" beside a nested a.b (was a polars DuplicateError / a
    # ColumnNotFoundError): every value kept, under a name of its own
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"step": 1, "loss": 1.0, "": 2, "a/b": 3, "a": {"b": 4}}\n'
        '{"step": 2, "loss": 0.5, "": 5, "a/b": 6, "a": {"b": 7}}\n'
    )
    run = _only(path)
    assert _loss(run) == [(1, 1.0), (2, 0.5)]
    assert run.series("")[1].tolist() == [2.0, 5.0]
    assert run.series("a/b")[1].tolist() == [3.0, 6.0]
    assert run.series("a/b#2")[1].tolist() == [4.0, 7.0]
