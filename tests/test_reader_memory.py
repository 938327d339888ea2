"""Readers that hold less memory (issue 23, item 9) read the same frame and notes.

Each lighter path is compared with the path it spares: the JSONL reader's emptying of
long numeric lists, the trainer state read a piece of entries at a time, the parquet
reader's categorical metric column, and canonicalize's repeated-step check beside
mark_restarts. One bound on peak memory is checked in a child process, with a wide
margin (bench/memory.py has the measurements).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import trainlens
from trainlens.core.canonical import mark_restarts
from trainlens.core.run import Run, build_run
from trainlens.readers import _long_lines, hf_trainer
from trainlens.readers.base import ReadOptions

REPO = Path(__file__).resolve().parents[1]


def _same_runs(a: list[Run], b: list[Run]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert_frame_equal(x.frame, y.frame)
        assert [d.to_dict() for d in x.data_quality] == [d.to_dict() for d in y.data_quality]


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Run], list[Run]]:
    """The file read with the long lines emptied (LONG_LINE lowered so a small file has
    them) and with nothing emptied."""
    monkeypatch.setattr(_long_lines, "LONG_LINE", 2000)
    light = trainlens.read(path, format="jsonl")
    monkeypatch.setattr(_long_lines, "LONG_LINE", 1 << 62)
    whole = trainlens.read(path, format="jsonl")
    return light, whole


# ---- JSONL: long numeric lists ---------------------------------------------------------------


def test_long_lists_emptied_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    lines = [
        {"step": s, "loss": 1.0 / (s + 1), "hist": rng.random(400).tolist(), "tag": "a[1, 2]"}
        for s in range(20)
    ]
    lines[3]["grid"] = [[1.5] * 100, [2.5] * 100]  # a list of lists: the inner ones emptied
    lines[5]["names"] = ["x"] * 200  # a list of strings: left as it is
    lines[7]["loss"] = math.nan
    lines[8]["hist"] = [math.inf, *rng.random(300).tolist()]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    light, whole = _read_both(path, monkeypatch)
    _same_runs(light, whole)
    assert light[0].frame.height == 20
    (note,) = [d for d in light[0].data_quality if d.kind == "non-metric-column"]
    assert {"hist", "grid", "names", "tag"} <= set(note.details["columns"])


def test_a_bracket_inside_a_string_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # a key and a text value that look like lists: only the real list is emptied
    text = "[" + ", ".join(["1.0"] * 200) + "]"
    record = {"step": 3, "a[0]": 2.0, "note": text, "hist": [0.5] * 200, "b": 4.0}
    monkeypatch.setattr(_long_lines, "LONG_LINE", 1000)
    emptied, _ = _long_lines.empty_long_lists(json.dumps(record).encode() + b"\n")
    parsed = json.loads(emptied)
    assert parsed["note"] == text and parsed["a[0]"] == 2.0 and parsed["b"] == 4.0
    assert parsed["hist"] == []


def test_a_malformed_long_list_is_still_a_bad_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = '{"step": 2, "loss": 0.5, "hist": [' + ", ".join(["0.25"] * 300) + ", ]}"
    good = [json.dumps({"step": s, "loss": 1.0, "hist": [0.1] * 300}) for s in (1, 3)]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([good[0], bad, good[1]]) + "\n")
    light, whole = _read_both(path, monkeypatch)
    _same_runs(light, whole)
    (issue,) = [d for d in light[0].data_quality if d.kind == "bad-line"]
    assert issue.location == "line 2"
    assert light[0].frame.get_column("step").to_list() == [1, 3]


def test_a_cut_last_line_keeps_its_length_in_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = json.dumps({"step": 1, "loss": 1.0})
    cut = json.dumps({"step": 2, "hist": [0.5] * 600, "loss": 0.9})[:-8]  # still being written
    path = tmp_path / "run.jsonl"
    path.write_text(first + "\n" + cut)
    light, whole = _read_both(path, monkeypatch)
    _same_runs(light, whole)
    (issue,) = [d for d in light[0].data_quality if d.kind == "truncated-line"]
    assert f"({len(cut)} bytes)" in issue.message


def test_one_long_line_is_read_in_little_more_than_its_bytes(tmp_path: Path) -> None:
    # before: 13x the file on top of the imports (a 16 MB line took 0.2 GB more); now ~1x
    path = tmp_path / "one.jsonl"
    values = np.random.default_rng(0).random(400_000).tolist()
    path.write_text(json.dumps({"step": 7, "loss": 2.0, "hist": values}) + "\n")
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text('{"step": 1, "loss": 2.0}\n')
    rows, _, grown = _grown(path, tiny)
    assert rows == 1
    # (plus 32 MB for what varies from run to run: allocator arenas, polars' threads)
    assert grown < 3 * path.stat().st_size + (32 << 20), (grown, path.stat().st_size)


# ---- trainer_state.json in pieces ------------------------------------------------------------


def _write_state(path: Path, history: list[dict[str, object]]) -> None:
    from transformers import TrainerState

    TrainerState(
        global_step=len(history), max_steps=len(history), log_history=history
    ).save_to_json(str(path))


def _hf_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, Run, bool]:
    monkeypatch.setattr(hf_trainer, "PIECE", 2048)
    pieces = hf_trainer._in_pieces(path.read_bytes()) is not None
    (light,) = hf_trainer.read(path, ReadOptions())
    monkeypatch.setattr(hf_trainer, "_in_pieces", lambda data: None)
    (whole,) = hf_trainer.read(path, ReadOptions())
    return light, whole, pieces


def test_trainer_state_in_pieces_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history: list[dict[str, object]] = []
    for step in range(1, 400):
        history.append(
            {"epoch": step / 400, "grad_norm": 1.0, "loss": 2.0 - step / 1000, "step": step}
        )
        if step % 50 == 0:
            history.append({"epoch": step / 400, "eval_loss": 2.1, "step": step})
    history[10]["loss"] = math.nan
    history[20] = {"loss": 1.0}  # no step: a note, values counted
    history[30]["epoch"] = 9.0  # epoch twice at one step with another value: a note
    history.append({"epoch": 1.0, "step": 399, "train_runtime": 10.0, "train_loss": 1.7})
    path = tmp_path / "trainer_state.json"
    _write_state(path, history)
    light, whole, pieces = _hf_both(path, monkeypatch)
    assert pieces
    _same_runs([light], [whole])
    assert light.metadata == whole.metadata
    kinds = {d.kind for d in light.data_quality}
    assert "bad-step" in kinds
    assert "final/train_runtime" in light.frame.get_column("metric").cast(pl.String).to_list()


def test_trainer_state_with_a_brace_in_a_string_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cut after a '}' inside a string leaves a piece that does not parse: read whole
    history: list[dict[str, object]] = [
        {"loss": 1.0, "note": "}" * 3000, "step": s, "cfg": {"a": {"b": 1}}} for s in range(1, 40)
    ]
    path = tmp_path / "trainer_state.json"
    _write_state(path, history)
    light, whole, _ = _hf_both(path, monkeypatch)
    _same_runs([light], [whole])
    assert light.frame.height == 39


# ---- parquet: a categorical metric column ----------------------------------------------------


def test_converted_parquet_reads_as_with_text_metric_names(tmp_path: Path) -> None:
    steps = list(range(50))
    run = build_run(
        pl.DataFrame(
            {
                "step": steps * 2 + [10, 11],  # a restart at the end of loss
                "metric": ["loss"] * 50 + ["lr"] * 50 + ["loss", "loss"],
                "value": [float(s) for s in range(102)],
            }
        ),
        name="r",
        source="x",
        fmt="jsonl",
    )
    categorical = tmp_path / "run.parquet"
    trainlens.convert(run, categorical)
    text = tmp_path / "text.parquet"
    pl.read_parquet(categorical).with_columns(pl.col("metric").cast(pl.String)).write_parquet(text)
    assert isinstance(pl.read_parquet(categorical).schema["metric"], pl.Categorical)
    a, b = trainlens.read(categorical), trainlens.read(text)
    assert_frame_equal(a[0].frame, b[0].frame)
    assert [d.message for d in a[0].data_quality] == [d.message for d in b[0].data_quality]


# ---- canonicalize: repeated steps without mark_restarts ---------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_repeated_step_check_agrees_with_mark_restarts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    step = np.sort(rng.integers(0, 400, n))
    metric = rng.choice(["loss", "epoch", "lr"], n)
    value = rng.choice([0.5, 1.0, 2.0], n)
    long = pl.DataFrame({"step": step, "metric": metric, "value": value})
    run = build_run(long, name="r", source="s", fmt="hf-trainer")
    expected, issues = mark_restarts(
        run.frame.drop("superseded"),
        source="s",
    )
    assert_frame_equal(run.frame, expected)
    assert [d.to_dict() for d in run.data_quality] == [d.to_dict() for d in issues]
    assert issues  # (values repeat at one step with another value: the check had work)


# ---- text logs in pieces -----------------------------------------------------------------------

_MEGATRON = (
    " iteration {i:8d}/    1000 | consumed samples: {s:10d} | learning rate: 3.000E-04 "
    "| global batch size:   256 | lm loss: {loss:.6E} | grad norm: {norm:.3f} |\n"
)


def _mixed_log() -> bytes:
    """A log that crosses every piece boundary with something the whole file decides: a
    wrapped iteration line, validation lines, a value that is no number, a step beyond 64
    bits, llm.c lines with an mfu placeholder, bytes that are not UTF-8, CRLF, colours, a
    Trainer dict (left out: real steps exist), DeepSpeed lines (left out: Megatron's are the
    record) and an unfinished last line."""
    out = ["\ufeffsetting up ...\n"]
    for i in range(1, 121):
        out.append(_MEGATRON.format(i=i, s=i * 256, loss=10 / i, norm=1 + i % 7))
        if i % 25 == 0:
            out.append(f" validation loss at iteration {i} | lm loss value: {9 / i:.6E} |\n")
        if i == 40:  # wrapped as when copied from a terminal
            out.append(" iteration      500/    1000 | consumed samples:      10496 | lm\n")
            out.append(" loss: 2.000000E+00 | grad norm: 1.500 |\n")
        if i == 60:
            out.append(" iteration       61/    1000 | lm loss: abc | grad norm: 1.0 |\r\n")
        if i == 70:
            out.append("s:99999999999999999999999 trl:1.5\n")
            out.append("s:70 trl:2.5 lr:0.0003 norm:1.1 mfu:-100.00\n")
        if i == 80:
            out.append("{'loss': 2.1, 'grad_norm': 1.3, 'learning_rate': 5e-05, 'epoch': 0.01}\n")
            out.append("[2024-01-01 10:00:00,000] [INFO] step=80, skipped=0, lr=[0.0003]\n")
        if i == 90:
            out.append("\x1b[32mprogress\x1b[0m 50%\rdone\n")
    data = "".join(out).encode()
    return data[:3000] + b"\xff\xfe" + data[3000:] + b" iteration      121/    1000 | lm"


def _text_both(
    path: Path, monkeypatch: pytest.MonkeyPatch, piece: int, **kw: object
) -> tuple[Run, Run]:
    from trainlens.readers.textlog import cursor

    monkeypatch.setattr(cursor, "PIECE_BYTES", 1 << 26)  # (one piece)
    (whole,) = trainlens.read(path, format="text", **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(cursor, "PIECE_BYTES", piece)
    (pieces,) = trainlens.read(path, format="text", **kw)  # type: ignore[arg-type]
    return whole, pieces


def _same_text_runs(whole: Run, pieces: Run) -> None:
    _same_runs([whole], [pieces])
    assert whole.metadata == pieces.metadata
    assert whole.cursor == pieces.cursor
    assert whole.raw_names == pieces.raw_names


@pytest.mark.parametrize("piece", [1, 97, 1000])
def test_a_text_log_in_pieces_reads_as_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(_mixed_log())
    whole, pieces = _text_both(path, monkeypatch, piece)
    _same_text_runs(whole, pieces)
    kinds = {d.kind for d in whole.data_quality}
    # (the log reaches every note the pieces must add up)
    assert {"unterminated-line", "encoding", "non-numeric", "bad-step"} <= kinds, kinds
    wrapped = whole.frame.filter(pl.col("step") == 500)
    # the wrapped line's values, read across the cut
    assert (wrapped.filter(pl.col("metric") == "train/loss").get_column("value") == 2.0).all()
    assert wrapped.height == 3


def test_deepspeed_and_trainer_dict_logs_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = tmp_path / "ds.log"
    ds.write_text(
        "".join(
            f"[2024-01-01 10:00:{i % 60:02d},000] [INFO] [logging.py:96:log_dist] [Rank 0] "
            f"step={i * 10}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]\n"
            + (
                "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536\n"
                * (i % 3 == 0)
            )
            for i in range(1, 40)
        )
    )
    dicts = tmp_path / "hf.log"
    dicts.write_text(
        "".join(
            f"{{'loss': {3 - i / 50}, 'grad_norm': 1.3, 'learning_rate': 5e-05}}\n"
            + (f"{{'eval_loss': {3.1 - i / 50}}}\n" if i % 10 == 0 else "")
            for i in range(60)
        )
        + "{'train_runtime': 12.5, 'train_loss': 2.2}\n"
    )
    for path in (ds, dicts):
        whole, pieces = _text_both(path, monkeypatch, 150)
        assert whole.frame.height > 30
        _same_text_runs(whole, pieces)


def test_real_text_logs_in_pieces_read_as_in_one(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shared_dir / "real-logs"
    logs = [p for p in real.rglob("*") if p.suffix in (".log", ".txt", ".md")]
    logs = [p for p in logs if p.name != "README.md" and "LICENSE" not in p.name]
    assert len(logs) >= 10
    for path in logs:
        try:
            whole, pieces = _text_both(path, monkeypatch, 16 << 10)
        except trainlens.UnreadableInputError:
            continue  # (a crash before the first step: the same error either way)
        _same_text_runs(whole, pieces)


# ---- Keras history in pieces -------------------------------------------------------------------


def _keras_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, Run]:
    from trainlens.readers import keras_history

    monkeypatch.setattr(keras_history, "PIECE", 40)
    (pieces,) = trainlens.read(path, format="keras-history")
    monkeypatch.setattr(keras_history, "_in_pieces", lambda data: None)
    (whole,) = trainlens.read(path, format="keras-history")
    return pieces, whole


def test_a_keras_history_in_pieces_reads_as_parsed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    history = {
        "loss": [*rng.random(30).tolist(), math.nan, None, math.inf, 2],
        'val_"loss\\u00e9': rng.random(25).tolist(),  # a key with escapes
        "flags": [True, False] * 30,  # not numbers: named in a note
        "empty": [],
        "big": [10**400, -(10**400), 1.0],  # integers beyond a float: infinite
    }
    path = tmp_path / "history.json"
    with path.open("w") as fh:
        json.dump(history, fh)
    pieces, whole = _keras_both(path, monkeypatch)
    _same_runs([pieces], [whole])
    loss = pieces.frame.filter(pl.col("metric") == "train/loss")
    assert loss.height == 33 and loss.get_column("step")[-1] == 33  # the null is absent
    big = pieces.frame.filter(pl.col("metric") == "big").get_column("value").to_list()
    assert big == [math.inf, -math.inf, 1.0]
    assert [d for d in pieces.data_quality if d.kind == "non-metric-column"]


def test_an_invalid_keras_history_names_where_json_stopped(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text('{"loss": [1.0, 2.0, 3.0,, 4.0], "acc": [0.5]}')
    with pytest.raises(trainlens.UnreadableInputError, match=r"history.json: not a JSON .*char 24"):
        trainlens.read(path, format="keras-history")


# ---- peak memory in a child process --------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys, trainlens
    def kb(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1])
    trainlens.read(sys.argv[2])  # (imports and polars' start: ~20 MB, not this read)
    before = kb("VmRSS:")
    (run,) = trainlens.read(sys.argv[1])
    print(run.frame.height, run.frame.estimated_size(), kb("VmHWM:") - before)
    """
)


