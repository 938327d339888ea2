"""Report options are checked in the library, once: the CLI and Python callers get the same
sentence for a bad smoothing value or an unknown [tool.trainlens.report] key.

The check used to live in cli/report.py only (with a second, differently worded range check
in write_report), so a library caller was told something else than the shell user.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trainlens
from trainlens.cli import main
from trainlens.core.config import load_config
from trainlens.core.errors import ConfigError, UsageError
from trainlens.report.options import check_smoothing, report_smoothing


def _run(tmp_path: Path) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_text(
        "".join(json.dumps({"step": s, "train/loss": 2.0 / (s + 1)}) + "\n" for s in range(50))
    )
    return path


def _cli_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainlens: error: ") and "Traceback" not in err
    return err.removeprefix("trainlens: error: ").strip()


@pytest.mark.parametrize("value", [0.0, 2.0, -0.5, float("nan")])
def test_bad_smoothing_flag_is_the_library_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: float
) -> None:
    with pytest.raises(UsageError) as info:
        check_smoothing(value, "--smooth")
    run = _run(tmp_path)
    said = _cli_error(
        capsys, "report", str(run), "-o", str(tmp_path / "rep"), "--smooth", str(value)
    )
    assert said == str(info.value)
    assert not (tmp_path / "rep").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("toml", "error", "fragment"),
    [
        ("[report]\nsmoothing = 2\n", UsageError, "report.smoothing must be in (0, 1]"),
        ('[report]\nsmoothing = "a lot"\n', ConfigError, "must be a number in (0, 1]"),
        ("[report]\nsmothing = 0.3\n", ConfigError, "unknown key 'smothing'"),
    ],
)
def test_bad_report_config_is_the_same_error_for_the_cli_and_a_library_caller(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    toml: str,
    error: type[Exception],
    fragment: str,
) -> None:
    cfg_path = tmp_path / "trainlens.toml"
    cfg_path.write_text(toml)
    cfg = load_config(cfg_path)
    with pytest.raises(error) as info:
        report_smoothing(None, cfg.report, str(cfg.path))
    assert fragment in str(info.value)
    run = _run(tmp_path)
    for command in (
        ["report", str(run), "-o", str(tmp_path / "rep"), "--config", str(cfg_path)],
        ["analyze", str(run), "--report", str(tmp_path / "rep2"), "--config", str(cfg_path)],
    ):
        assert _cli_error(capsys, *command) == str(info.value)


def test_good_values_pass_through() -> None:
    assert check_smoothing(None) is None
    assert check_smoothing(1) == 1.0 and isinstance(check_smoothing(1), float)
    assert check_smoothing(np.float32(0.25)) == 0.25  # a numpy number is a number
    assert report_smoothing(None, {"smoothing": 0.3}, "cfg") == 0.3
    assert report_smoothing(0.1, {"smoothing": 0.3}, "cfg") == 0.1  # the flag wins
    assert report_smoothing(None, {}, "cfg") is None
    with pytest.raises(UsageError, match="must be a number"):
        check_smoothing(True)  # type: ignore[arg-type]


def test_write_report_refuses_bad_smoothing_with_the_library_sentence(tmp_path: Path) -> None:
    from trainlens.report import write_report

    analyses = trainlens.analyze(_run(tmp_path))
    with pytest.raises(UsageError) as info:
        write_report(analyses, tmp_path / "rep", smoothing=2.0)
    with pytest.raises(UsageError) as expected:
        check_smoothing(2.0)
    assert str(info.value) == str(expected.value)
