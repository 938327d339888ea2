"""One bad record is one note, never the run (issue 23, item 7): steps that are no step
(2**63, 1e66, 1.5, -1.5, NaN, "abc"), names that differ only by a lone surrogate or a NUL,
an undecodable number in a damaged W&B log, broken mlflow.db files and a million-column
CSV. Every reader: values in = values in the frame + values counted skipped.

W&B logs are written by the real SDK offline, then one record patched through W&B's own
protobuf classes (tests/_wandb_records.py); MLflow databases by the mlflow client."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests._wandb_records import frame, patch_history, records, set_item
from tests.conftest import run_wandb_offline
from trainlens.core.run import Run
from trainlens.readers import read_runs

STEPS = 300  # the W&B run's history records, three metrics each
SKIPS = ("bad-step", "non-numeric", "non-scalar", "bad-line")  # notes that count values


def _history(run: Run) -> pl.DataFrame:
    """The W&B run's logged metrics (not W&B's system samples)."""
    raw = {c for c, r in run.raw_names.items() if r.startswith("system/")}
    return run.frame.filter(~pl.col("metric").cast(pl.String).is_in(list(raw)))


def _skipped(run: Run) -> int:
    return sum(d.count for d in run.data_quality if d.kind in SKIPS)


@pytest.fixture(scope="module")
def wandb_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb")
    run_wandb_offline(Path(__file__).with_name("_wandb_plain_writer.py"), root, str(STEPS))
    [log] = list(root.rglob("*.wandb"))
    return log.read_bytes()


@pytest.fixture(params=["compiled", "numpy"])
def lane(request: pytest.FixtureRequest) -> Iterator[str]:
    import trainlens.readers.wandb_run as wr

    saved = wr._wbscan
    if request.param == "numpy":
        wr._wbscan = None
    elif saved is None:
        pytest.skip("the compiled lane is not built")
    try:
        yield request.param
    finally:
        wr._wbscan = saved


def _patched_step(data: bytes, at: int, value_json: str) -> bytes:
    def change(n: int, history: object) -> bool:
        if n == at:
            set_item(history, "_step", value_json)
        return True

    return patch_history(data, change)


@pytest.mark.parametrize(
    ("step", "why"),
    [
        (str(2**63), "beyond 64 bits"),
        ("1e66", "beyond 64 bits"),
        ("-1.5", "not a whole number"),
        ("150.5", "not a whole number"),
        ("-1", "negative"),  # the SDK never writes one (it drops a step below the current)
        ("NaN", "NaN or infinite"),
        ('"abc"', "not a number"),
    ],
)
def test_wandb_step_that_is_no_step_skips_its_record(
    wandb_log: bytes, lane: str, tmp_path: Path, step: str, why: str
) -> None:
    path = tmp_path / "run-plain01.wandb"
    path.write_bytes(_patched_step(wandb_log, 150, step))
    (run,) = read_runs(path)
    history = _history(run)
    assert history.height == (STEPS - 1) * 3  # the 299 good records all kept
    assert not history.get_column("superseded").any()  # no restart made of it
    assert 150 not in history.get_column("step").to_list()
    (note,) = [d for d in run.data_quality if d.kind == "bad-step"]
    assert note.count == 3 and why in note.message and note.source == str(path)
    assert note.location is not None and note.location.startswith("record at byte ")


def test_wandb_step_2_63_minus_1_is_kept_exactly(
    wandb_log: bytes, lane: str, tmp_path: Path
) -> None:
    path = tmp_path / "run-plain01.wandb"
    path.write_bytes(_patched_step(wandb_log, STEPS - 1, str(2**63 - 1)))
    (run,) = read_runs(path)
    history = _history(run)
    assert history.height == STEPS * 3 and not run.data_quality
    assert history.get_column("step").max() == 2**63 - 1


def test_wandb_undecodable_number_beside_damage_is_one_note(
    wandb_log: bytes, tmp_path: Path
) -> None:
    def change(n: int, history: object) -> bool:
        if n == 100:
            set_item(history, "loss", "1,2")  # a comma: it split the numpy lane's CSV parse
        return True

    data = patch_history(wandb_log, change)
    path = tmp_path / "run-plain01.wandb"
    path.write_bytes(data[: len(data) - 1000])  # cut: the damaged file's (numpy) lane
    (run,) = read_runs(path)
    assert any(d.kind == "corrupt-record" for d in run.data_quality)
    (note,) = [d for d in run.data_quality if d.kind == "non-scalar"]
    assert note.count == 1 and "loss: 1" in note.message
    history = _history(run)
    assert (100, 2.0 - 100 / 1000) not in history.filter(pl.col("metric") == "train/loss").select(
        "step", "value"
    ).rows()
    assert history.height > 250 * 3


def test_wandb_keys_differing_by_a_lone_surrogate_or_nul_stay_apart(
    wandb_log: bytes, lane: str, tmp_path: Path
) -> None:
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for raw in records(wandb_log):
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") == "history":
            set_item(rec.history, "xAAAx", "1.5")
            set_item(rec.history, "xBBBx", "2.5")
            set_item(rec.history, "x\x00", "3.5")
            raw = rec.SerializeToString()
            # (the SDK's protobuf writes no invalid UTF-8: the bytes are put in afterwards)
            raw = raw.replace(b"xAAAx", b"x\xed\xa0\x80x").replace(b"xBBBx", b"x\xed\xb0\x80x")
        out.append(raw)
    path = tmp_path / "run-plain01.wandb"
    path.write_bytes(frame(out))
    (run,) = read_runs(path)
    counts = dict(_history(run).group_by("metric").len().iter_rows())
    assert counts == {
        "train/loss": STEPS,
        "lr": STEPS,
        "grad_norm": STEPS,
        "x\\xed\\xa0\\x80x": STEPS,
        "x\\xed\\xb0\\x80x": STEPS,
        "x\x00": STEPS,
    }


# ---- JSONL and CSV steps ---------------------------------------------------------------------


def _jsonl(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(r + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("step", "why"),
    [
        ("1.5", "not a whole number"),
        ("-1.5", "not a whole number"),
        (str(2**63), "beyond 64 bits"),
        ("1e66", "beyond 64 bits"),
        ("NaN", "NaN or infinite"),
        ('"abc"', "not a number"),
    ],
)
def test_jsonl_step_that_is_no_step_is_skipped_not_rounded(
    tmp_path: Path, step: str, why: str
) -> None:
    rows = [json.dumps({"step": s, "loss": 1.0 / (s + 1)}) for s in range(5)]
    rows.insert(3, f'{{"step": {step}, "loss": 0.125}}')
    (run,) = read_runs(_jsonl(tmp_path, rows))
    assert run.frame.get_column("step").to_list() == [0, 1, 2, 3, 4]
    assert 0.125 not in run.frame.get_column("value").to_list()
    (note,) = run.data_quality
    assert note.kind == "bad-step" and note.count == 1 and note.location == "line 4"
    assert why in note.message


def test_jsonl_big_steps_are_exact_beside_a_fraction(tmp_path: Path) -> None:
    """A fraction anywhere made the step column float: 2**63-1 was then 2**63 (reported as
    no step) and 2**53+1 became 2**53."""
    rows = [
        '{"step": 1.5, "loss": 9.0}',
        '{"step": 9007199254740993, "loss": 1.0}',
        f'{{"step": {2**63 - 1}, "loss": 2.0}}',
    ]
    (run,) = read_runs(_jsonl(tmp_path, rows))
    assert run.frame.get_column("step").to_list() == [9007199254740993, 2**63 - 1]
    assert [d.count for d in run.data_quality if d.kind == "bad-step"] == [1]


def test_csv_big_steps_are_exact_beside_a_fraction(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerows([["step", "loss"], [1.5, 9.0], [2**53 + 1, 1.0], [2**63 - 1, 2.0]])
    (run,) = read_runs(path)
    assert run.frame.get_column("step").to_list() == [2**53 + 1, 2**63 - 1]
    (note,) = [d for d in run.data_quality if d.kind == "bad-step"]
    assert note.count == 1 and note.location == "line 2" and "not a whole number" in note.message


def test_jsonl_names_differing_by_a_lone_surrogate_or_nul_stay_apart(tmp_path: Path) -> None:
    keys = ["lo\\ud800ss", "lo\\udc00ss", "loss\\u0000"]  # JSON escapes, as json.dumps writes
    rows = [
        "{" + f'"step": {s}, ' + ", ".join(f'"{k}": {i}' for i, k in enumerate(keys)) + "}"
        for s in range(300)
    ]
    (run,) = read_runs(_jsonl(tmp_path, rows))
    counts = dict(run.frame.group_by("metric").len().iter_rows())
    assert counts == {"lo\\ud800ss": 300, "lo\\udc00ss": 300, "loss\x00": 300}


# ---- mlflow.db and a very wide CSV -------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    db = tmp_path_factory.mktemp("db") / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    run = client.create_run(client.create_experiment("x"))
    for s in range(STEPS):
        client.log_metric(run.info.run_id, "loss", 1.0 / (s + 1), step=s)
    return db


def _cli(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainlens", "analyze", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_broken_mlflow_db_says_what_is_wrong(mlflow_db: Path, tmp_path: Path, damage: str) -> None:
    data = mlflow_db.read_bytes()
    n = len(data)
    bad = tmp_path / "mlflow.db"
    if damage == "truncated":
        bad.write_bytes(data[: n // 2])
    else:  # the middle half overwritten
        bad.write_bytes(data[: n // 4] + b"\x5a" * (n // 2) + data[3 * n // 4 :])
    done = _cli(bad)
    assert done.returncode == 2 and "not a format trainlens knows" not in done.stderr
    assert f"{bad}: cannot read the MLflow database: " in done.stderr
    assert "malformed" in done.stderr and "Traceback" not in done.stderr
    if damage == "truncated":
        assert f"cut short ({n // 2} of {n} bytes)" in done.stderr


@pytest.mark.slow  # sqlite waits its 5 s busy timeout before it says so
def test_locked_mlflow_db_says_it_is_locked(mlflow_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "mlflow.db"
    shutil.copy(mlflow_db, copy)
    writer = sqlite3.connect(copy, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
        done = _cli(copy)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert done.returncode == 2
    assert f"{copy}: cannot read the MLflow database: database is locked" in done.stderr


@pytest.mark.slow  # (writing the file and a CLI process: ~7 s)
def test_a_million_columns_is_too_many_columns(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    n = 1_000_000
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", *(f"m{i}" for i in range(n))])
        w.writerow([0, *([1.0] * n)])
    done = _cli(path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{path}: too many columns (1,000,001 in its header line)" in done.stderr


# ---- values in = values out + values skipped, per reader ------------------------------------


def test_accounting_jsonl(tmp_path: Path) -> None:
    rows = [json.dumps({"step": s, "loss": 1.0, "acc": 0.5}) for s in range(20)]
    rows += ['{"step": 1.5, "loss": 1.0, "acc": 0.5}', '{"step": 30, "loss": "x"}', "{oops"]
    (run,) = read_runs(_jsonl(tmp_path, rows))
    assert run.frame.height + _skipped(run) == 40 + 2 + 1 + 1


def test_accounting_csv(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "loss", "acc"])
        w.writerows([s, 1.0, 0.5] for s in range(20))
        w.writerows([["abc", 1.0, 0.5], [21, "x", 0.5], [2**64, 1.0, 0.5]])
    (run,) = read_runs(path)
    assert run.frame.height + _skipped(run) == 46


def test_accounting_wandb(wandb_log: bytes, lane: str, tmp_path: Path) -> None:
    def change(n: int, history: object) -> bool:
        if n == 10:
            set_item(history, "_step", "1e66")
        if n == 20:
            set_item(history, "note", '"text"')  # a value that is no number
        return True

    path = tmp_path / "run-plain01.wandb"
    path.write_bytes(patch_history(wandb_log, change))
    (run,) = read_runs(path)
    assert _history(run).height + _skipped(run) == STEPS * 3 + 1


def test_accounting_tensorboard(tmp_path: Path) -> None:
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    with torch_tb.SummaryWriter(str(tmp_path / "tb")) as w:
        for s in range(50):
            w.add_scalar("loss", float("nan") if s == 7 else 1.0 / (s + 1), s)
            w.add_scalar("lr", 1e-3, s)
    (run,) = read_runs(tmp_path / "tb")
    assert run.frame.height + _skipped(run) == 100


def test_accounting_mlflow(mlflow_db: Path) -> None:
    (run,) = read_runs(mlflow_db)
    assert run.frame.height + _skipped(run) == STEPS


def test_accounting_hf_trainer_state(tmp_path: Path) -> None:
    history = [{"step": s, "loss": 1.0, "learning_rate": 1e-3} for s in range(1, 21)]
    history += [{"step": 2.5, "loss": 7.0}, {"step": -3, "loss": 7.0}, {"loss": 7.0}]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 20, "log_history": history}))
    (run,) = read_runs(path)
    assert run.frame.height + _skipped(run) == 43
    assert 7.0 not in run.frame.get_column("value").to_list()  # 2.5 is not rounded to 2


def test_accounting_text_log(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    lines = [f"step {s}/100 | loss {1.0 / (s + 1):.4f} | lr 1.0000e-03" for s in range(1, 21)]
    path.write_text("\n".join(lines) + "\n")
    (run,) = read_runs(path)
    assert run.frame.height + _skipped(run) == 40


def test_accounting_parquet(tmp_path: Path) -> None:
    path = tmp_path / "metrics.parquet"
    pl.DataFrame(
        {"step": [0, 1, 2, None, 4], "loss": [1.0, 0.9, 0.8, 0.7, 0.6], "lr": [1e-3] * 5}
    ).write_parquet(path)
    (run,) = read_runs(path)
    assert run.frame.height + _skipped(run) == 10
