"""Checkpoints written by HF Trainer (save_steps) and Lightning (ModelCheckpoint) on tiny
models, audited as found, then damaged: each damage named, with the checkpoint to go back
to. Slow: each trains a few steps on CPU."""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from trainlens.checkpoints import audit, inventory
from trainlens.cli import main

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow


def _flip_member(path: Path, suffix: str) -> str:
    """Flip one byte inside the zip member whose name ends with ``suffix``; its name."""
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(suffix))
    raw = bytearray(path.read_bytes())
    h = info.header_offset
    n, m = struct.unpack("<HH", raw[h + 26 : h + 30])
    raw[h + 30 + n + m + 3] ^= 0xFF
    path.write_bytes(bytes(raw))
    return info.filename


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    transformers = pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("hf") / "out"
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    gen = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (40, 16), generator=gen)
    ]
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=10,
        save_steps=2,
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    transformers.Trainer(model=model, args=args, train_dataset=data).train()
    return out


def test_hf_trainer_checkpoints_found_intact_with_optimizer(hf_run: Path) -> None:
    inv = inventory(hf_run)
    assert [(c.kind, c.step, c.status, c.optimizer) for c in inv.checkpoints] == [
        ("hf-trainer", s, "ok", True) for s in (2, 4, 6, 8, 10)
    ]
    # trainer_state.json's global_step agrees with each folder's name (no note)
    assert not [n for c in inv.checkpoints for n in c.notes if "global_step" in n]


def test_hf_trainer_damage_named_with_where_to_go_back(
    hf_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "out"
    shutil.copytree(hf_run, run)
    member = _flip_member(run / "checkpoint-8" / "optimizer.pt", "data/0")
    weights = run / "checkpoint-10" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    shutil.rmtree(run / "checkpoint-6")  # a save that went missing
    (run / "checkpoint-4" / "optimizer.pt").unlink()  # a resume from it is weights only

    inv, found, _ = audit(run, with_run=False)
    by_step = {c.step: c for c in inv.checkpoints}
    assert by_step[8].status == "corrupt"
    assert member in by_step[8].problems[0].message
    assert by_step[10].status == "truncated"
    assert by_step[10].problems[0].file == "model.safetensors"
    assert by_step[4].optimizer is False and by_step[4].status == "ok"
    broken = {f.step_start: f.message for f in found if f.code == "CKPT001"}
    assert "go back to checkpoint-4 (step 4, saved" in broken[8]
    assert "go back to checkpoint-4" in broken[10]
    assert [f.step_start for f in found if f.code == "CKPT003"] == [6]
    assert main(["checkpoints", str(run)]) == 1
    out = capsys.readouterr().out
    assert "checkpoint-8" in out and member in out


class _Tiny:
    """A LightningModule built on demand (lightning imported only in these tests)."""

    @staticmethod
    def make() -> object:
        import lightning as L

        class Tiny(L.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.net = torch.nn.Linear(8, 1)

            def training_step(self, batch: tuple[object, object], _: int) -> object:
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.log("train_loss", loss)
                return loss

            def configure_optimizers(self) -> object:
                return torch.optim.Adam(self.parameters(), lr=1e-2)

        return Tiny()


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    L = pytest.importorskip("lightning")
    root = tmp_path_factory.mktemp("pl")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=gen)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8
    )
    ckpt = L.pytorch.callbacks.ModelCheckpoint(every_n_train_steps=3, save_top_k=-1)
    trainer = L.Trainer(
        max_steps=12,
        default_root_dir=str(root),
        callbacks=[ckpt],
        logger=L.pytorch.loggers.CSVLogger(str(root)),
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        log_every_n_steps=1,
    )
    trainer.fit(_Tiny.make(), data)
    return root


def test_lightning_checkpoints_found_with_optimizer_states(lightning_run: Path) -> None:
    csv = next(lightning_run.rglob("metrics.csv"))
    inv, found, run = audit(csv)  # beside the run: lightning_logs/version_0/checkpoints
    assert [(c.kind, c.step, c.status, c.optimizer) for c in inv.checkpoints] == [
        ("lightning", s, "ok", True) for s in (3, 6, 9, 12)
    ]
    assert run is not None and run.last_step is not None
    assert not [f for f in found if f.severity.value == "error"]


def test_lightning_damage_named(lightning_run: Path, tmp_path: Path) -> None:
    root = tmp_path / "pl"
    shutil.copytree(lightning_run, root)
    ckpts = sorted(root.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    ckpts[-1].write_bytes(ckpts[-1].read_bytes()[:300])
    inv, found, _ = audit(root, with_run=False)
    assert [c.status for c in inv.checkpoints] == ["ok", "ok", "ok", "truncated"]
    (f,) = [f for f in found if f.code == "CKPT001"]
    assert f.step_start == 12 and "step=9.ckpt (step 9, saved" in f.message
    doc = json.dumps(f.to_dict())
    assert "truncated" in doc


def test_lightning_top_k_by_a_metric_is_not_a_cadence(lightning_run: Path, tmp_path: Path) -> None:
    """ModelCheckpoint(monitor=...) keeps the k best: its gaps are by design (CKPT003 is
    not judged), while the every-n-steps run above is a cadence."""
    L = pytest.importorskip("lightning")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=gen)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4
    )
    ckpt = L.pytorch.callbacks.ModelCheckpoint(
        monitor="train_loss", save_top_k=3, every_n_train_steps=2
    )
    trainer = L.Trainer(
        max_steps=16,
        default_root_dir=str(tmp_path),
        callbacks=[ckpt],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(_Tiny.make(), data)
    inv, found, _ = audit(tmp_path, with_run=False)
    assert len(inv.checkpoints) == 3
    assert all(c.selective and c.intact for c in inv.checkpoints)
    assert "CKPT003" not in {f.code for f in found}
    assert not any(c.selective for c in inventory(lightning_run).checkpoints)


def test_analyze_audits_the_checkpoints_the_trainers_layouts_name(
    hf_run: Path, lightning_run: Path, tmp_path: Path
) -> None:
    """analyze audits only what a run's layout names as its own: HF Trainer's
    checkpoint-N in output_dir (its log is read from inside the newest), Lightning's
    version_N/checkpoints/ beside metrics.csv. A copy of the HF run three levels under
    the Lightning root is another run's: a note, not in the inventory."""
    from trainlens.api import analyze

    (hf,) = analyze([hf_run])
    assert hf.context.checkpoints is not None
    assert [c.step for c in hf.context.checkpoints.checkpoints] == [2, 4, 6, 8, 10]

    root = tmp_path / "pl"
    shutil.copytree(lightning_run, root)
    csv = next(root.rglob("metrics.csv"))
    shutil.copytree(hf_run, csv.parent / "a" / "b")  # b/checkpoint-N: three levels down
    (pl,) = analyze([csv])
    assert pl.context.checkpoints is not None
    assert [(c.kind, c.step) for c in pl.context.checkpoints.checkpoints] == [
        ("lightning", s) for s in (3, 6, 9, 12)
    ]
    [note] = [d for d in pl.run.data_quality if d.kind == "checkpoints-elsewhere"]
    assert str(csv.parent / "a" / "b") in note.message
