"""What a command imports and builds before it runs (issue 28).

Start-up is measured in bench/startup.py; here only what is deterministic: which modules
a command imports, that typer's values come out the same without pydantic, and that the
app narrowed to one command behaves as the whole app."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trainlens.cli import _coerce, app_for, main
from trainlens.cli.app import app

REPO = Path(__file__).resolve().parent.parent

HEAVY = ("polars", "numpy", "scipy", "matplotlib", "rich", "pandas", "pydantic", "yaml")


def _imported(argv: list[str], tmp_path: Path) -> tuple[int, list[str], str]:
    """Run ``main(argv)`` in a fresh interpreter: its exit code, the heavy modules it
    imported, and what it printed."""
    code = (
        "import contextlib, io, json, sys\n"
        "from trainlens.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    rc = main({argv!r})\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps([rc, heavy, out.getvalue()]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    rc, heavy, out = json.loads(proc.stdout.splitlines()[-1])
    return rc, heavy, out


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["--help"],
        ["-h"],
        ["analyze", "--help"],
        ["mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "h100"],
        ["flops", "--params", "1.3e9", "--tokens", "3e11"],
        ["gpus"],
    ],
)
def test_commands_that_read_no_run_import_no_data_library(argv: list[str], tmp_path: Path) -> None:
    rc, heavy, out = _imported(argv, tmp_path)
    assert rc == 0
    assert heavy == []
    assert out.strip()


def test_analyze_of_a_small_run_imports_no_scipy_plots_or_pydantic(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    lines = [
        json.dumps({"step": s, "loss": 3.0 - s / 100, "lr": 1e-3, "grad_norm": 1.0 + s % 3})
        for s in range(100)
    ]
    run.write_text("\n".join(lines) + "\n")
    rc, heavy, out = _imported(["analyze", str(run), "--json"], tmp_path)
    assert rc == 0
    assert json.loads(out)["runs"][0]["summary"]["steps"]["count"] == 100
    assert {"scipy", "matplotlib", "rich", "pandas", "pydantic"}.isdisjoint(heavy)
    assert {"polars", "numpy"} <= set(heavy)


def test_the_click_package_is_left_alone_when_typer_has_its_own_copy(tmp_path: Path) -> None:
    """typer 0.24+ runs on its vendored ``typer._click`` and never raises the click
    package's exceptions; importing that package anyway cost 6-7 ms of every command."""
    pytest.importorskip("typer._click")
    code = (
        "import sys\n"
        "from trainlens.cli import _CLICK_ERRORS\n"
        "from typer._click import exceptions as vendored\n"
        "assert _CLICK_ERRORS == (vendored.ClickException,), _CLICK_ERRORS\n"
        "print('click' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == "False"


def test_the_console_script_runs_no_cyclic_collection_in_an_analyze(tmp_path: Path) -> None:
    """The console script (``entry``) sets the young collection's threshold above what an
    analyze allocates, its imports nearly all (trainlens.cli.YOUNG_COLLECTION): a
    collection there walks tens of thousands of long-lived objects and frees none."""
    run = tmp_path / "run.jsonl"
    lines = [json.dumps({"step": s, "loss": 3.0 - s / 100, "lr": 1e-3}) for s in range(100)]
    run.write_text("\n".join(lines) + "\n")
    code = (
        "import gc, sys\n"
        "from trainlens.cli import entry\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(info) if phase == 'stop' else 0)\n"
        "def count():\n"
        "    sys.stderr.write(f'collections={len(seen)} young={gc.get_count()[0]}\\n')\n"
        "gc.freeze = count  # (entry's last call before it exits: the count here)\n"
        f"sys.argv = ['trainlens', 'analyze', {str(run)!r}, '--json']\n"
        "entry()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["summary"]["steps"]["count"] == 100
    got = dict(kv.split("=") for kv in proc.stderr.split()[-2:])
    from trainlens.cli import YOUNG_COLLECTION

    assert got["collections"] == "0"
    # (and with room: what the command allocated is under half the threshold)
    assert 10_000 < int(got["young"]) < YOUNG_COLLECTION // 2


# ---- typer's values without pydantic ----------------------------------------------------

typer_coercion = pytest.importorskip("typer._coercion")
VALUES: dict[Any, list[Any]] = {
    str: ["x", "", "a b", "--x", "ünï"],
    bool: [True, False, "true", "0"],
    int: ["0", "-3", "+5", "007", "1_000", " 5", "5 ", "abc", "1e3", "٣", "", 7],
    float: ["0", "1.5", "-2e-3", ".5", "5.", "1e400", "inf", "nan", "1_0", " 1", "x", "", 2.5],
    Path: ["a/b/", "", ".", "/tmp", "no/such/file", "-"],
}


def _outcome(rt: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        return "ok", repr(rt.coerce(value, param=param, ctx=ctx))  # (repr: nan == nan)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _leaf(annotation: Any) -> Any:
    from typing import get_args, get_origin

    return get_args(annotation)[0] if get_origin(annotation) is list else annotation


def test_plain_values_come_out_as_typer_makes_them() -> None:
    import typer.main

    group = typer.main.get_command(app)
    seen: set[Any] = set()
    checked = 0
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        ctx = command.make_context(name, ["--help"], resilient_parsing=True)
        for param in command.params:
            desc = param.type_descriptor
            own = typer_coercion.build_runtime_param(desc)
            plain = _coerce.plain_param(desc, lambda d=desc: typer_coercion.build_runtime_param(d))
            assert plain is not None, f"{name} {param.name}: {desc.annotation} not plain"
            leaf = _leaf(desc.annotation)
            seen.add(leaf)
            is_list = leaf is not desc.annotation
            for value in VALUES[leaf]:
                given = (value, value) if is_list else value
                if (param.multiple or param.nargs == -1) and not is_list:
                    continue
                assert _outcome(plain, given, param, ctx) == _outcome(own, given, param, ctx), (
                    name,
                    param.name,
                    value,
                )
                checked += 1
            assert _outcome(plain, None, param, ctx) == _outcome(own, None, param, ctx)
    assert seen == set(VALUES)
    assert checked > 500


def test_values_typer_must_read_still_reach_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "x.jsonl", "--gpus", "abc"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--gpus'" in err and "integer" in err


# ---- one command built, the same behaviour ----------------------------------------------


def _through(application: Any, args: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result: Any = application(args=args, prog_name="trainlens", standalone_mode=False)
        except SystemExit as exc:
            result = ("exit", exc.code)
        except Exception as exc:
            result = (type(exc).__name__, str(exc))
    return result, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "--help"],
        ["analyze", "-h"],
        ["gate", "--help"],
        ["mfu", "--help"],
        ["mfu", "--params", "1.3e9", "--tps", "40000", "--gpu", "h100", "--json"],
        ["mfu", "--params", "1.3e9"],
        ["mfu", "--nope"],
        ["convert", "--help"],
        ["gpus", "--json"],
        ["watch", "--help"],
    ],
)
def test_the_narrowed_app_runs_a_command_as_the_whole_app(args: list[str]) -> None:
    narrowed = app_for(args)
    assert narrowed is not app
    assert [c.callback for c in narrowed.registered_commands] == [
        c.callback for c in app.registered_commands if c.callback.__name__ == args[0]
    ]
    assert _through(narrowed, args) == _through(app, args)


@pytest.mark.parametrize("args", [[], ["--help"], ["-h"], ["--version"], ["-V"]])
def test_the_listing_app_prints_what_the_whole_app_prints(args: list[str]) -> None:
    listing = app_for(args)
    assert listing is not app
    assert len(listing.registered_commands) == len(app.registered_commands)
    got = _through(listing, args)
    assert got == _through(app, args)
    printed = got[1] + got[2] + str(got[0])
    assert "analyze" in printed or "trainlens 0" in printed


@pytest.mark.parametrize(
    "args", [["analyz", "x"], ["-V", "analyze"], ["--help", "gate"], ["--show-completion"]]
)
def test_unknown_names_and_options_first_get_the_whole_app(args: list[str]) -> None:
    assert app_for(args) is app


def test_completion_gets_the_whole_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_TRAINLENS_COMPLETE", "complete_bash")
    assert app_for([]) is app
    assert app_for(["analyze"]) is app


def test_every_command_is_one_the_app_can_be_narrowed_to() -> None:
    names = [c.callback.__name__ for c in app.registered_commands if c.callback]
    assert len(names) >= 11
    for name in names:
        assert len(app_for([name]).registered_commands) == 1
