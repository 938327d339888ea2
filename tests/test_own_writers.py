"""What trainlens writes, trainlens reads: one short run with an LR shock (x40 at one
optimizer step) written through each of trainlens' own writers for real —
:class:`~trainlens.monitor.Monitor` (JSONL and its TensorBoard sink), the HF Trainer
callback, and ``LightningCallback(log_to_lightning=True)`` into Lightning's CSVLogger,
TensorBoardLogger and WandbLogger (W&B offline) — read back: each gives the same
canonical metrics at the same steps, and the LR shock is found from each.

The runs are written once for the module by tests/_own_writers.py in a subprocess (the
W&B SDK keeps global state and a service process)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("lightning")
pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

import trainlens
from tests.conftest import run_wandb_offline
from trainlens.api import analyze_run
from trainlens.core.config import Config
from trainlens.core.names import own_name
from trainlens.core.run import Run

STEPS, SHOCK = 40, 20
#: every figure the monitor writes on a CPU (docs/monitor.md, "What is written"), and
#: the validation loss the callbacks and ``Monitor.log`` write
WRITTEN = {
    "train/loss",
    "val/loss",
    "lr",
    "grad_norm",
    "update_ratio",
    "entropy",
    "padding_frac",
    "tokens_per_sec",
    "samples_per_sec",
    "step_time",
    "dataloader_wait",
    "mem/rss",
}
PER_TENSOR = ("grad_norm/", "update_ratio/")
#: writer -> the source trainlens reads, under the module's folder
SOURCES = {
    "monitor-jsonl": "plain/metrics.jsonl",
    "monitor-tensorboard": "plain/tb",
    "hf-callback": "hf/trainlens/metrics.jsonl",
    "lightning-callback": "pl/trainlens/metrics.jsonl",
    "lightning-csvlogger": "pl/csv",
    "lightning-tensorboardlogger": "pl/tb",
    "lightning-wandblogger": "pl/wandb/wandb",
}
#: the writers that put the monitor's figures into another tool's logger: their own
#: figures are the names under trainlens/ (the rest is the trainer's and the module's)
IN_LOGGERS = {"lightning-csvlogger", "lightning-tensorboardlogger", "lightning-wandblogger"}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("own_writers")
    writer = Path(__file__).with_name("_own_writers.py")
    run_wandb_offline(writer, root, str(STEPS), str(SHOCK))
    return root


def _run(root: Path, writer: str) -> Run:
    [run] = trainlens.read(root / SOURCES[writer])
    return run


def _own_metrics(run: Run, writer: str) -> set[str]:
    if writer not in IN_LOGGERS:
        return set(run.metrics)
    return {c for c, raw in run.raw_names.items() if own_name(raw) is not None}


@pytest.mark.slow  # ~15 s of CPU writing the runs (transformers and Lightning imports)
@pytest.mark.parametrize("writer", sorted(SOURCES))
def test_each_writer_reads_back_to_the_canonical_metrics(written: Path, writer: str) -> None:
    run = _run(written, writer)
    own = _own_metrics(run, writer)
    assert {m for m in own if not m.startswith(PER_TENSOR)} == WRITTEN
    assert not [m for m in run.metrics if m.startswith("trainlens/")]
    # the same per-tensor series as the JSONL of the same loop
    base = (
        "hf-callback"
        if writer == "hf-callback"
        else ("monitor-jsonl" if writer.startswith("monitor") else "lightning-callback")
    )
    want = {m for m in _run(written, base).metrics if m.startswith(PER_TENSOR)}
    assert {m for m in own if m.startswith(PER_TENSOR)} == want and len(want) >= 6


@pytest.mark.slow
@pytest.mark.parametrize("writer", sorted(IN_LOGGERS | {"monitor-tensorboard"}))
def test_each_writer_gives_the_jsonl_values_at_the_jsonl_steps(written: Path, writer: str) -> None:
    """Through a logger the figures keep their optimizer steps (W&B's _step counts
    wandb.log calls: 44 by step 40 here, with the validations and epochs logged)."""
    run = _run(written, writer)
    base = _run(written, "monitor-jsonl" if writer.startswith("monitor") else "lightning-callback")
    for name in ("lr", "grad_norm", "train/loss", "val/loss"):
        steps, values = run.series(name)
        want_steps, want = base.series(name)
        assert list(steps) == list(want_steps), name
        assert values == pytest.approx(want, rel=1e-5), name  # TensorBoard: float32
    if writer == "lightning-wandblogger":
        assert any(d.kind == "trainer-step" for d in run.data_quality)


@pytest.mark.slow
@pytest.mark.parametrize("writer", sorted(SOURCES))
def test_the_lr_shock_is_found_from_each_writer(written: Path, writer: str) -> None:
    run = _run(written, writer)
    steps, lr = run.series("lr")
    assert lr[list(steps).index(SHOCK)] == pytest.approx(40 * lr[0], rel=1e-6)
    findings = analyze_run(run, Config()).findings
    shock = [f for f in findings if f.code.startswith("LR") and f.metric == "lr"]
    # LR007 (a jump no schedule makes) where no schedule is declared; the HF callback
    # declares TrainingArguments' constant schedule, so there the shock departs from it
    assert [f.step_start for f in shock] == [SHOCK], [(f.code, f.step_start) for f in findings]
    assert shock[0].code == ("LR001" if writer == "hf-callback" else "LR007")


def test_own_names_claim_after_canonical_spellings_and_before_other_aliases() -> None:
    from trainlens.core.names import AliasTable

    got = AliasTable().resolve(["lr-AdamW", "trainlens/lr", "train_loss", "trainlens/train/loss"])
    # trainlens' per-step figure is the canonical one; the framework's keep their names
    assert {raw: a.canonical for raw, a in got.items()} == {
        "lr-AdamW": "lr-AdamW",
        "trainlens/lr": "lr",
        "train_loss": "train_loss",
        "trainlens/train/loss": "train/loss",
    }
    got = AliasTable().resolve(["trainlens/lr", "lr", "trainlens/grad_norm/Emb.Weight"])
    assert got["lr"].canonical == "lr" and got["trainlens/lr"].canonical == "trainlens/lr"
    # read as the monitor's own file has the name
    assert got["trainlens/grad_norm/Emb.Weight"] == AliasTable().lookup("grad_norm/Emb.Weight")
    assert AliasTable({"trainlens/lr": "my_lr"}).lookup("trainlens/lr").canonical == "my_lr"


TRAINER_STEP_WRITER = """
import sys, wandb
run = wandb.init(project="trainlens-test", id="steps01", dir=sys.argv[1])
run.log({"early": 1.0})  # before the trainer's first step: placed at it
for step in range(1, 11):
    run.log({"lr": 1e-3 * step, "trainer/global_step": step})
    if step % 3 == 0:  # a validation: one more wandb.log call at the same step
        run.log({"val_loss": 2.0 - step / 10, "trainer/global_step": step})
run.finish()
"""


def test_a_wandb_run_is_read_at_the_step_its_trainer_logged(tmp_path: Path) -> None:
    """W&B's own SDK, logging as Lightning's WandbLogger does: the step as a metric."""
    writer = tmp_path / "writer.py"
    writer.write_text(TRAINER_STEP_WRITER)
    run_wandb_offline(writer, tmp_path)
    [run] = trainlens.read(next(tmp_path.glob("wandb/offline-run-*")))
    steps, lr = run.series("lr")
    assert list(steps) == list(range(1, 11))  # _step would be 1, 2, 3, 5, 6, 7, 9, ...
    assert lr == pytest.approx([1e-3 * s for s in range(1, 11)])
    assert list(run.series("val/loss")[0]) == [3, 6, 9]
    assert list(run.series("early")[0]) == [1]
    assert "trainer/global_step" not in run.metrics
    [note] = [d for d in run.data_quality if d.kind == "trainer-step"]
    assert "14 calls up to trainer step 10" in note.message
