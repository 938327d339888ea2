"""A mistake in what the user asked for is exit 2 with one sentence, never a quiet pass.

Each case here passed silently before (exit 0, or the config's fail level dropped): a
typo in ``--select`` matched no code by prefix, a pyproject.toml that did not parse was
skipped, an unknown ``--gpu`` left MFU out without a word."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainlens.cli import main


def _run_file(path: Path, nan_at: int | None = 150) -> Path:
    with path.open("w") as fh:
        for i in range(200):
            loss = 3.0 * math.exp(-i / 50) + 1.0
            if nan_at is not None and i >= nan_at:
                loss = float("nan")
            fh.write(json.dumps({"step": i, "loss": loss, "lr": 1e-3}) + "\n")
    return path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--select", "GRAD0001", "--fail-on", "warning"], "did you mean 'GRAD001'"),
        (["--select", "FOO"], "'FOO' is not a finding code, a family or a detector"),
        (["--ignore", "NAN01"], "'NAN01' is not a finding code"),
        (["--gpu", "h1000"], "unknown GPU 'h1000'"),
    ],
)
def test_analyze_refuses_what_it_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    assert main(["analyze", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_family_and_a_code_in_any_case_still_select(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    assert main(["analyze", str(path), "--select", "nan", "--fail-on", "error"]) == 1
    assert "NAN001" in capsys.readouterr().out
    assert main(["analyze", str(path), "--select", "NAN001", "--fail-on", "error"]) == 1
    # a family that does not include the problem: a pass that is right
    assert main(["analyze", str(path), "--select", "GRAD", "--fail-on", "error"]) == 0


def test_gate_select_typo_is_not_green(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    assert main(["gate", str(path), "--select", "FOO", "--fail-on", "info"]) == 2
    assert "'FOO' is not a finding code" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('select = ["GRAD0001"]', "did you mean 'GRAD001'"),
        ('ignore = ["LOSS9"]', "'LOSS9' is not a finding code"),
        ("[tool.trainlens.severity]\nGRAD0001 = 'error'", "unknown finding code 'GRAD0001'"),
        ("[tool.trainlens.detectors.grad_spike]\nz = 3", "did you mean 'grad_spikes'"),
    ],
)
def test_config_keys_that_name_codes_are_checked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    table: str,
    says: str,
) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    (tmp_path / "pyproject.toml").write_text(f"[tool.trainlens]\n{table}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(path)]) == 2
    assert says in capsys.readouterr().err


def test_gate_override_select_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    (tmp_path / "trainlens.toml").write_text(
        '[[gate.overrides]]\nruns = "*"\nselect = ["NAN0001"]\n'
    )
    monkeypatch.chdir(tmp_path)
    assert main(["gate", str(path)]) == 2
    assert "NAN0001" in capsys.readouterr().err


def test_a_broken_pyproject_that_configures_trainlens_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[broken\n[tool.trainlens]\nfail_on = "error"\n')
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(path)]) == 2
    assert "pyproject.toml: not valid TOML" in capsys.readouterr().err
    # fixed, the same config applies: the NaN is an error and fail_on makes it exit 1
    pyproject.write_text('[tool.trainlens]\nfail_on = "error"\n')
    assert main(["analyze", str(path)]) == 1


def test_a_broken_pyproject_of_another_tool_is_not_trainlens_business(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _run_file(tmp_path / "run.jsonl", nan_at=None)
    (tmp_path / "pyproject.toml").write_text("[tool.ruff\nline-length = 100\n")
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", str(path)]) == 0


def test_convert_names_the_users_path_and_does_not_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    missing = tmp_path / "missing_dir" / "out.csv"
    assert main(["convert", str(path), "-o", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "missing_dir does not exist" in err
    assert "bug" not in err
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    assert main(["convert", str(path), "-o", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"
    assert main(["convert", str(path), "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("step,metric,value")


def test_a_detector_name_selects(tmp_path: Path) -> None:
    path = _run_file(tmp_path / "run.jsonl")
    assert main(["analyze", str(path), "--select", "nonfinite", "--fail-on", "error"]) == 1
    assert main(["analyze", str(path), "--ignore", "nonfinite", "--fail-on", "error"]) == 0


def test_version_short_help_and_completion(capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import subprocess
    import sys

    import trainlens

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"trainlens {trainlens.__version__}"
    assert main(["-h"]) == 0
    assert "--version" in capsys.readouterr().out
    assert main(["analyze", "-h"]) == 0
    assert "--select" in capsys.readouterr().out
    # completion as an installed shell asks for it: the console script completes commands
    env = {**os.environ, "_TRAINLENS_COMPLETE": "complete_bash"}
    env.update(COMP_WORDS="trainlens ana", COMP_CWORD="1")
    code = "from trainlens.cli.app import app; app(prog_name='trainlens')"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["analyze"]


def test_help_shows_no_python_types(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from trainlens.cli.app import app

    commands = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
    assert "analyze" in commands and "gate" in commands
    for name in commands:
        assert main([str(name), "--help"]) == 0
        text = capsys.readouterr().out
        assert not re.search(r"<(str|int|float|path|list\[[^>]*\])>|\{[a-z_]+\}", text), name
    assert main(["analyze", "--help"]) == 0
    assert "Usage: trainlens analyze [OPTIONS] PATHS..." in capsys.readouterr().out


def test_reader_and_format_each_have_one_meaning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path / "run.jsonl", nan_at=None)
    assert main(["analyze", str(path), "--reader", "jsonl", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["format"] == "jsonl"
    # --format names the output, as in gate
    assert main(["analyze", str(path), "--format", "json"]) == 0
    assert "runs" in json.loads(capsys.readouterr().out)
    # the old reader spelling still reads, with a note that says what to write instead
    assert main(["analyze", str(path), "--format", "jsonl"]) == 0
    assert "use --reader jsonl" in capsys.readouterr().err
    assert main(["analyze", str(path), "--format", "xml"]) == 2
    assert "--reader" in capsys.readouterr().err
    assert main(["analyze", str(path), "--reader", "jsonl", "--format", "csv"]) == 2


def test_report_has_a_default_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path / "run.jsonl", nan_at=None)
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(path)]) == 0
    assert (tmp_path / "trainlens-report" / "report.html").is_file()


def test_convert_refuses_a_fifo_as_its_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    path = _run_file(tmp_path / "run.jsonl")
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    assert main(["convert", str(path), "-o", str(fifo), "--force"]) == 2
    assert "not a regular file" in capsys.readouterr().err


# ---- the sweep of issue 25 item 1d: each command given wrong values as a new user would ----


def _lm_run(path: Path) -> Path:
    """A per-token LM loss with tokens/s: the summary shows perplexity."""
    with path.open("w") as fh:
        for i in range(200):
            loss = 3.0 * math.exp(-i / 50) + 1.0
            fh.write(json.dumps({"step": i, "loss": loss, "tokens_per_sec": 5e4}) + "\n")
    return path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        # caught before this sweep: kept so they stay caught
        (["analyze", "RUN", "--fail-on", "warn"], "--fail-on must be one of none, info"),
        (["analyze", "RUN", "--color", "sometimes"], "--color must be one of auto, always"),
        (["analyze", "RUN", "--gpus", "0"], "--gpus must be at least 1"),
        (["analyze", "RUN", "--params", "-5"], "--params must be positive"),
        (["gate", "DIR", "--fail-on", "warn"], "--fail-on must be one of none, info"),
        (["gate", "DIR", "--baseline", "nosuch.json"], "nosuch.json: baseline not found"),
        (["gate", "DIR", "-j", "0"], "--jobs must be at least 1"),
        (["checkpoints", "DIR", "--fail-on", "warn"], "--fail-on must be one of"),
        (["mfu", "--params", "1e9", "--tps", "0", "--gpu", "h100"], "--tps must be greater"),
        (["mfu", "--params", "-1e9", "--tps", "10", "--gpu", "h100"], "--params must be pos"),
        (["mfu", "--params", "nan", "--tps", "10", "--gpu", "h100"], "must be a finite number"),
        (["mfu", "--params", "1e9", "--tps", "10", "--peak-tflops", "0"], "--peak-tflops must"),
        (["flops", "--params", "1e9", "--gpu", "h1000"], "unknown GPU 'h1000'"),
        (["memory", "--params", "7B", "--gpu", "h1000"], "unknown GPU 'h1000'"),
        (["energy", "--gpu-hours", "10", "--gpu", "h1000"], "unknown GPU 'h1000'"),
        (["energy", "--gpu-hours", "10", "--gpu", "h100", "--pue", "0.5"], "PUE is at least 1"),
        (["report", "RUN", "--smooth", "2"], "--smooth must be in (0, 1]"),
        # quiet before: a typo'd schedule key was dropped, an impossible plan was judged
        (["analyze", "RUN", "--schedule", "cosine:warmupp=10"], "unknown key 'warmupp'"),
        (
            ["analyze", "RUN", "--schedule", "cosine:warmup_steps=-10,total_steps=100"],
            "warmup_steps must be 0 or more",
        ),
        (
            ["analyze", "RUN", "--schedule", "cosine:peak_lr=1e-3,min_lr=1e-2,total_steps=100"],
            "min_lr 0.01 is above peak_lr 0.001",
        ),
        # quiet before: --run was ignored by every reader but MLflow's
        (["analyze", "RUN", "--run", "nosuch"], "--run selects runs in an MLflow store"),
        (["convert", "RUN", "-o", "OUT", "--run", "abc"], "--run selects runs in an MLflow"),
        (["report", "RUN", "--run", "abc", "-o", "OUT"], "--run selects runs in an MLflow"),
        # watch named the config key ("flag: 'exit_on' must be ..."), not the flag typed
        (["watch", "RUN", "--once", "--exit-on", "warn"], "--exit-on must be one of info"),
        (["watch", "RUN", "--once", "--hold-steps", "-1"], "--hold-steps must be a number"),
        (["watch", "RUN", "--once", "--prometheus", "x"], "--prometheus: 'x' is not HOST:PORT"),
    ],
)
def test_each_wrong_value_is_exit_2_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    (tmp_path / "runs" / "a").mkdir(parents=True)
    run = _run_file(tmp_path / "runs" / "a" / "metrics.jsonl", nan_at=None)
    where = {"RUN": str(run), "DIR": str(tmp_path / "runs"), "OUT": str(tmp_path / "o.csv")}
    assert main([where.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert len(err.strip().splitlines()) == 1


def test_half_the_mfu_inputs_is_said_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--gpu without --params (or the reverse) printed no MFU and no word."""
    run = _lm_run(tmp_path / "run.jsonl")
    bare = _run_file(tmp_path / "bare.jsonl", nan_at=None)  # no tokens/s
    cases = [
        ([str(run), "--gpu", "h100"], "the GPU is given (--gpu) but not the model's parameter"),
        ([str(run), "--params", "1e8"], "the parameter count is given (--params) but not the GPU"),
        ([str(bare), "--params", "1e8", "--gpu", "h100"], "the run logs no tokens/s"),
    ]
    for args, says in cases:
        assert main(["analyze", *args]) == 0
        [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("mfu ")]
        assert "MFU not computed: " + says in line


def test_a_language_model_run_gets_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The perplexity axis' log ticks were asked for before the axis had limits (by the
    report's text guard): every run with a per-token loss ended in an internal error."""
    run = _lm_run(tmp_path / "run.jsonl")
    assert main(["report", str(run), "-o", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "loss.png").stat().st_size > 0
    assert "internal error" not in capsys.readouterr().err
