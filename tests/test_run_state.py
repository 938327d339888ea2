"""How a run ended (trainlens.core.runstate), read from what real writers leave, and the
states ``trainlens watch`` gives: running, finished, crashed, stalled.

Writers: trainlens' own monitor (a plain loop in a ``with`` block, examples/tiny_gpt.py in
a subprocess, the HF and Lightning callbacks), HF Trainer's trainer_state.json, W&B's SDK
offline, and the real Megatron / DeepSpeed logs in ../shared/real-logs.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import DOCS, REAL_LOGS, fixture_path, run_wandb_offline
from trainlens.api import read
from trainlens.cli import main
from trainlens.core.errors import UnreadableInputError
from trainlens.core.runstate import RunEnd, end_record, from_record, run_end
from trainlens.readers import ReadOptions
from trainlens.readers._run_end import text_end
from trainlens.watch.follow import OffsetFollower
from trainlens.watch.live import LiveRun

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
TINY_GPT = HERE.parent / "examples" / "tiny_gpt.py"


def _train(out: Path, steps: int, *, fail_at: int | None = None, resume: int = 0) -> None:
    """A few real optimizer steps of a linear model under ``with Monitor(...)``."""
    from trainlens.monitor import Monitor

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Monitor(model, opt, out=out, resume_step=resume) as mon:
        for step in range(resume + 1, resume + steps + 1):
            if step == fail_at:
                raise ValueError("the batch had no rows")
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            mon.step(loss=loss)


def _end(path: Path) -> RunEnd | None:
    return run_end(read(path)[0].metadata)


# ---- the end record -------------------------------------------------------------------------


def test_the_end_record_says_finished_or_crashed_with_the_type() -> None:
    ok = from_record(end_record(7, 1.5))
    assert ok == RunEnd("finished", "trainlens end record", step=7, time=1.5)
    rec = end_record(3, 2.0, error=KeyError("x"))
    assert (rec["state"], rec["error"], rec["message"]) == ("crashed", "KeyError", "'x'")
    crashed = from_record(rec)
    assert crashed is not None and (crashed.state, crashed.error) == ("crashed", "KeyError")
    # no end record: other events, other states, a metric row
    assert from_record({"event": "end", "state": "paused"}) is None
    assert from_record({"step": 3, "loss": 1.0}) is None


def test_a_monitored_loop_ends_with_its_record_which_is_no_metric(tmp_path: Path) -> None:
    _train(tmp_path / "ok", 5)
    lines = (tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["event"] == "end"
    run = read(tmp_path / "ok")[0]
    assert run_end(run.metadata) == RunEnd(
        "finished", "trainlens end record", step=5, time=json.loads(lines[-1])["time"]
    )
    # the record is neither a metric nor a note, and the rows are those before it
    assert run.data_quality == []
    (tmp_path / "bare.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    bare = read(tmp_path / "bare.jsonl")[0]
    assert run.frame.equals(bare.frame) and run_end(bare.metadata) is None


def test_a_users_row_that_looks_like_an_end_but_holds_a_value_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "u.jsonl"
    rows = [{"step": 1, "loss": 2.0}, {"event": "end", "state": "finished", "step": 2, "loss": 5.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = read(path)[0]
    assert run.series("train/loss")[1].tolist() == [2.0, 5.0] and run_end(run.metadata) is None


def test_an_exception_in_the_loop_ends_the_file_crashed_with_its_type(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        _train(tmp_path / "bad", 6, fail_at=4)
    end = _end(tmp_path / "bad")
    assert end is not None and (end.state, end.error, end.step) == ("crashed", "ValueError", 3)
    last = json.loads((tmp_path / "bad" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["message"] == "the batch had no rows"
    assert read(tmp_path / "bad")[0].frame["step"].max() == 3  # every step before it kept


def test_a_crash_before_the_first_record_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        _train(tmp_path / "early", 3, fail_at=1)
    with pytest.raises(UnreadableInputError, match=r"no metrics before its end record.*crashed"):
        read(tmp_path / "early")


def test_a_resumed_run_ends_with_its_last_record(tmp_path: Path) -> None:
    """The first job crashed at step 4; the second resumed from step 3 and finished: the
    run finished, and the first end record (mid-file) is neither a metric nor a note."""
    out = tmp_path / "resumed"
    with pytest.raises(ValueError):
        _train(out, 6, fail_at=4)
    _train(out, 4, resume=3)
    run = read(out)[0]
    end = run_end(run.metadata)
    assert end is not None and (end.state, end.step) == ("finished", 7)
    assert [d.kind for d in run.data_quality] == []
    assert run.series("train/loss")[0].tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_a_large_file_with_its_end_record_stays_on_the_fast_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An end record last sent a large file down the general path (3.6x slower): it is
    counted out of the mapped read, which must give the file without it."""
    from trainlens.readers import jsonl

    rows = [json.loads(x) for x in fixture_path("healthy_cosine").read_text().splitlines()]
    big = tmp_path / "big.jsonl"
    with big.open("w") as fh:
        for k in range(3):  # ~1.5 MB, above the fast path's 1 MB
            for r in rows:
                fh.write(json.dumps({**r, "step": r["step"] + k * 10_000}) + "\n")
    want = read(big)[0]
    with big.open("a") as fh:
        fh.write(json.dumps(end_record(29_999, 5.0)) + "\n")

    def general_path(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the general path was taken")

    monkeypatch.setattr(jsonl, "_read_bytes", general_path)
    got = read(big)[0]
    assert got.frame.equals(want.frame) and got.data_quality == want.data_quality
    assert run_end(got.metadata) == RunEnd("finished", "trainlens end record", 29_999, 5.0)


# ---- other writers ---------------------------------------------------------------------------

MEGATRON = "elena-lyulina_Megatron-LM-Attention-Benchmark"


@pytest.mark.parametrize(
    ("log", "state", "error"),
    [
        ("stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log", "finished", None),
        (f"{MEGATRON}/correctness_gated_flash_1729238_stdout.log", "finished", None),
        (f"{MEGATRON}/correctness_sink_torch_1737333_stdout.log", "finished", None),
        (f"{MEGATRON}/llama3-1b-fineweb160B-test_1861140_rank3_stdout.log", None, None),
        ("zainsarwar865_gpt-neox/GPT_experts-2-topk-1_stdout.txt", None, None),
        (
            "microsoft_Megatron-DeepSpeed/"
            "gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-with-kernel.log",
            "crashed",
            "KeyboardInterrupt",
        ),
        ("microsoft_DeepSpeedExamples/opt-1.3b-globalBatchSize128.log", "finished", None),
        ("AkramjitS_gpt-lab-diffusion/train.log", None, None),
    ],
)
def test_real_text_logs_end_as_their_readme_says(
    shared_dir: Path, log: str, state: str | None, error: str | None
) -> None:
    end = _end(REAL_LOGS / log)
    assert (end.state if end else None, end.error if end else None) == (state, error)


def test_a_log_that_crashed_before_any_value_still_says_why(shared_dir: Path) -> None:
    """check-7b: 16 ranks' RuntimeError, then the launcher's `exits with return code = 1`
    (no loss is ever printed: the reader refuses the file, the mark is still read)."""
    end = text_end(REAL_LOGS / "microsoft_DeepSpeedExamples" / "check-7b_training.log")
    assert end is not None and (end.state, end.error) == ("crashed", "RuntimeError")


def test_a_training_line_after_the_mark_means_the_run_went_on(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    lines = [
        " iteration        1/      10 | lm loss: 9.0 |",
        "Traceback (most recent call last):",
        "ValueError: a warning printed as a traceback",
        " iteration        2/      10 | lm loss: 8.5 |",
    ]
    log.write_text("\n".join(lines) + "\n")
    assert _end(log) is None
    log.write_text("\n".join([*lines, "[after training is done] datetime: now"]) + "\n")
    assert _end(log) == RunEnd("finished", "the log's `[after training is done]` line", step=2)


def test_a_jsonl_of_hf_log_entries_ends_with_train_runtime(tmp_path: Path) -> None:
    """The entries of a real trainer_state.json's log_history, one a line (what a callback
    that appends each ``logs`` dict writes): its last, with train_runtime, is the end."""
    src = REAL_LOGS / "ljh696_MetaMath" / "trainer_state.json"
    if not src.is_file():
        pytest.skip("../shared is not beside this checkout")
    history = json.loads(src.read_text())["log_history"]
    path = tmp_path / "logs.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in history))
    assert _end(path) == RunEnd(
        "finished", "HF Trainer's final log entry (train_runtime)", step=128
    )
    path.write_text("".join(json.dumps(e) + "\n" for e in history[:-1]))  # cut before it
    assert _end(path) is None


@pytest.mark.slow  # ~20 s, most of it importing transformers
def test_hf_trainer_finished_from_train_runtime(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from trainlens.monitor import HFCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=40, n_positions=8)
    data = [{"input_ids": torch.arange(8) % 40, "labels": torch.arange(8) % 40}] * 24
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
    )
    model = transformers.GPT2LMHeadModel(config)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, callbacks=[HFCallback()]
    )
    trainer.train()
    trainer.save_state()  # output_dir/trainer_state.json, its last entry train_runtime
    end = _end(tmp_path / "hf" / "trainer_state.json")
    assert end == RunEnd("finished", "HF Trainer's final log entry (train_runtime)", step=6)
    ours = _end(tmp_path / "hf" / "trainlens")
    assert ours is not None and (ours.state, ours.step) == ("finished", 6)


