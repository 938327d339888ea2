"""What the gate can require of checkpoints, and the report's marks (library side)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainlens.checkpoints import inventory
from trainlens.checkpoints.requirements import axis_marks, best_val_kept, ends_intact

torch = pytest.importorskip("torch")


def _saves(folder: Path, steps: list[int], broken: tuple[int, ...] = ()) -> None:
    model = torch.nn.Linear(4, 4)
    for step in steps:
        path = folder / f"ckpt_step_{step}.pt"
        torch.save({"model": model.state_dict()}, path)
        if step in broken:
            path.write_bytes(path.read_bytes()[:100])


def test_ends_intact(tmp_path: Path) -> None:
    _saves(tmp_path, [100, 200, 300])
    inv = inventory(tmp_path)
    assert ends_intact(inv, 320).ok
    late = ends_intact(inv, 1000)
    assert not late.ok and "before the last 20% of the run" in late.message
    _saves(tmp_path, [400], broken=(400,))
    broken = ends_intact(inventory(tmp_path), 400)
    assert not broken.ok and broken.message == "the newest checkpoint ckpt_step_400.pt is truncated"
    empty = tmp_path / "a" / "b" / "empty"  # parents up to 2 levels hold none either
    empty.mkdir(parents=True)
    none = ends_intact(inventory(empty), 10)
    assert not none.ok and none.message.startswith("no checkpoint")


def test_best_val_kept_within_one_save_interval(tmp_path: Path) -> None:
    _saves(tmp_path, [100, 200, 300, 400], broken=(200,))
    inv = inventory(tmp_path)
    near = best_val_kept(inv, 130)  # the interval is 100: 100 is within it
    assert near.ok and near.checkpoint == str(tmp_path / "ckpt_step_100.pt")
    assert best_val_kept(inv, 210).checkpoint == str(tmp_path / "ckpt_step_300.pt")
    assert not best_val_kept(inv, 210, tolerance=50).ok


def test_axis_marks(tmp_path: Path) -> None:
    _saves(tmp_path, [10, 20], broken=(20,))
    assert axis_marks(inventory(tmp_path)) == [
        {"step": 10, "name": "ckpt_step_10.pt", "intact": True, "integrity": "ok"},
        {"step": 20, "name": "ckpt_step_20.pt", "intact": False, "integrity": "truncated"},
    ]


def test_the_gate_requires_an_intact_checkpoint_at_the_end_and_at_the_best_val_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[tool.trainlens.gate.checks] checkpoint_at_end / best_val_checkpoint on a real
    fixture run with torch.save checkpoints beside it: intact ones pass; with the last
    one cut short and none kept near the best validation step, both fail (CKPT008/009)."""
    import json
    import shutil

    from tests.conftest import fixture_path
    from trainlens.cli import main

    torch = pytest.importorskip("torch")
    run = tmp_path / "runs" / "overfit"
    shutil.copytree(fixture_path("overfit").parent, run)
    ckpts = run / "checkpoints"
    ckpts.mkdir()
    model = torch.nn.Linear(4, 4)
    for step in range(100, 801, 100):
        torch.save({"model": model.state_dict()}, ckpts / f"ckpt_step_{step}.pt")
    config = tmp_path / "trainlens.toml"
    config.write_text(  # (the run overfits on purpose: VAL001 is not what is tested)
        'ignore = ["VAL001"]\n[gate.checks]\ncheckpoint_at_end = true\nbest_val_checkpoint = true\n'
    )
    args = ["gate", str(run), "--format", "json", "--config", str(config), "-j", "1"]
    code = main(args)
    out = capsys.readouterr()
    assert code == 0, out.out[-3000:] + out.err
    passing = json.loads(out.out)
    checks = {c["name"]: c["status"] for c in passing["runs"][0]["checks"]}
    assert checks["check:checkpoint_at_end"] == "pass"
    assert checks["check:best_val_checkpoint"] == "pass"

    last = ckpts / "ckpt_step_800.pt"
    last.write_bytes(last.read_bytes()[:-100])
    for step in (100, 200):  # best val is at 100: nothing kept near it any more
        (ckpts / f"ckpt_step_{step}.pt").unlink()
    assert main(args) == 1
    failing = json.loads(capsys.readouterr().out)
    codes = {f["code"] for f in failing["findings"] if f["fails_gate"]}
    assert {"CKPT008", "CKPT009"} <= codes
