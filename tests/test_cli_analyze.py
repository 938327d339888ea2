"""`trainlens analyze` and `convert` as a user runs them: exit codes, messages, JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from trainlens.cli import main


def _jsonl(path: Path, n: int = 200, nan_at: int | None = None) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            loss = 3.0 * math.exp(-i / 50) + 1.0
            if nan_at is not None and i >= nan_at:
                loss = float("nan")
            fh.write(
                json.dumps(
                    {
                        "step": i,
                        "loss": loss,
                        "lr": 1e-3,
                        "time": 1.7e9 + 0.5 * i,
                        "tokens_per_sec": 1000.0,
                    }
                )
                + "\n"
            )
            if i % 50 == 49:
                fh.write(json.dumps({"step": i, "val_loss": loss + 0.1}) + "\n")
    return path


def test_analyze_prints_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "run.jsonl")
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "0 … 199  (200 steps" in out
    assert "train/loss" in out and "val/loss" in out
    assert "best" in out and "at step 199" in out
    assert "1000 tokens/s" in out


def test_analyze_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "run.jsonl", nan_at=150)
    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [r] = doc["runs"]
    assert set(r) >= {"run", "source", "format", "summary", "findings", "data_quality"}
    assert r["format"] == "jsonl" and r["run"] == "run"
    assert r["summary"]["steps"] == {"first": 0, "last": 199, "count": 200}
    assert r["summary"]["val_loss"]["best_step"] == 149  # the eval at 199 is NaN
    assert r["summary"]["wall_clock_seconds"] == pytest.approx(99.5)
    nan = [f for f in r["findings"] if f["code"] == "NAN001"]
    assert nan and nan[0]["step_start"] == 150 and nan[0]["severity"] == "error"
    for f in r["findings"]:
        assert set(f) == {
            "code",
            "name",
            "severity",
            "metric",
            "step_start",
            "step_end",
            "message",
            "evidence",
            "incident",
        }
    ids = {i["id"] for i in r["incidents"]}
    assert {f["incident"] for f in r["findings"]} == ids


def test_fail_on_sets_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "run.jsonl", nan_at=150)
    assert main(["analyze", str(path), "--fail-on", "error"]) == 1
    healthy = _jsonl(tmp_path / "ok.jsonl")
    assert main(["analyze", str(healthy), "--fail-on", "error"]) == 0
    assert main(["analyze", str(path), "--fail-on", "bogus"]) == 2
    assert "--fail-on must be one of" in capsys.readouterr().err


def _make(tmp: Path, name: str, content: bytes | None) -> Path:
    path = tmp / name
    if content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.jsonl", None, "no such file"),
        ("empty.jsonl", b"", "is empty"),
        ("junk.bin", bytes(range(256)) * 4, "not a format trainlens knows"),
        ("prose.txt", b"We trained a model.\nIt went fine.\n", "not a format trainlens knows"),
    ],
)
def test_unreadable_input_exits_2_with_one_sentence(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: bytes | None,
    message: str,
) -> None:
    path = _make(tmp_path, name, content)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_directory_without_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.md").write_text("nothing here")
    assert main(["analyze", str(tmp_path / "d")]) == 2
    assert "no TensorBoard event files" in capsys.readouterr().err


def test_unknown_format_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "run.jsonl")
    assert main(["analyze", str(path), "--format", "xml"]) == 2
    assert "unknown format 'xml'" in capsys.readouterr().err


def test_convert_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _jsonl(tmp_path / "run.jsonl", nan_at=190)
    for ext in ("parquet", "jsonl", "csv"):
        out = tmp_path / f"out.{ext}"
        assert main(["convert", str(path), "-o", str(out)]) == 0
        assert out.exists()
    frame = pl.read_parquet(tmp_path / "out.parquet")
    assert frame.columns == ["step", "metric", "value", "wall_time", "superseded"]
    loss = frame.filter(pl.col("metric") == "train/loss")
    assert loss.height == 200 and loss["value"].is_nan().sum() == 10
    # the JSONL output keeps NaN (polars' own writer would write null) and reads back
    back = pl.read_csv(tmp_path / "out.csv")
    assert back.height == frame.height
    text = (tmp_path / "out.jsonl").read_text()
    assert '"value":NaN' in text
    assert main(["convert", str(path), "-o", str(tmp_path / "out.xlsx")]) == 2


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in (
        "analyze",
        "convert",
        "report",
        "gate",
        "mfu",
        "flops",
        "memory",
        "energy",
        "gpus",
    ):
        assert command in out, command


def test_format_help_names_every_reader(capsys: pytest.CaptureFixture[str]) -> None:
    from trainlens.cli.analyze import FormatOpt
    from trainlens.readers import FORMATS

    option = FormatOpt.__metadata__[0]
    listed = {f.strip(" .") for f in option.help.split(":", 1)[1].split(",")}
    assert listed == set(FORMATS)


def test_a_parser_error_over_several_lines_is_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainlens.readers.jsonl as jsonl_reader

    def refuse(path: Path, opts: object) -> None:
        raise ValueError("could not parse\n\nHint: polars says more\n  on more lines")

    monkeypatch.setattr(jsonl_reader, "read", refuse)
    path = _jsonl(tmp_path / "run.jsonl")
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"trainlens: error: {path}: cannot be read as jsonl: could not parse"
    ]


@pytest.mark.parametrize("command", ["analyze", "gate"])
def test_ignore_flag_adds_to_the_configured_ignores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture_runs: Path, command: str
) -> None:
    """One meaning in both commands: what the config ignores stays ignored, and --ignore
    adds to it (analyze used to replace the list, gate to add to it)."""
    cfg = tmp_path / "trainlens.toml"
    cfg.write_text('ignore = ["LR001"]\n')
    run = fixture_runs / "lr_shock_recover" / "metrics.jsonl"
    args = [command, str(run), "--config", str(cfg), "--ignore", "grad001"]
    main([*args, *(["--json"] if command == "analyze" else ["--format", "json"])])
    doc = json.loads(capsys.readouterr().out)
    found = doc["runs"][0]["findings"] if command == "analyze" else doc["findings"]
    codes = {f["code"] for f in found}
    assert "LOSS003" in codes  # what neither list names is still reported
    assert not codes & {"LR001", "GRAD001"}, codes


@pytest.mark.parametrize("command", ["analyze", "gate"])
@pytest.mark.parametrize(("level", "code"), [("warning", 1), ("error", 0), ("none", 0)])
def test_fail_on_is_one_rule_in_analyze_and_gate(
    capsys: pytest.CaptureFixture[str], fixture_runs: Path, command: str, level: str, code: int
) -> None:
    # lr_shock_recover: two warnings (LR001, GRAD001), no error
    run = fixture_runs / "lr_shock_recover" / "metrics.jsonl"
    assert main([command, str(run), "--fail-on", level]) == code
    capsys.readouterr()


@pytest.mark.parametrize("command", ["analyze", "gate"])
def test_an_unknown_fail_level_is_the_same_usage_error(
    capsys: pytest.CaptureFixture[str], fixture_runs: Path, command: str
) -> None:
    run = fixture_runs / "lr_shock_recover" / "metrics.jsonl"
    assert main([command, str(run), "--fail-on", "fatal"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "trainlens: error: --fail-on must be one of none, info, warning, error, not 'fatal'"
    )


def test_schedule_help_names_every_shape() -> None:
    from typing import get_type_hints

    from trainlens.cli.analyze import analyze
    from trainlens.core.schedules import SHAPES

    option = get_type_hints(analyze, include_extras=True)["schedule"].__metadata__[0]
    listed = option.help.split("(shapes:", 1)[1].rstrip(").").split(",")
    assert [s.strip() for s in listed] == list(SHAPES)
