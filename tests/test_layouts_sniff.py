"""Sniffing text files written by Windows tools, and CSV cells polars refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainlens
from trainlens.cli import main
from trainlens.readers import detect_format

BOM = b"\xef\xbb\xbf"


def test_jsonl_with_bom_and_crlf_is_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    rows = [json.dumps({"step": i, "loss": 1.0 - 0.1 * i}) for i in range(5)]
    path.write_bytes(BOM + "\r\n".join(rows).encode() + b"\r\n")
    assert detect_format(path) == "jsonl"
    other = tmp_path / "run.log"  # the name does not decide it
    other.write_bytes(path.read_bytes())
    assert detect_format(other) == "jsonl"


def test_csv_with_bom_is_still_csv(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    path.write_bytes(BOM + b"step,loss\r\n0,1.0\r\n1,0.9\r\n2,0.8\r\n")
    assert detect_format(path) == "csv"
    [run] = trainlens.read(path)
    assert run.series("train/loss")[0].tolist() == [0, 1, 2]


@pytest.mark.parametrize("bad", ['3,"0.7,0.1', '3,0.7",0.1'])
def test_stray_quote_is_a_note_and_other_rows_are_kept(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["step,loss,lr", *(f"{i},{1.0 - 0.1 * i:.1f},0.1" for i in range(3)), bad]
    lines += [f"{i},{1.0 - 0.1 * i:.1f},0.1" for i in range(4, 8)]
    path = tmp_path / "run.csv"
    path.write_text("\n".join(lines) + "\n")
    [run] = trainlens.read(path)
    steps, _ = run.series("train/loss")
    assert steps.tolist() == [0, 1, 2, 4, 5, 6, 7]  # file line 5 (step 3 missing) blanked
    [note] = [d for d in run.data_quality if d.kind == "bad-line"]
    assert note.location == "line 5" and note.count == 1 and "unbalanced quote" in note.message
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "line 5" in out.out


def test_trainer_state_with_bom_is_hf_trainer(tmp_path: Path) -> None:
    state = {"log_history": [{"step": i, "loss": 1.0 - 0.1 * i} for i in range(1, 4)]}
    path = tmp_path / "trainer_state.json"
    path.write_bytes(BOM + json.dumps(state).encode())
    assert detect_format(path) == "hf-trainer"


def test_an_unknown_format_names_what_is_read_and_where_it_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The message lists today's readers (frameworks' files among them), points to
    docs/formats.md, and names the flag that exists (--reader, not the old --format)."""
    path = tmp_path / "notes.txt"
    path.write_text("We trained a model.\nIt went fine.\n")
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a format trainlens knows" in err and "docs/formats.md" in err
    for named in ("JSONL", "TensorBoard", "detectron2", "MMEngine", "Ultralytics", "--reader"):
        assert named in err, named
    assert "--format" not in err and err.count("\n") == 1
    # and every framework it names has a row in docs/formats.md
    from tests.conftest import REPO
    from trainlens.readers import NOT_KNOWN

    listed = NOT_KNOWN.split("own files (", 1)[1].split(" …)", 1)[0].split(", ")
    doc = (REPO / "docs" / "formats.md").read_text()
    assert [n for n in listed if f"| {n}" not in doc] == []