def test_lightning_exception_is_a_crash_and_its_csv_has_no_end_mark(tmp_path: Path) -> None:
    """Lightning's on_exception gives the callback the exception. Its CSVLogger leaves no
    end mark at all (metrics.csv and hparams.yaml are the same after a crash as after a
    finish): the Lightning folder's end is not known, the monitor's file knows."""
    pl = pytest.importorskip("lightning.pytorch")
    from trainlens.monitor import LightningCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, idx: int) -> Any:
            if self.global_step == 3:
                raise FloatingPointError("loss is nan")
            loss = self.lin(batch).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        max_steps=6,
        logger=pl.loggers.CSVLogger(str(tmp_path)),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[LightningCallback()],
    )
    with pytest.raises(FloatingPointError):
        trainer.fit(Module(), torch.utils.data.DataLoader(torch.randn(32, 4), batch_size=4))
    end = _end(tmp_path / "trainlens")
    assert end is not None and (end.state, end.error, end.step) == (
        "crashed",
        "FloatingPointError",
        3,
    )
    csv_run = read(tmp_path / "lightning_logs" / "version_0")[0]
    assert csv_run.frame.height and run_end(csv_run.metadata) is None


@pytest.mark.parametrize("how", ["finish", "crash"])
def test_wandb_exit_record_says_how_the_run_ended(tmp_path: Path, how: str) -> None:
    pytest.importorskip("wandb")
    writer = HERE / "_wandb_end_writer.py"
    if how == "finish":
        run_wandb_offline(writer, tmp_path, how)
    else:  # the script dies of its exception: W&B's own hook finishes the run, exit code 1
        with pytest.raises(subprocess.CalledProcessError):
            run_wandb_offline(writer, tmp_path, how)
    (folder,) = (tmp_path / "wandb").glob("offline-run-*")
    end = _end(folder)
    want = ("finished", None) if how == "finish" else ("crashed", "exit code 1")
    assert end is not None and (end.state, end.error, end.step) == (*want, 19)


