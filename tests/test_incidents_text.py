"""analyze's terminal output speaks in incidents: one entry each, worst first; colour by
severity through rich only when wanted; many runs one line each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import trainlens
from tests.conftest import REPO, fixture_path
from trainlens.cli import main
from trainlens.formatters.color import colorize, wants_color
from trainlens.formatters.text import COMPACT_RUNS, render

ANSI_RED = "\x1b[1;31m"


def _incident_block(out: str) -> list[str]:
    lines = out.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("incidents ("))
    return lines[k:]


def test_nan_run_prints_one_entry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(fixture_path("nan_divergence"))]) == 0
    block = _incident_block(capsys.readouterr().out)
    assert block[0] == "incidents (1, from 21 findings)"
    heads = [line for line in block if line.startswith("  ERROR") or line.startswith("  WARN")]
    assert heads == ["  ERROR    steps 450–469  train/loss became NaN at step 450"]
    assert sum("NAN001" in line for line in block) == 2  # the detail and the count, not 21
    assert "grad_norm/* (16)" in block[-1] or any("grad_norm/* (" in x for x in block)


def test_verbose_lists_members_with_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(fixture_path("lr_shock_diverge")), "-v"]) == 0
    block = _incident_block(capsys.readouterr().out)
    members = [line.split()[:2] for line in block if line.startswith(" " * 11 + "ERROR")]
    assert members == [["ERROR", "GRAD001"]]  # indented under the incident
    for code in ("LR001", "GRAD004", "LOSS003"):
        assert any(line.split()[1:2] == [code] for line in block), code
    assert any("evidence: " in line for line in block)


def test_worst_first_then_by_step() -> None:
    # slow_loader: two warnings (300, 600) and an info (744), in that order
    [a] = trainlens.analyze(fixture_path("slow_loader"))
    out = render([a])
    heads = [line.split()[0:3] for line in _incident_block(out)[1:] if line[2:3].isalpha()]
    assert [h[0] for h in heads] == ["WARNING", "WARNING", "INFO"]
    assert [h[2] for h in heads] == ["300–900", "600–900", "744–834"]


def test_width_cuts_the_headline_and_wraps_the_detail() -> None:
    [a] = trainlens.analyze(fixture_path("lr_shock_diverge"))
    lines = _incident_block(render([a], width=60))
    assert all(len(line) <= 60 for line in lines), [x for x in lines if len(x) > 60]
    assert lines[1].endswith("…")  # the headline is one line, cut
    whole = _incident_block(render([a]))
    assert max(len(line) for line in whole) > 200  # a pipe gets whole lines, for grep


def test_color_choices(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(fixture_path("nan_divergence"))
    main(["analyze", path, "--color", "always"])
    out = capsys.readouterr().out
    assert f"  {ANSI_RED}ERROR" in out
    main(["analyze", path, "--color", "never"])
    assert "\x1b[" not in capsys.readouterr().out
    main(["analyze", path])  # auto, and the test's stdout is no terminal
    assert "\x1b[" not in capsys.readouterr().out
    assert main(["analyze", path, "--color", "rainbow"]) == 2
    assert "--color must be one of auto, always, never" in capsys.readouterr().err

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wants_color("auto", Tty())  # type: ignore[arg-type]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_color("auto", Tty())  # type: ignore[arg-type]
    assert wants_color("always", Tty())  # type: ignore[arg-type]  # the flag wins


def test_colour_never_reads_markup_from_a_run() -> None:
    text = "  WARNING  steps 1–2  [bold]val/loss/[red]x[/red] rose\n"
    out = colorize(text)
    assert "[bold]val/loss/[red]x[/red] rose" in out  # printed as it is, not as markup
    assert "\x1b[33mWARNING" in out


def test_piped_analyze_never_imports_rich() -> None:
    code = (
        "import sys; from trainlens.cli import main; "
        f"main(['analyze', {str(fixture_path('nan_divergence'))!r}]); "
        "print('rich' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.stderr.strip().splitlines()[-1] == "False"


def test_many_runs_one_line_each(shared_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = shared_dir / "real-logs" / "Lucas-longxutang_Comp3242_Group_Project_nanoGPT"
    assert main(["analyze", str(export / "wandb_export.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "runs (64; 0 with incidents)"
    assert len(lines) == 65  # was ~800 (a full summary per run)
    assert all("steps 5000 … 5000" in line for line in lines[1:])


def test_many_runs_list_the_incidents_of_those_that_have_them(tmp_path: Path) -> None:
    names = ["healthy_cosine", "nan_divergence", "healthy_wsd", "throughput_drop", "overfit"]
    assert len(names) > COMPACT_RUNS
    analyses = [trainlens.analyze(fixture_path(n))[0] for n in names]
    out = render(analyses)
    head = out.split("\n\n")[0].splitlines()
    assert head[0] == "runs (5; 3 with incidents)"
    assert [line.split()[0] for line in head[1:3]] == ["nan_divergence", "overfit"]
    assert "healthy_cosine" in head[-1] or "healthy_wsd" in head[-1]
    assert "no incident" in head[-1]
    blocks = out.split("\n\n")[1:]
    assert [b.split()[0] for b in blocks] == ["nan_divergence", "throughput_drop", "overfit"]
    json.dumps([a.to_dict() for a in analyses], default=str)  # still serializable
