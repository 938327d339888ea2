"""JSONL: written with Python's json module, as training loops write it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import trainlens
from tests.conftest import REPO
from trainlens.core.errors import UnreadableInputError
from trainlens.readers import ReadOptions, detect_format
from trainlens.readers.jsonl import read as read_jsonl


def _write(path: Path, records: list[dict], *, trailing: str = "") -> Path:
    with path.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")  # NaN/Infinity as Python writes them
        fh.write(trailing)
    return path


def test_round_trip_nested_and_nonfinite(tmp_path: Path) -> None:
    recs = [
        {
            "step": i,
            "loss": 3.0 - i * 0.01,
            "lr": 1e-3,
            "optim": {"grad_norm": 1.0 + i},
            "time": 1e9 + i,
        }
        for i in range(100)
    ]
    recs[50]["loss"] = float("nan")
    recs[60]["loss"] = float("inf")
    recs[70]["loss"] = float("-inf")
    recs.append({"step": 99, "val_loss": 2.5})
    path = _write(tmp_path / "run.jsonl", recs)
    assert detect_format(path) == "jsonl"
    [run] = trainlens.read(path)
    steps, loss = run.series("train/loss")
    assert steps.tolist() == list(range(100))
    assert math.isnan(loss[50]) and loss[60] == math.inf and loss[70] == -math.inf
    assert loss[10] == pytest.approx(2.9)
    # nested objects flattened with "/": optim/grad_norm, which the namespace rule maps
    assert run.series("grad_norm")[1][3] == 4.0
    assert run.series("val/loss")[1].tolist() == [2.5]
    assert run.frame.filter(run.frame["metric"] == "lr")["wall_time"][5] == 1e9 + 5
    assert run.frame.height == 100 * 3 + 1  # loss, lr, grad_norm; time is wall_time
    assert run.data_quality == []


def test_truncated_last_line_is_a_warning_and_the_rest_is_kept(tmp_path: Path) -> None:
    recs = [{"step": i, "loss": 1.0} for i in range(10)]
    path = _write(tmp_path / "live.jsonl", recs, trailing='{"step": 10, "lo')
    [run] = trainlens.read(path)
    assert run.series("train/loss")[0].size == 10
    [issue] = run.data_quality
    assert issue.kind == "truncated-line" and issue.location == "line 11"
    # resume: the cursor points after the last complete line
    assert run.cursor[str(path)] == path.stat().st_size - len('{"step": 10, "lo')


def test_resume_from_offset_reads_only_new_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl", [{"step": i, "loss": float(i)} for i in range(5)])
    [first] = trainlens.read(path)
    with path.open("a") as fh:
        fh.write(json.dumps({"step": 5, "loss": 5.0}) + "\n")
    [more] = read_jsonl(path, ReadOptions(start_offset=first.cursor[str(path)]))
    assert more.series("train/loss")[0].tolist() == [5]


def test_bad_lines_reported_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"step": 0, "loss": 1.0}\n'
        "this is not json\n"
        '{"step": 1, "loss": 0.9}\n'
        "\n"
        "[1, 2, 3]\n"
        '{"step": 2, "loss": "abc"}\n'
        '{"step": 3, "loss": NaN}\n'
    )
    [run] = trainlens.read(path)
    steps, values = run.series("train/loss")
    assert steps.tolist() == [0, 1, 3]
    assert math.isnan(values[2])
    where = {(d.kind, d.location) for d in run.data_quality}
    assert ("bad-line", "line 2") in where  # not JSON
    assert ("bad-line", "line 5") in where  # JSON, but not an object
    assert ("non-numeric", "line 6") in where


def test_non_utf8_byte_reported(tmp_path: Path) -> None:
    path = tmp_path / "enc.jsonl"
    path.write_bytes(b'{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 2.0, "note": "\xff"}\n')
    [run] = trainlens.read(path)
    assert run.series("train/loss")[0].tolist() == [0, 1]
    assert any(d.kind == "encoding" and d.location == "line 2" for d in run.data_quality)


def test_no_step_key_uses_line_number(tmp_path: Path) -> None:
    path = _write(tmp_path / "nostep.jsonl", [{"loss": 1.0}, {"loss": 0.5}])
    [run] = trainlens.read(path)
    assert run.series("train/loss")[0].tolist() == [0, 1]
    assert any(d.kind == "no-step" for d in run.data_quality)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty"), (b"\n\n  \n", "empty"), (b"not json at all\n", "not a format")],
)
def test_unreadable(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(UnreadableInputError, match=message):
        trainlens.read(path)


def test_only_bad_lines_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("{not json\n{also not\n")
    with pytest.raises(UnreadableInputError, match="no JSON objects"):
        trainlens.read(path, format="jsonl")


def test_sniffing_a_jsonl_file_imports_no_other_reader(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = _write(tmp_path / "run.jsonl", [{"step": s, "loss": 1.0 / (s + 1)} for s in range(5)])
    code = (
        "import sys, trainlens\n"
        "(run,) = trainlens.read(sys.argv[1])\n"
        # nor what only analyzing needs: detectors, config (and its TOML parser)
        "others = ('trainlens.readers.tensorboard', 'trainlens.readers.mlflow', 'numpy',\n"
        "    'trainlens.detectors', 'trainlens.core.config', 'trainlens.runconfig', 'tomllib')\n"
        "print(run.format, [m for m in others if m in sys.modules])\n"
    )
    repo = REPO
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=repo, capture_output=True, text=True
    )
    assert proc.stdout.strip() == "jsonl []", proc.stderr


# ---- bad input: a note, the good values kept (issue 13) --------------------------------------


@pytest.mark.parametrize("lines", [40, 40_000])  # the general path and the large-file path
def test_nan_inside_a_string_is_text_not_a_value(tmp_path: Path, lines: int) -> None:
    recs = [json.dumps({"step": i, "loss": 1.0 / (i + 1)}) for i in range(lines)]
    recs[3] = '{"step": 3, "loss": NaN, "note": "x: NaN}", "other": "NaN, Infinity"}'
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(recs) + "\n")
    [run] = trainlens.read(path)
    steps, loss = run.series("train/loss")
    assert steps.size == lines and math.isnan(loss[3]) and loss[4] == 1 / 5
    assert {"note", "other"} <= set(run.data_quality[0].details["columns"])


@pytest.mark.parametrize("lines", [40, 40_000])
def test_a_repeated_key_keeps_the_last_value_with_a_note(tmp_path: Path, lines: int) -> None:
    # (nulls and text with ':' on every line: what a cheap screen for repeats must see past)
    recs = [json.dumps({"step": i, "loss": 1.0, "m": None, "t": "12:00"}) for i in range(lines)]
    recs[7] = '{"step": 7, "loss": 5.0, "opt": {"lr": 1, "lr": 2}, "loss": 6.0}'
    recs[8] = '{"step": 8, "a": {"loss": 3.0}, "b": {"loss": 4.0}, "loss": 1.0}'  # no repeat
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(recs) + "\n")
    [run] = trainlens.read(path)
    assert run.series("train/loss")[1][7] == 6.0
    assert run.series("lr")[1].tolist() == [2.0]  # opt/lr: lr by the namespace rule
    [note] = [d for d in run.data_quality if d.kind == "duplicate-key"]
    assert note.details["lines"] == [8]


@pytest.mark.parametrize("lines", [40, 40_000])
def test_bom_and_crlf(tmp_path: Path, lines: int) -> None:
    recs = [json.dumps({"step": i, "loss": 1.0 / (i + 1)}) for i in range(lines)]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(recs).encode() + b"\r\n")
    [run] = trainlens.read(path, format="jsonl")
    steps, loss = run.series("train/loss")
    assert steps.tolist() == list(range(lines)) and loss[0] == 1.0
    assert run.data_quality == []
