"""JSON lines (and CSV rows) whose step is under another name, written ``"N/M"``, counted
again each epoch, or an epoch only (issue 26, item 2: trainlens/readers/_step_rule.py).

Each file is written here with Python's json / csv modules, as hand-rolled training loops
write them; the expected steps are the ones the loop logged."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from trainlens.api import analyze
from trainlens.core.errors import UnreadableInputError
from trainlens.core.run import Run
from trainlens.readers import read_runs
from trainlens.readers._step_rule import step_word


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _one(path: Path) -> Run:
    (run,) = read_runs(path)
    return run


def _steps(run: Run, metric: str = "train/loss") -> list[int]:
    return run.series_frame(metric).get_column("step").to_list()


def _guess_note(run: Run) -> str:
    (note,) = [d.message for d in run.data_quality if d.kind == "inferred-step"]
    return note


def _loss(i: int) -> float:
    return 3.0 - 0.02 * i


@pytest.mark.parametrize("key", ["train_step", "num_updates", "n_iter", "optim/steps", "batch"])
def test_a_step_under_another_name(tmp_path: Path, key: str) -> None:
    rows = [{key: 10 * i, "loss": _loss(i), "lr": 1e-3} for i in range(1, 40)]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == [10 * i for i in range(1, 40)]
    assert f"the step is `{key}`" in _guess_note(run)
    assert run.metadata["step_column"] == key
    assert not run.has(key)  # the axis, not a metric


def test_usual_step_keys_need_no_guess(tmp_path: Path) -> None:
    for key in ("iter", "global_step", "it"):
        rows = [{key: 10 * i, "loss": _loss(i)} for i in range(1, 20)]
        run = _one(_jsonl(tmp_path / f"{key}.jsonl", rows))
        assert _steps(run) == [10 * i for i in range(1, 20)]
        assert not [d for d in run.data_quality if d.kind in ("inferred-step", "no-step")]


def test_step_written_n_of_m_gives_the_planned_length(tmp_path: Path) -> None:
    rows = [{"step": f"{10 * i}/500", "loss": _loss(i)} for i in range(1, 40)]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == [10 * i for i in range(1, 40)]
    assert run.metadata["max_steps"] == 500
    assert "written `N/M`" in _guess_note(run)


def test_batch_n_of_m_per_epoch_is_counted_over_the_run(tmp_path: Path) -> None:
    # `Epoch 2, batch 100/600`: the batch starts again each epoch, its total printed
    rows = [
        {"epoch": e, "batch": f"{b}/600", "loss": _loss(e * 6 + b // 100)}
        for e in range(1, 4)
        for b in range(100, 700, 100)
    ]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == [(e - 1) * 600 + b for e in range(1, 4) for b in range(100, 700, 100)]
    assert "(epoch - 1) × 600 + batch" in _guess_note(run)
    assert run.metadata["steps_per_epoch"] == 600
    assert run.has("epoch") and not run.has("batch")
    assert not [d for d in run.data_quality if d.kind == "restart"]


def test_iter_from_zero_each_epoch_is_no_restart(tmp_path: Path) -> None:
    # `iter` is a usual step key, but it starts again at 0 each time the epoch rises
    rows = [
        {"epoch": e, "iter": i, "loss": _loss(e * 20 + i // 10)}
        for e in range(3)
        for i in range(0, 200, 10)
    ]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    # no total printed: 190 (the largest) + 10 (one interval, counted from 0) per epoch
    assert _steps(run) == [e * 200 + i for e in range(3) for i in range(0, 200, 10)]
    assert "true length is not in the file" in _guess_note(run)
    (a,) = analyze(tmp_path / "log.jsonl")
    assert "DATA001" not in {f.code for f in a.findings}


def test_a_resumed_job_stays_a_restart(tmp_path: Path) -> None:
    # the step goes back and the epoch with it (not up): a relaunch, not a per-epoch count
    def row(s: int) -> dict[str, object]:
        return {"epoch": 1 + s // 100, "iter": s, "loss": _loss(s // 10)}

    rows = [row(s) for s in range(0, 300, 10)] + [row(s) for s in range(200, 400, 10)]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert not [d for d in run.data_quality if d.kind == "inferred-step"]
    assert [d for d in run.data_quality if d.kind == "restart"]


def test_epoch_only_log_is_read_at_its_epoch(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = []
    for e in range(1, 21):
        rows.append({"epoch": e, "loss": _loss(e), "acc": 0.5 + e / 50})
        rows.append({"epoch": e, "val_loss": _loss(e) + 0.1})  # its own line, same epoch
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == list(range(1, 21))
    assert _steps(run, "val/loss") == list(range(1, 21))
    epochs = run.series_frame("epoch").get_column("value").to_list()
    assert epochs == [float(e) for e in range(1, 21)]
    assert "an epoch count" in _guess_note(run)


def test_epoch_on_every_batch_line_is_no_step(tmp_path: Path) -> None:
    # many lines per epoch and nothing finer: the line number stays the step
    rows = [{"epoch": 1 + i // 10, "loss": _loss(i)} for i in range(50)]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == list(range(50))
    assert [d for d in run.data_quality if d.kind == "no-step"]


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("skipped_steps", [0] * 10 + [1] * 20 + [2] * 10),  # a counter that stays flat
        ("max_steps", [1000] * 40),  # a budget
        ("steps_per_sec", [3 + (i % 3) for i in range(40)]),  # a rate
        ("batch_size", [32] * 40),  # a size
        ("epoch", [0.025 * i for i in range(40)]),  # HF's fractional epoch
    ],
)
def test_columns_that_are_no_step(tmp_path: Path, key: str, values: list[float]) -> None:
    rows = [{key: v, "loss": _loss(i)} for i, v in enumerate(values)]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == list(range(40))  # the line number, said so
    assert [d for d in run.data_quality if d.kind == "no-step"]
    assert run.has(key)


def test_step_words() -> None:
    assert step_word("train_step") == "step"
    assert step_word("optimizer.iterations") == "iteration"
    assert step_word("n_batches") == "batch"
    assert step_word("GLOBAL_STEP") == "global_step"
    for name in ("step_time", "steps_per_sec", "time/step", "per_step", "loss", "stepsize"):
        assert step_word(name) is None, name


def test_csv_rows_follow_the_same_rule(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["train_step", "loss", "val_loss"])
        for i in range(1, 30):
            w.writerow([25 * i, _loss(i), "" if i % 5 else _loss(i) + 0.1])
    run = _one(path)
    assert _steps(run) == [25 * i for i in range(1, 30)]
    assert _steps(run, "val/loss") == [25 * i for i in range(5, 30, 5)]
    assert "read as CSV" in _guess_note(run)


def test_text_values_under_a_step_word_that_are_no_steps(tmp_path: Path) -> None:
    # `"step": "warmup"`: text that is neither a number nor N/M: each line is reported
    rows = [{"step": "warmup" if i < 3 else i, "loss": _loss(i)} for i in range(20)]
    run = _one(_jsonl(tmp_path / "log.jsonl", rows))
    assert _steps(run) == list(range(3, 20))
    (bad,) = [d for d in run.data_quality if d.kind == "bad-step"]
    assert bad.count == 3


def test_lines_without_numbers_are_refused(tmp_path: Path) -> None:
    rows = [{"epoch": f"{e}/10", "status": "ok"} for e in range(1, 5)]
    with pytest.raises(UnreadableInputError):
        read_runs(_jsonl(tmp_path / "log.jsonl", rows))
