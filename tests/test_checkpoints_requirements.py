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