# ---- analyze: the end in text and JSON, no finding changed ------------------------------------


def test_analyze_shows_the_end_in_text_and_json(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_incidents_json import check

    log = REAL_LOGS / "stark-sim_megatron-deepspeed-lock-clock" / "qwen7b_baseline_500.log"
    main(["analyze", str(log)])
    text = capsys.readouterr().out
    assert "ended       finished at step 500 — the log's `[after training is done]` line" in text
    main(["analyze", str(log), "--json"])
    doc = json.loads(capsys.readouterr().out)
    check(doc)
    assert doc["runs"][0]["end"]["state"] == "finished" and doc["runs"][0]["end"]["step"] == 500
    main(["analyze", str(fixture_path("healthy_cosine")), "--json"])
    doc = json.loads(capsys.readouterr().out)
    check(doc)
    assert doc["runs"][0]["end"] is None  # (fixtures were written before the end record)


def test_the_end_record_changes_no_finding(tmp_path: Path) -> None:
    from trainlens.api import analyze

    src = fixture_path("lr_shock_diverge")
    dst = tmp_path / "lr_shock_diverge"
    shutil.copytree(src.parent if src.is_file() else src, dst)
    metrics = dst / "metrics.jsonl"
    with metrics.open("a") as fh:
        fh.write(json.dumps(end_record(10_000, 1.0)) + "\n")
    want = [(f.code, f.step_start, f.message) for f in analyze(src)[0].findings]
    got = [(f.code, f.step_start, f.message) for f in analyze(dst)[0].findings]
    assert got == want and want


# ---- watch: states, events, Prometheus --------------------------------------------------------


def _live(path: Path) -> LiveRun:
    from trainlens.core.config import Config
    from trainlens.core.findings import fail_rank
    from trainlens.gate.rules import parse_rules
    from trainlens.gate.runner import GateJob

    cfg = Config()
    job = GateJob(cfg=cfg, rules=parse_rules(cfg), fail_rank=fail_rank("error"))
    return LiveRun(OffsetFollower(path, "jsonl", ReadOptions()), job, min_stall_seconds=1.0)


def test_an_ended_run_never_stalls_and_a_resumed_one_runs_again(tmp_path: Path) -> None:
    _train(tmp_path / "r", 4)
    path = tmp_path / "r" / "metrics.jsonl"
    live = _live(path)
    chunk = live.follower.poll()
    assert chunk is not None
    live.add(chunk, now=100.0)
    assert live.state == "running"
    [told] = live.check_end()
    assert told.kind == "run-finished" and told.details["end_step"] == 4
    assert live.check_end() == []  # once
    assert live.check_stall(now=100.0 + 1e6) == [] and live.state == "finished"
    # a job resumed into the same file: records after the end, the run goes on
    with path.open("a") as fh:
        fh.write(json.dumps({"step": 5, "train/loss": 1.0, "time": 2.0}) + "\n")
    live.add(live.follower.poll() or pytest.fail("no chunk"), now=200.0)
    [resumed] = live.check_end()
    assert resumed.kind == "run-resumed" and live.state == "running"
    assert [e.kind for e in live.check_stall(now=200.0 + 1e6)] == ["run-stalled"]
    assert live.state == "stalled"


def test_an_end_record_alone_after_the_last_flush_is_no_read_issue(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    live = _live(path)
    live.add(live.follower.poll() or pytest.fail("no chunk"))
    with path.open("a") as fh:
        fh.write(json.dumps(end_record(1, 3.0, error=MemoryError())) + "\n")
    assert live.follower.poll() is None and live.read_error() == []
    [told] = live.check_end()
    assert told.kind == "run-crashed" and told.severity == "error"
    assert "MemoryError" in told.message


def test_the_live_view_shows_each_runs_state(tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from trainlens.watch.loop import WatchState
    from trainlens.watch.sinks.view import LiveView

    with pytest.raises(ValueError):
        _train(tmp_path / "bad", 6, fail_at=4)
    (tmp_path / "on").mkdir()
    (tmp_path / "on" / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    runs = [_live(tmp_path / "bad" / "metrics.jsonl"), _live(tmp_path / "on" / "metrics.jsonl")]
    for live in runs:
        live.add(live.follower.poll() or pytest.fail("no chunk"))
        live.check_end()
    console = Console(record=True, width=120, file=StringIO(), force_terminal=False)
    view = LiveView(console=console)
    view.update(WatchState(runs=runs))
    view.close()
    lines = console.export_text().splitlines()
    assert any(x.startswith("bad  crashed (ValueError)  step 3") for x in lines), lines
    assert any(x.startswith("on  running  step 1") for x in lines), lines


def test_prometheus_exports_the_state_and_no_stall_for_an_ended_run(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    from trainlens.watch.sinks.prometheus import _Collector

    _train(tmp_path / "a", 3)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    ended, killed = _live(tmp_path / "a" / "metrics.jsonl"), _live(tmp_path / "b" / "metrics.jsonl")
    for live in (ended, killed):
        live.add(live.follower.poll() or pytest.fail("no chunk"), now=time.time() - 3600)
        live.check_end()
        live.check_stall()

    sink = SimpleNamespace(
        lock=threading.Lock(),
        runs=[ended, killed],
        opened={},
        incidents={},
        early={},
        events=0,
        tensors=8,
        clock=time.time,
    )

    got = {
        (m.name, tuple(sorted(s.labels.items()))): s.value
        for m in _Collector(sink).collect()  # type: ignore[arg-type]
        for s in m.samples
        if m.name in ("trainlens_run_state", "trainlens_run_stalled")
    }

    def state(run: str) -> dict[str, float]:
        return {
            dict(labels)["state"]: v
            for (name, labels), v in got.items()
            if name == "trainlens_run_state" and dict(labels)["run"] == run
        }

    assert state("a") == {"running": 0, "finished": 1, "crashed": 0, "stalled": 0}
    assert state("b") == {"running": 0, "finished": 0, "crashed": 0, "stalled": 1}
    assert got[("trainlens_run_stalled", (("run", "a"),))] == 0
    assert got[("trainlens_run_stalled", (("run", "b"),))] == 1


@pytest.mark.parametrize(
    ("log", "kind"),
    [
        ("stark-sim_megatron-deepspeed-lock-clock/qwen7b_baseline_500.log", "run-finished"),
        (
            "microsoft_Megatron-DeepSpeed/"
            "gpt3-0.125B-tokendropping-graduallyIncrease-lr-3.0e-4-with-kernel.log",
            "run-crashed",
        ),
    ],
)
def test_watch_once_tells_a_real_logs_end(
    shared_dir: Path, log: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["watch", str(REAL_LOGS / log), "--once", "--json"]) == 0
    events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.count(kind) == 1 and "run-stalled" not in kinds
    assert f"1 {kind.removeprefix('run-')}" in events[-1]["message"]  # watch-ended


def _job(out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(TINY_GPT), "--out", str(out), "--steps", "80", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_watched_jobs_that_finish_crash_and_are_killed(tmp_path: Path) -> None:
    """One watch of runs/ with small stall settings; three real monitored jobs: one ends
    normally (finished, never stalled, even long after its last record), one raises
    (crashed, with the type), one is SIGKILLed while hanging (no end: stalled)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    # stalls after 8 s without a record: the monitor flushes every 50 steps, 1-4 s here
    config = tmp_path / "trainlens.toml"
    config.write_text("[watch]\nmin_stall_seconds = 8\nstall_factor = 2\n")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "trainlens", "watch", str(runs), "--json", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    events: list[dict[str, Any]] = []

    def follow() -> None:
        assert watcher.stdout is not None
        for line in watcher.stdout:
            events.append(json.loads(line))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    jobs = {
        "ok": _job(runs / "ok"),
        "crash": _job(runs / "crash", "--inject", "crash@60"),
        "hang": _job(runs / "hang", "--inject", "hang@60"),
    }
    try:
        assert jobs["ok"].wait(timeout=300) == 0
        assert jobs["crash"].wait(timeout=300) == 1
        hang = jobs["hang"]
        assert hang.stdout is not None and "hanging at step 60" in hang.stdout.readline()
        hang.send_signal(signal.SIGKILL)  # no Python runs: no end record
        hang.wait(timeout=30)

        def last_is(kind: str, run: str) -> bool:
            # (a run slowed by load may stall between two flushes and resume: the last
            # state event counts; the hanging job may stall before it is killed)
            mine = [e for e in list(events) if e["run"] == run and e["event"].startswith("run-")]
            return bool(mine) and mine[-1]["event"] == kind

        deadline = time.time() + 120
        while time.time() < deadline and not (
            last_is("run-stalled", "hang")
            and any(e["event"] == "run-finished" for e in list(events))
            and any(e["event"] == "run-crashed" for e in list(events))
        ):
            time.sleep(0.2)
        time.sleep(10)  # past the stall time of every run once more
    finally:
        for job in jobs.values():
            if job.poll() is None:
                job.kill()
                job.wait()
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=60)
        reader.join(timeout=30)
    assert watcher.returncode == 0

    def of(run: str) -> list[dict[str, Any]]:
        return [e for e in events if e["run"] == run and e["event"].startswith("run-")]

    ok = of("ok")
    [fin] = [e for e in ok if e["event"] == "run-finished"]
    assert fin["details"]["end_step"] == 80 and fin["severity"] == "info"
    # nothing after the end: no stall, however long the watch went on
    assert ok[-1] is fin
    crash = of("crash")
    [crashed] = [e for e in crash if e["event"] == "run-crashed"]
    assert crashed["details"]["error"] == "RuntimeError" and crashed["details"]["end_step"] == 59
    assert crash[-1] is crashed
    hang = of("hang")
    assert hang, [(e["event"], e["run"], e["step"], e["message"][:60]) for e in events]
    assert hang[-1]["event"] == "run-stalled", [
        (e["event"], e["step"], round(e["time"] - hang[0]["time"], 1), e["message"][:70])
        for e in hang
    ]
    assert hang[-1]["details"]["code"] == "WATCH-STALL"
    assert not any(e["event"] in ("run-finished", "run-crashed") for e in hang)
    ended = events[-1]
    assert ended["event"] == "watch-ended"
    assert "(1 finished, 1 crashed, 1 stalled)" in ended["message"]
    assert DOCS.is_dir()  # (the states are documented: tests/test_watch.py checks the list)


def test_the_shipped_rules_page_for_a_crash_and_not_for_a_finished_run(tmp_path: Path) -> None:
    """promtool over the shipped rules: a run that finished long ago (its last record 40
    minutes old and more) pages nobody; a crashed one pages TrainlensRunCrashed; a killed
    one (stalled) TrainlensRunStalled. The series are the states this module's watch
    tests produce."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")

    def series(run: str, state: str, since: str) -> list[dict[str, str]]:
        out = [
            {"series": f'trainlens_seconds_since_last_record{{run="{run}"}}', "values": since},
            # (the same age as a timestamp: its last record at unix time 0)
            {"series": f'trainlens_last_record_timestamp_seconds{{run="{run}"}}', "values": "0x50"},
            {
                "series": f'trainlens_run_stalled{{run="{run}"}}',
                "values": "1x50" if state == "stalled" else "0x50",
            },
        ]
        for st in ("running", "finished", "crashed", "stalled"):
            out.append(
                {
                    "series": f'trainlens_run_state{{run="{run}",state="{st}"}}',
                    "values": "1x50" if st == state else "0x50",
                }
            )
        return out

    old = "1800+60x50"  # 30 minutes since its last record, and growing
    tests = {
        "rule_files": [str(DOCS / "prometheus" / "trainlens-alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series("ok", "finished", old)
                + series("bad", "crashed", old)
                + series("gone", "stalled", old),
                "alert_rule_test": [
                    {
                        "eval_time": "40m",
                        "alertname": "TrainlensRunStalled",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", "run": "gone"},
                                "exp_annotations": {
                                    "summary": "gone: no new record",
                                    "description": "gone has logged nothing for longer than "
                                    "its usual gap between records allows (or for 30 minutes)."
                                    " Is the job hung, crashed or waiting on I/O?\n",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "40m",
                        "alertname": "TrainlensRunCrashed",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "run": "bad",
                                    "state": "crashed",
                                },
                                "exp_annotations": {
                                    "summary": "bad: the run crashed",
                                    "description": "bad ended with a crash; the watch's "
                                    "run-crashed event says how it was told and the "
                                    "exception's type. Its last records are what it wrote "
                                    "before.\n",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    import yaml

    path = tmp_path / "run_state_test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
