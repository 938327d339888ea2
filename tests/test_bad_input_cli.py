"""An unexpected exception is a bug in trainlens: one sentence, exit 2 (never 1, the code
for "a finding at or above --fail-on"), a traceback only with --debug / TRAINLENS_DEBUG=1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainlens.api
from trainlens.cli import main


def _run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text(
        "".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n" for i in range(50))
    )
    return path


def _boom(*args: object, **kwargs: object) -> object:
    raise KeyError("an internal surprise\nwith a second line")


@pytest.fixture
def broken_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINLENS_DEBUG", raising=False)
    monkeypatch.setattr(trainlens.api, "read", _boom)


@pytest.mark.usefixtures("broken_read")
def test_internal_error_is_one_sentence_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["analyze", str(_run_file(tmp_path)), "--fail-on", "info"])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert "internal error" in err and "KeyError" in err and "an internal surprise" in err
    assert "bug in trainlens" in err and "report" in err and "--debug" in err
    assert "report it at https://github.com/trainlens/trainlens/issues with" in err


def test_the_issues_url_is_the_projects_and_read_from_the_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyproject's [project.urls] Issues and the fallback constant agree; an installed
    package's metadata is what the message names."""
    import importlib.metadata
    import tomllib

    from trainlens.cli import ISSUES_URL, issues_url

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    urls = tomllib.loads(pyproject.read_text("utf-8"))["project"]["urls"]
    assert urls["Issues"] == ISSUES_URL
    assert set(urls) == {"Homepage", "Issues", "Changelog", "Documentation"}

    class Meta:
        def get_all(self, key: str) -> list[str]:
            assert key == "Project-URL"
            return ["Homepage, https://example.org", "Issues, https://example.org/bugs"]

    monkeypatch.setattr(importlib.metadata, "metadata", lambda name: Meta())
    assert issues_url() == "https://example.org/bugs"

    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "metadata", missing)
    assert issues_url() == ISSUES_URL


@pytest.mark.usefixtures("broken_read")
def test_debug_flag_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="an internal surprise"):
        main(["--debug", "analyze", str(_run_file(tmp_path))])
    with pytest.raises(KeyError):
        main(["analyze", str(_run_file(tmp_path)), "--debug"])


@pytest.mark.usefixtures("broken_read")
def test_debug_environment_variable_shows_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINLENS_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["analyze", str(_run_file(tmp_path))])


def test_a_user_error_is_still_its_own_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "internal error" not in err


def test_debug_after_double_dash_is_an_argument(tmp_path: Path) -> None:
    from trainlens.cli import _take_debug_flag

    assert _take_debug_flag(["analyze", "--", "--debug"]) == (["analyze", "--", "--debug"], False)
    assert _take_debug_flag(["--debug", "analyze", "x"]) == (["analyze", "x"], True)


def test_a_file_the_system_will_not_read_is_an_error_not_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path)

    def denied(*args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(trainlens.api, "read", denied)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"trainlens: error: {path}: Permission denied"
