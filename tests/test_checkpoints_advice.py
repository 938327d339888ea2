"""Restart advice: the detectors' findings on fixture runs name the newest intact
checkpoint before their onset (VAL001: the one nearest the best validation step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import fixture_path
from trainlens.api import analyze
from trainlens.checkpoints import inventory
from trainlens.checkpoints.advice import RESTART_PHRASE, attach_restart_advice

torch = pytest.importorskip("torch")

DETECTORS = Path(__file__).resolve().parents[1] / "trainlens" / "detectors"


def _saves(folder: Path, steps: range, broken: int | None = None) -> None:
    model = torch.nn.Linear(8, 8)
    for step in steps:
        path = folder / f"ckpt_step_{step}.pt"
        torch.save({"model": model.state_dict(), "step": step}, path)
        if step == broken:
            path.write_bytes(path.read_bytes()[:-200])


def test_the_detectors_still_say_the_phrase_advice_looks_for() -> None:
    text = "".join(p.read_text("utf-8") for p in DETECTORS.glob("*.py"))
    assert text.count(RESTART_PHRASE) >= 2


def test_divergence_names_the_newest_intact_checkpoint_before_it(tmp_path: Path) -> None:
    run = fixture_path("lr_shock_diverge")  # diverges from step 400 (GRAD001 + LOSS003)
    _saves(tmp_path, range(100, 1001, 100), broken=300)
    (analysis,) = analyze([run])
    advised = attach_restart_advice(analysis.findings, inventory(tmp_path))
    by_code = {f.code: f for f in advised}
    loss = by_code["LOSS003"]
    assert loss.step_start == 400
    # 300 is cut short: 200 is the newest intact one before the onset
    assert loss.evidence["restart_from"]["name"] == "ckpt_step_200.pt"
    assert "go back to ckpt_step_200.pt (step 200, saved" in loss.message
    assert "intact; the newest before step 400" in loss.message
    # findings that advise no restart are left as they were
    untouched = [f for f in advised if "restart_from" not in f.evidence]
    assert untouched and all("go back to" not in f.message for f in untouched)


def test_val_divergence_names_the_checkpoint_nearest_the_best_step(tmp_path: Path) -> None:
    run = fixture_path("overfit")  # val/loss best at step 100
    _saves(tmp_path, range(0, 801, 150))
    (analysis,) = analyze([run])
    (val,) = [
        f
        for f in attach_restart_advice(analysis.findings, inventory(tmp_path))
        if f.code == "VAL001"
    ]
    best = val.evidence["best_step"]
    assert best == 100
    assert val.evidence["restart_from"]["step"] == 150  # |150-100| < |0-100|
    assert "keep ckpt_step_150.pt (step 150" in val.message


def test_no_intact_checkpoint_is_said(tmp_path: Path) -> None:
    run = fixture_path("lr_shock_diverge")
    _saves(tmp_path, range(500, 1001, 100))  # all after the onset
    (analysis,) = analyze([run])
    (loss,) = [
        f
        for f in attach_restart_advice(analysis.findings, inventory(tmp_path))
        if f.code == "LOSS003"
    ]
    assert loss.evidence["restart_from"] is None
    assert "no intact checkpoint before step 400 was found" in loss.message


def test_analyze_finds_the_checkpoints_beside_the_run_and_names_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: checkpoints saved beside the run's log are found by `analyze` itself,
    the broken one is a CKPT001 finding, and the divergence names the one to go back to."""
    import json
    import shutil

    from trainlens.cli import main

    run = tmp_path / "lr_shock_diverge"
    shutil.copytree(fixture_path("lr_shock_diverge").parent, run)
    (run / "checkpoints").mkdir()
    _saves(run / "checkpoints", range(100, 1001, 100), broken=300)
    assert main(["analyze", str(run / "metrics.jsonl"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    by_code = {f["code"]: f for f in found}
    assert by_code["CKPT001"]["step_start"] == 300
    assert "go back to ckpt_step_200.pt (step 200" in by_code["LOSS003"]["message"]
    # the config can turn the search off
    (tmp_path / "trainlens.toml").write_text("checkpoints = false\n")
    main(
        [
            "analyze",
            str(run / "metrics.jsonl"),
            "--json",
            "--config",
            str(tmp_path / "trainlens.toml"),
        ]
    )
    found = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    assert not [f for f in found if f["code"].startswith("CKPT")]
    assert all("go back to" not in f["message"] for f in found)


def test_the_report_marks_checkpoints_on_the_step_axis(tmp_path: Path) -> None:
    import shutil

    from trainlens.report.panels import build_figures

    run = tmp_path / "lr_shock_diverge"
    shutil.copytree(fixture_path("lr_shock_diverge").parent, run)
    (run / "checkpoints").mkdir()
    _saves(run / "checkpoints", range(100, 1001, 100), broken=300)
    figures = build_figures(analyze([run / "metrics.jsonl"]))
    loss = next(p for p in figures.panels if p.key == "loss")
    gids = {a.get_gid() for ax in loss.figure.axes for a in ax.get_lines()}
    assert "checkpoint-0-300-broken" in gids and "checkpoint-0-200-ok" in gids
    assert len({g for g in gids if g and g.startswith("checkpoint-")}) == 10


def test_analyze_checkpoints_flag_names_a_folder_kept_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from trainlens.cli import main

    _saves(tmp_path, range(100, 1001, 100))
    run = fixture_path("lr_shock_diverge")
    assert main(["analyze", str(run), "--json", "--checkpoints", str(tmp_path)]) == 0
    found = json.loads(capsys.readouterr().out)["runs"][0]["findings"]
    loss = next(f for f in found if f["code"] == "LOSS003")
    assert "go back to ckpt_step_300.pt (step 300" in loss["message"]
    assert main(["analyze", str(run), "--checkpoints", str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_an_hf_log_read_from_inside_its_checkpoint_finds_the_sibling_checkpoints(
    tmp_path: Path,
) -> None:
    """HF Trainer's log is read from its newest checkpoint (checkpoint-N/
    trainer_state.json): the run's checkpoints are that folder's siblings, not the one
    weights file inside it (which has no step: it gave a false "no checkpoint" CKPT004)."""
    transformers = pytest.importorskip("transformers")
    safetensors_torch = pytest.importorskip("safetensors.torch")

    out = tmp_path / "out"
    for step in (50, 100):
        ck = out / f"checkpoint-{step}"
        ck.mkdir(parents=True)
        safetensors_torch.save_file({"w": torch.zeros(4, 4)}, str(ck / "model.safetensors"))
        torch.save({"state": {}}, ck / "optimizer.pt")
        state = transformers.TrainerState(global_step=step, max_steps=100)
        state.log_history = [{"loss": 2.0 - s / 100, "step": s} for s in range(1, step + 1)]
        state.save_to_json(str(ck / "trainer_state.json"))
    (analysis,) = analyze([out])
    inv = analysis.context.checkpoints
    assert inv is not None and [c.name for c in inv.checkpoints] == [
        "checkpoint-50",
        "checkpoint-100",
    ]
    assert not [f for f in analysis.findings if f.code == "CKPT004"]


def test_the_checkpoint_analyze_names_is_checked_whole_and_the_onset_is_what_moved_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """analyze audits structure only, except the checkpoint it is about to name: a flipped
    byte inside step 300's tensor data (a CRC error, invisible to a structure check) makes
    it pass 300 over for 200 and report 300 as CKPT001."""
    import json
    import shutil

    from trainlens.checkpoints.advice import onset_of
    from trainlens.cli import main
    from trainlens.core.findings import Finding, Severity

    run = tmp_path / "lr_shock_diverge"
    shutil.copytree(fixture_path("lr_shock_diverge").parent, run)
    (run / "checkpoints").mkdir()
    _saves(run / "checkpoints", range(100, 1001, 100))
    target = run / "checkpoints" / "ckpt_step_300.pt"
    raw = bytearray(target.read_bytes())
    at = raw.index(b"data/0") + 200  # inside the first tensor's stored bytes
    raw[at] ^= 0xFF
    target.write_bytes(bytes(raw))
    assert main(["analyze", str(run / "metrics.jsonl"), "--json"]) == 0
    found = {f["code"]: f for f in json.loads(capsys.readouterr().out)["runs"][0]["findings"]}
    assert "go back to ckpt_step_200.pt" in found["LOSS003"]["message"]
    assert found["CKPT001"]["step_start"] == 300

    f = Finding(
        "NAN001", "x", Severity.ERROR, "train/loss", 128, 140, "m", {"first_mover_step": 120}
    )
    assert onset_of(f) == 120
