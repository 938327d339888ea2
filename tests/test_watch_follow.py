"""Followers read runs while real writers write them; the chunks add up to trainlens.read.

Each test writes with the library that writes the format in training jobs (torch's and
tensorboardX's SummaryWriter, the mlflow client on a file store and on SQLite, HF's
TrainerState, Lightning's CSVLogger) or, for text logs, the lines of real logs, polls the
follower between writes, and compares the run so far (LiveRun.add + LiveRun.run) with
``trainlens.read`` of the finished source: steps, metric names, values (NaN too), restarts.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from trainlens.api import read
from trainlens.core.config import Config
from trainlens.readers import ReadOptions
from trainlens.watch._follow_lines import LinesFollower
from trainlens.watch.discovery import Discovery, follower_for
from trainlens.watch.follow import Follower, OffsetFollower, RereadFollower
from trainlens.watch.live import LiveRun

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


def _job() -> Any:
    from trainlens.gate.rules import parse_rules
    from trainlens.gate.runner import GateJob

    cfg = Config()
    return GateJob(cfg=cfg, rules=parse_rules(cfg), fail_rank=3)


class Watched:
    """Followers found by a Discovery, polled like the watch loop polls them."""

    def __init__(self, *paths: Path) -> None:
        self.discovery = Discovery(list(paths), format=None, options=ReadOptions())
        self.runs: dict[str, LiveRun] = {}
        self.events: list[Any] = []

    def poll(self) -> None:
        for f in self.discovery.poll():
            self.runs[f.name] = LiveRun(f, _job())
        for live in self.runs.values():
            chunk = live.follower.poll()
            if chunk is not None:
                self.events.extend(live.add(chunk))
        # (a name settles at the follower's first read)
        self.runs = {live.name: live for live in self.runs.values()}

    def issues(self) -> list[Any]:
        return [e for e in self.events if e.kind == "read-issue"]


def _frame(df: pl.DataFrame) -> pl.DataFrame:
    cols = ["step", "metric", "value", "superseded"]
    return (
        df.with_columns(pl.col("metric").cast(pl.String))
        .select(cols)
        .sort("metric", "step", "superseded", "value", nulls_last=True)
    )


def assert_same_run(live: LiveRun, want: Any) -> None:
    got = live.run()
    assert live.name == want.name
    assert got.frame.height == want.frame.height
    assert_frame_equal(_frame(got.frame), _frame(want.frame))


def _only(path: Path) -> Any:
    (run,) = read(path)
    return run


def _follow_one(follower: Follower, steps: list[Callable[[], None]]) -> LiveRun:
    live = LiveRun(follower, _job())
    for write in steps:
        write()
        chunk = follower.poll()
        if chunk is not None:
            warnings = [str(i) for i in chunk.issues if i.severity != "info"]
            assert not warnings  # (a half-written line or record is a wait, not a note)
            live.add(chunk)
    chunk = follower.poll(final=True)  # (as the watch's last poll)
    if chunk is not None:
        live.add(chunk)
    return live


def _loss(step: int) -> float:
    return float("nan") if step == 17 else 3.0 / (1 + step) + 0.01 * (step % 3)


# ---- TensorBoard --------------------------------------------------------------------------


def test_a_tensorboard_logdir_is_followed_run_by_run(tmp_path: Path) -> None:
    """Runs under a logdir, one appearing mid-watch, and a restarted SummaryWriter whose new
    event file joins its run (steps going back: a restart, as trainlens.read marks it)."""
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "runs"
    logdir.mkdir()
    watched = Watched(logdir)
    a = SummaryWriter(str(logdir / "a"))
    b = None
    for s in range(40):
        a.add_scalar("train/loss", _loss(s), s)
        a.add_scalar("lr", 1e-3 * (s + 1), s)
        if s == 20:
            b = SummaryWriter(str(logdir / "b"))  # a run that appears while watched
        if b is not None:
            b.add_scalar("loss", 1.0 / (s + 1), s)
            b.flush()
        if s % 5 == 0:
            a.flush()
            watched.poll()
    a.close()
    watched.poll()
    assert set(watched.runs) == {"a", "b"}
    a2 = SummaryWriter(str(logdir / "a"), filename_suffix=".resumed")  # a resumed job
    for s in range(30, 50):
        a2.add_scalar("train/loss", 0.5 / (1 + s), s)
        if s % 4 == 0:
            a2.flush()
            watched.poll()
    a2.close()
    assert b is not None
    b.close()
    watched.poll()
    watched.poll()
    want = {r.name: r for r in read(logdir)}
    assert set(want) == {"a", "b"}
    for name, live in watched.runs.items():
        assert_same_run(live, want[name])
    assert live.run().frame["superseded"].any() or name == "b"
    assert not watched.issues()
    a_follower = watched.runs["a"].follower
    assert len(a_follower.paths) == 3  # the folder and its two event files


def test_tensorboardx_writer_is_followed(tmp_path: Path) -> None:
    from tensorboardX import SummaryWriter

    run = tmp_path / "tbx"
    w = SummaryWriter(str(run))

    def write(s: int) -> Callable[[], None]:
        def go() -> None:
            for k in range(5):
                w.add_scalar("train/loss", _loss(5 * s + k), 5 * s + k)
                w.add_scalar("grad_norm", 1.0 + k, 5 * s + k)
            w.flush()

        return go

    f = follower_for(run, "tensorboard", ReadOptions())
    live = _follow_one(f, [write(s) for s in range(10)])
    w.close()
    chunk = f.poll()
    if chunk is not None:
        live.add(chunk)
    assert_same_run(live, _only(run))
    assert math.isnan(live.run().frame.filter(pl.col("step") == 17)["value"][0])


def _events_bytes(tmp: Path, steps: int) -> bytes:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp))
    for s in range(steps):
        w.add_scalar("train/loss", _loss(s), s)
    w.close()
    (f,) = tmp.iterdir()
    return f.read_bytes()


def test_a_record_being_flushed_waits_and_is_not_corrupt(tmp_path: Path) -> None:
    """A real writer's file arriving a few bytes at a time (a flush cut anywhere, in a
    record's header, data or checksum): each poll passes on only whole records, no note."""
    data = _events_bytes(tmp_path / "w", 30)
    path = tmp_path / "run" / "events.out.tfevents.1700000000.host"
    path.parent.mkdir()
    path.write_bytes(b"")
    written = 0

    def grow() -> None:
        nonlocal written
        with path.open("ab") as fh:
            fh.write(data[written : written + 7])
        written += 7

    f = OffsetFollower(path, "tensorboard", ReadOptions())
    live = _follow_one(f, [grow] * (len(data) // 7 + 1))  # (asserts no chunk has a note)
    assert f.cursor == len(data)
    assert_same_run(live, _only(path))


def test_a_corrupt_record_in_the_middle_is_reported_once_with_its_record_number(
    tmp_path: Path,
) -> None:
    data = bytearray(_events_bytes(tmp_path / "w", 30))
    path = tmp_path / "run" / "events.out.tfevents.1700000000.host"
    path.parent.mkdir()
    half = len(data) // 2
    path.write_bytes(bytes(data[:half]))
    f = OffsetFollower(path, "tensorboard", ReadOptions())
    first = f.poll()
    assert first is not None and not first.issues
    records_before = f.lines
    cut = f.cursor
    data[cut + 14] ^= 0xFF  # a byte of the next record's data: its checksum fails
    with path.open("r+b") as fh:
        fh.seek(cut)
        fh.write(bytes(data[cut:]))
    second = f.poll()
    assert second is not None
    (issue,) = second.issues
    assert issue.kind == "corrupt-record"
    assert issue.location is not None
    assert issue.location.startswith(f"record {records_before + 1} ")
    assert f.poll() is None  # reported once
    full = _only(path)
    assert first.frame.height + second.frame.height == full.frame.height
    assert any(i.location == issue.location for i in full.data_quality)


# ---- CSV (Lightning) ----------------------------------------------------------------------


def test_lightning_csv_is_followed_through_a_new_column(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(str(tmp_path), name="exp")
    metrics = Path(logger.log_dir) / "metrics.csv"
    watched = Watched(tmp_path / "exp")
    replaced = []
    for s in range(60):
        row: dict[str, float] = {"train_loss": _loss(s), "lr": 1e-3}
        if s >= 30:
            row["grad_norm"] = 1.0 + s / 100  # a new metric: the file is rewritten
        logger.log_metrics(row, step=s)
        if s % 10 == 9:
            logger.log_metrics({"val_loss": 2.0 - s / 100}, step=s)
        if s % 4 == 3:
            logger.save()
            watched.poll()
            replaced += [e for e in watched.events if e.kind == "run-resumed"]
    logger.save()
    watched.poll()
    (live,) = watched.runs.values()
    assert isinstance(live.follower, LinesFollower)
    assert_same_run(live, _only(metrics.parent))
    # the rewrite with a new column was seen (the header it follows now has it), and the
    # values passed on before it were not passed on again (no restart, nothing doubled)
    assert b"grad_norm" in live.follower.header
    assert not replaced
    assert not watched.issues()


def test_csv_polls_read_only_the_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{1 / (s + 1)}\n" for s in range(1000)))
    f = LinesFollower(path, "csv", ReadOptions())
    first = f.poll()
    assert first is not None and first.frame.height == 1000
    with path.open("a") as fh:
        fh.write("1000,0.5\n1001,nan\n1002,0.")  # the last line is still being written
    second = f.poll()
    assert second is not None and second.frame["step"].to_list() == [1000, 1001]
    assert math.isnan(second.frame["value"][1])
    assert f.cursor == path.stat().st_size - len("1002,0.")
    with path.open("a") as fh:
        fh.write("4\n1003,oops\n")
    third = f.poll()
    assert third is not None and third.frame["step"].to_list() == [1002]
    (issue,) = third.issues
    assert issue.location == "line 1005" and issue.source == str(path)  # the file's line
    assert str(path) in str(issue)


# ---- MLflow -------------------------------------------------------------------------------


def _mlflow_run_steps(mlflow: Any, watched: Watched, n: int, name: str) -> None:
    with mlflow.start_run(run_name=name):
        mlflow.log_param("lr", 0.001)
        for s in range(n):
            mlflow.log_metric("loss", _loss(s), step=s)
            mlflow.log_metric("grad_norm", 1.0 + s % 4, step=s)
            if s % 6 == 5:
                watched.poll()


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_mlflow_runs_are_followed_as_the_client_logs(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    if backend == "file":
        store = tmp_path / "mlruns"
        uri = store.as_uri()
    else:
        store = tmp_path / "mlflow.db"
        uri = f"sqlite:///{store}"
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("exp")
        watched = Watched(tmp_path) if backend == "file" else Watched(store)
        _mlflow_run_steps(mlflow, watched, 25, "first")
        watched.poll()
        assert list(watched.runs) and all(not n.endswith("second") for n in watched.runs)
        _mlflow_run_steps(mlflow, watched, 20, "second")  # a run that starts later
        watched.poll()
        watched.poll()
    finally:
        mlflow.set_tracking_uri("")
    want = {r.name: r for r in read(store)}
    assert {n.rsplit("/", 1)[-1] for n in watched.runs} == set(want) == {"first", "second"}
    for name, live in watched.runs.items():
        w = want[name.rsplit("/", 1)[-1]]
        got = live.run()
        assert_frame_equal(_frame(got.frame), _frame(w.frame))
    assert not watched.issues()


def test_a_locked_mlflow_database_is_a_wait(tmp_path: Path) -> None:
    import sqlite3

    from trainlens.watch._follow_mlflow import _sqlite_query

    db = tmp_path / "x.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE metrics (v REAL)")
    con.execute("INSERT INTO metrics VALUES (1)")
    con.commit()
    con.execute("PRAGMA locking_style")
    con.execute("BEGIN EXCLUSIVE")
    assert _sqlite_query(db, "SELECT max(rowid) FROM metrics") is None  # not an error
    con.rollback()
    assert _sqlite_query(db, "SELECT max(rowid) FROM metrics") == 1
    con.close()


# ---- HF trainer_state.json ----------------------------------------------------------------


def test_trainer_state_rewrites_pass_on_only_new_entries(tmp_path: Path) -> None:
    from transformers import TrainerState

    out = tmp_path / "checkpoint"
    out.mkdir()
    path = out / "trainer_state.json"
    state = TrainerState()
    f = follower_for(path, "hf-trainer", ReadOptions())
    live = LiveRun(f, _job())
    heights = []
    for s in range(1, 41):
        state.global_step = s
        state.log_history.append({"loss": _loss(s), "learning_rate": 1e-4, "step": s})
        if s % 10 == 0:
            state.log_history.append({"eval_loss": 1.0 + 1 / s, "step": s})
        if s % 5 == 0:
            state.save_to_json(str(path))
            chunk = f.poll()
            assert chunk is not None and not chunk.replaced and not chunk.issues
            heights.append(chunk.frame.height)
            live.add(chunk)
    assert_same_run(live, _only(path))
    assert max(heights) < 20  # each poll passes on its five steps, not the whole history
    # a writer caught mid-write: half a JSON document is a wait, not a note
    text = path.read_text()
    state.log_history.append({"loss": 0.1, "step": 41})
    path.write_text(text[: len(text) // 2])
    assert f.poll() is None
    state.save_to_json(str(path))
    chunk = f.poll()
    assert chunk is not None and chunk.frame["step"].unique().to_list() == [41]


# ---- text logs ----------------------------------------------------------------------------


def _real_lines(shared_dir: Path, rel: str, n: int) -> list[bytes]:
    lines = (shared_dir / "real-logs" / rel).read_bytes().splitlines(keepends=True)
    return lines[:n]


@pytest.mark.parametrize(
    ("rel", "head", "fine", "end"),
    [  # (the Megatron log's argument dump takes its first 1,565 lines; each poll of a text log
        # costs ~10-30 ms, so a few hundred lines a case)
        ("stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log", 1500, 1500, 1800),
        ("modded_nanogpt/2024-10-13_llmc_main.log", 40, 40, 600),
        # Megatron-DeepSpeed prints a DeepSpeed engine line before each iteration line: a
        # chunk of engine lines alone was read as a DeepSpeed log (its lr twice). Followed
        # from an empty file: its 2,700 lines of arguments and NCCL set-up in 100-line
        # pieces, then from the first training lines a line at a time
        (
            "microsoft_Megatron-DeepSpeed/"
            "gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-with-kernel.log",
            0,
            2700,
            3100,
        ),
    ],
)
def test_text_logs_are_followed_line_by_line(
    tmp_path: Path, shared_dir: Path, rel: str, head: int, fine: int, end: int
) -> None:
    """A real Megatron (llm.c) stdout written a line at a time, each line in two flushes:
    a chunk of one line parses as it does in the whole file; half a line waits."""
    lines = _real_lines(shared_dir, rel, end)
    path = tmp_path / "stdout.log"
    path.write_bytes(b"".join(lines[:head]))
    f = follower_for(path, "text", ReadOptions())
    assert isinstance(f, LinesFollower)

    def piece(b: bytes) -> Callable[[], None]:
        def go() -> None:
            with path.open("ab") as fh:
                fh.write(b)

        return go

    steps = [piece(b"".join(lines[i : min(i + 100, fine)])) for i in range(head, fine, 100)]
    for ln in lines[fine:]:
        steps += [piece(ln[: len(ln) // 2]), piece(ln[len(ln) // 2 :])]
    live = _follow_one(f, steps)
    assert_same_run(live, _only(path))
    assert live.run().frame.height > 100


def test_a_truncated_log_is_followed_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("".join(f"s:{s} trl:{3 - s / 100} lr:0.001\n" for s in range(50)))
    f = follower_for(path, "text", ReadOptions())
    assert f.poll() is not None
    with path.open("w") as fh:  # a resumed job truncates its log and starts again
        fh.write("s:40 trl:2.5 lr:0.001\n")
    chunk = f.poll()
    assert chunk is not None and chunk.replaced and chunk.frame["step"].unique().to_list() == [40]


def test_a_replaced_trainer_state_and_csv_restart(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{1 / (s + 1)}\n" for s in range(20)))
    f = LinesFollower(path, "csv", ReadOptions())
    assert f.poll() is not None
    new = tmp_path / "new.csv"
    new.write_text("step,loss\n10,0.3\n11,0.2\n")
    os.replace(new, path)
    chunk = f.poll()
    assert chunk is not None and chunk.replaced and chunk.frame["step"].to_list() == [10, 11]

    hf = tmp_path / "trainer_state.json"
    hist = [{"loss": 1.0 / s, "step": s} for s in range(1, 20)]
    hf.write_text(json.dumps({"global_step": 19, "log_history": hist}))
    r = RereadFollower(hf, "hf-trainer", ReadOptions())
    assert r.poll() is not None
    hf.write_text(
        json.dumps({"global_step": 12, "log_history": [*hist[:10], {"loss": 9.0, "step": 11}]})
    )
    chunk = r.poll()
    assert chunk is not None and chunk.replaced and chunk.frame.height == 11


def test_jsonl_notes_carry_the_files_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(f'{{"step": {s}, "loss": 1.0}}\n' for s in range(100)))
    f = OffsetFollower(path, "jsonl", ReadOptions())
    assert f.poll() is not None
    with path.open("a") as fh:
        fh.write('{"step": 100, "loss": 0.9}\n{"step": 101, "loss": oops}\n')
    chunk = f.poll()
    assert chunk is not None and chunk.frame["step"].to_list() == [100]
    (issue,) = chunk.issues
    assert issue.location == "line 102"
    want = [i for i in _only(path).data_quality if i.kind == issue.kind]
    assert want and want[0].location == issue.location


def test_a_folder_whose_runs_appear_later(tmp_path: Path) -> None:
    watched = Watched(tmp_path)
    watched.poll()
    assert not watched.runs
    (tmp_path / "lr_shock").mkdir()
    (tmp_path / "lr_shock" / "metrics.jsonl").write_text('{"step": 0, "loss": 1}\n')
    watched.poll()
    assert list(watched.runs) == ["lr_shock"]
    shutil.copy(tmp_path / "lr_shock" / "metrics.jsonl", tmp_path / "b.jsonl")
    watched.poll()
    assert sorted(watched.runs) == ["b", "lr_shock"]


def test_a_summary_note_is_passed_on_once_not_per_poll(tmp_path: Path) -> None:
    """Histograms beside the scalars: the reader's "N non-scalar summaries skipped" note
    comes with every chunk; the follower passes it on once."""
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "hist"
    w = SummaryWriter(str(run))
    f = follower_for(run, "tensorboard", ReadOptions())
    notes = []
    for k in range(4):
        for s in range(10 * k, 10 * k + 10):
            w.add_scalar("train/loss", _loss(s), s)
            w.add_histogram("weights", np.arange(10) * s, s)
        w.flush()
        chunk = f.poll()
        assert chunk is not None and chunk.frame.height == 10
        notes += chunk.issues
    w.close()
    assert [n.kind for n in notes] == ["non-scalar"]


def test_a_last_line_without_its_line_end_is_read_when_the_watch_ends(tmp_path: Path) -> None:
    """A finished log need not end in a line end (a real train.log in ../shared does not):
    while watching it waits; the watch's last poll (``final``) reads it, as analyze does."""
    path = tmp_path / "train.log"
    path.write_text("".join(f"step:{s}/10 train_loss:{3 - s / 10}\n" for s in range(5)))
    with path.open("a") as fh:
        fh.write("step:5/10 train_loss:2.5")
    f = follower_for(path, "text", ReadOptions())
    live = LiveRun(f, _job())
    first = f.poll()
    assert first is not None and first.frame["step"].max() == 4
    live.add(first)
    assert f.poll() is None
    chunk = f.poll(final=True)
    assert chunk is not None and chunk.frame["step"].unique().to_list() == [5]
    live.add(chunk)
    assert_same_run(live, _only(path))


def test_deepspeed_chat_lines_that_need_their_neighbours(tmp_path: Path, shared_dir: Path) -> None:
    """DeepSpeed-Chat's log: an overflow line counts at the NEXT step line, a ``ppl:`` line
    needs the banner line before it. Followed a line a time (a poll between every two
    lines), the values and their steps are those of the whole file — except the
    fractional ``epoch``, which the reader derives from the whole file's epoch length."""
    src = "microsoft_DeepSpeedExamples/opt-1.3b-globalBatchSize128.log"
    lines = _real_lines(shared_dir, src, 900)
    path = tmp_path / "training.log"
    path.write_bytes(b"")

    def piece(b: bytes) -> Callable[[], None]:
        def go() -> None:
            with path.open("ab") as fh:
                fh.write(b)

        return go

    live = _follow_one(follower_for(path, "text", ReadOptions()), [piece(ln) for ln in lines])
    got = _frame(live.run().frame).filter(pl.col("metric") != "epoch")
    want = _frame(_only(path).frame).filter(pl.col("metric") != "epoch")
    assert_frame_equal(got, want)
    assert {"loss_scale", "val/perplexity"} <= set(want["metric"])


def test_text_notes_carry_the_files_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("".join(f"s:{s} trl:{3 - s / 100} lr:0.001\n" for s in range(50)))
    f = follower_for(path, "text", ReadOptions())
    assert f.poll() is not None
    with path.open("ab") as fh:
        fh.write(b"s:50 trl:2.5 lr:0.001\ns:51 trl:2.4 lr:0.001 note:\xff\n")
    chunk = f.poll()
    assert chunk is not None and 50 in chunk.frame["step"].to_list()
    (issue,) = [i for i in chunk.issues if i.kind == "encoding"]
    assert issue.location == "line 52" and issue.source == str(path)
    want = [i for i in _only(path).data_quality if i.kind == "encoding"]
    assert want and want[0].location == issue.location