def _grown(path: Path, tiny: Path) -> tuple[int, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(tiny)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.split()
    return int(out[0]), int(out[1]), int(out[2]) * 1024


def test_text_log_and_keras_history_are_read_near_their_size(tmp_path: Path) -> None:
    # before: a Megatron log 10x its bytes over the imports, a Keras history 4.6x its frame
    # (bench/memory.py at full size); now ~1.4x and ~1.0x. Allowed here: 3x the input or
    # frame, plus what a text piece's strings take (up to ~13x PIECE_BYTES, a constant a
    # small log does not amortize). Measured: the 32 MB log 110-125 MB (read whole: 401
    # MB), the 16 MB history 22 MB.
    from trainlens.readers.textlog.cursor import PIECE_BYTES

    rng = np.random.default_rng(0)
    log = tmp_path / "megatron.log"
    loss, norm = rng.random(200_000) + 2, rng.random(200_000)
    log.write_text(
        "".join(
            _MEGATRON.format(i=i + 1, s=(i + 1) * 256, loss=loss[i], norm=norm[i])
            for i in range(200_000)
        )
    )
    keras = tmp_path / "history.json"
    with keras.open("w") as fh:
        json.dump({k: rng.random(200_000).tolist() for k in ("loss", "val_loss", "acc")}, fh)
    tiny = tmp_path / "tiny.log"
    tiny.write_text("s:1 trl:2.0\n")
    for path, values, extra in ((log, 1_000_000, 24 * PIECE_BYTES), (keras, 600_000, 32 << 20)):
        height, frame, grown = _grown(path, tiny)
        assert height == values
        size = max(path.stat().st_size, frame)
        assert grown < 3 * size + extra, (path.name, grown, size)
