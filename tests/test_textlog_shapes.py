"""The text-log shape table: every entry has an example line here and reads it; a new
shape is a table entry; the resume cursor a live ``watch`` will use."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import polars as pl
import pytest

from trainlens.readers import textlog
from trainlens.readers.base import ReadOptions
from trainlens.readers.textlog import builtin, pipeline
from trainlens.readers.textlog.shapes import NUM, SHAPES, Shape

# one example line per table entry, and a (step, metric as read, value) it must give;
# a new entry in SHAPES without an example here fails test_every_shape_has_an_example
EXAMPLES: dict[str, tuple[str, tuple[int, str, float]]] = {
    "megatron": (
        " iteration     3000/  292968 | lm loss: 2.365880E+00 | tokens_per_sec: 22.8K |",
        (3000, "tokens_per_sec", 22800.0),
    ),
    "megatron_validation": (
        " validation loss at iteration 1000 | lm loss value: 2.5E+00 | lm loss PPL: 12.2 |",
        (1000, "lm loss validation ppl", 12.2),
    ),
    "key_value": ("s:10 trl:3.25 lr:0.0006 norm:1.2 dt:120ms", (10, "dt", 0.12)),
    "nanogpt_iter": ("iter 20: loss 4.0, time 1234.5ms, mfu 15.00%", (20, "mfu", 0.15)),
    "nanogpt_eval": ("step 250: train loss 3.9, val loss 4.1", (250, "train loss (eval)", 3.9)),
    "torchtitan": (
        "step: 14  loss:  3.24  grad_norm:  0.83  memory: 9.46GiB(64.99%)  tps: 7,282",
        (14, "tps", 7282.0),
    ),
    "build_nanogpt": (
        "step   61/74 | loss 3.208939 (+nanz)| norm 1.48 (+nanz)| lr 3.00e-04 | 44.57 ms | "
        "45.0% bf16 MFU | 91886 tok/s",
        (61, "mfu", 0.45),
    ),
    "build_nanogpt_file": ("250 hella 0.2875", (250, "hellaswag", 0.2875)),
    "trainer_dict": (
        "{'loss': 2.1, 'grad_norm': np.float64(1.3), 'epoch': 0.01}",
        (1, "grad_norm", 1.3),
    ),
}
_ENTRY = {id(s): k for k, s in zip(EXAMPLES, SHAPES, strict=True)}


def _lines(*lines: str) -> pl.DataFrame:
    return (
        pl.DataFrame({"line": list(lines)})
        .with_row_index("lineno", offset=1)
        .cast({"lineno": pl.Int64})
    )


def test_every_shape_has_an_example() -> None:
    assert len(EXAMPLES) == len(SHAPES)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: _ENTRY[id(s)])
def test_each_shape_reads_its_example(shape: Shape) -> None:
    line, (step, metric, _) = EXAMPLES[_ENTRY[id(shape)]]
    long, _ = pipeline.apply(shape, _lines("an unrelated line", line))
    if shape.stepless:
        long, _ = pipeline.trainer_dict_steps(long)
    row = long.filter(pl.col("metric") == metric)
    assert row.height == 1, long
    assert row.get_column("lineno")[0] == 2
    assert row.get_column("step")[0] == step
    # a line of a shape that can make a file a text log is what a sniff looks for
    assert shape.sniff == "" or re.search(re.sub(r"\(\?P<\w+>", "(?:", shape.sniff_pattern), line)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: _ENTRY[id(s)])
def test_each_shape_as_a_file(shape: Shape, tmp_path: Path) -> None:
    line, (step, metric, value) = EXAMPLES[_ENTRY[id(shape)]]
    path = tmp_path / "train.log"
    path.write_text(f"starting\n{line}\n")
    if shape.sniff != "":
        assert textlog.sniff(path, path.read_bytes())
    [run] = textlog.read(path, ReadOptions())
    shown = {v: k for k, v in run.raw_names.items()}
    got = run.frame.filter(
        (pl.col("step") == step) & (pl.col("metric") == shown.get(metric, metric))
    )
    assert got.get_column("value").to_list() == [pytest.approx(value)]


def test_a_new_shape_is_a_table_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A made-up shape, `ep 3 | acc=0.5; loss=1.2s`, read by adding one entry."""
    new = Shape(
        name="made_up",
        line=r"^ep (?P<step>[0-9]+) \| (?P<body>.*)$",
        split=";",
        pair="=",
        names={"acc": "accuracy"},
    )
    monkeypatch.setattr(builtin, "SHAPES", (*SHAPES, new))
    path = tmp_path / "train.log"
    path.write_text("ep 3 | acc=0.5; loss=1.2s\nep 4 | acc=nan; loss=1.1s\n")
    [run] = textlog.read(path, ReadOptions())
    assert run.metadata["text_shapes"] == {"made_up": 2}
    wide = run.frame.pivot("metric", index="step", values="value").sort("step")
    assert wide.get_column("train/accuracy").to_list()[0] == 0.5
    assert wide.get_column("train/accuracy").is_nan().to_list() == [False, True]
    assert wide.get_column("train/loss").to_list() == [1.2, 1.1]  # `s` dropped, aliased


def test_every_pattern_compiles_in_python_and_polars() -> None:
    for shape in SHAPES:
        for p in (shape.line, shape.hint, shape.tokens, shape.field):
            if p is None:
                continue
            re.compile(p)
            pl.Series(["x"]).str.contains(p)
        groups = set(re.compile(shape.line).groupindex)
        assert ("step" in groups) != shape.stepless, shape.name
        assert ("body" in groups) != ({"key", "value"} <= groups), shape.name
    assert re.fullmatch(NUM, "-1.5E+03") and re.fullmatch(NUM, "-Infinity")


def test_nanogpt_pair_separated_by_a_tab_is_read(tmp_path: Path) -> None:
    """Was: the pair was split at a space, so ``loss<TAB>10.8`` became a metric named
    'loss\\t10.8' with no value (a non-numeric note) and the step's loss was lost."""
    path = tmp_path / "train.log"
    path.write_text("iter 0: loss 10.9, time 12ms\niter 1: loss\t10.8, time 11ms\n")
    [run] = textlog.read(path, ReadOptions())
    loss = run.frame.filter(pl.col("metric") == "train/loss").sort("step")
    assert loss.get_column("value").to_list() == [10.9, 10.8]
    assert not [i for i in run.data_quality if i.kind == "non-numeric"]


# ---- the resume cursor (a live `watch` reads on from it) ------------------------------------


def _megatron(i: int) -> str:
    return f" iteration {i:8d}/ 100 | lm loss: {10 - i / 10:.6E} | grad norm: {1 + i / 100} |\n"


def test_resumed_reads_add_up_to_one_read(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("".join(_megatron(i) for i in range(1, 6)))
    [first] = textlog.read(path, ReadOptions())
    assert first.cursor == {str(path): path.stat().st_size}
    # nothing new: an empty run, the same cursor
    [same] = textlog.read(path, ReadOptions(start_offset=first.cursor[str(path)]))
    assert same.frame.height == 0 and same.cursor == first.cursor
    with path.open("a") as fh:  # the run goes on; its last line is still being written
        fh.write("".join(_megatron(i) for i in range(6, 9)) + _megatron(9)[:20])
    [more] = textlog.read(path, ReadOptions(start_offset=first.cursor[str(path)]))
    assert sorted(set(more.frame.get_column("step"))) == [6, 7, 8]
    assert more.cursor[str(path)] == path.stat().st_size - 20
    unfinished = [i for i in more.data_quality if i.kind == "unterminated-line"]
    offset = first.cursor[str(path)]
    assert unfinished and str(unfinished[0].location).endswith(f"after byte {offset}")
    with path.open("a") as fh:
        fh.write(_megatron(9)[20:])
    [last] = textlog.read(path, ReadOptions(start_offset=more.cursor[str(path)]))
    assert sorted(set(last.frame.get_column("step"))) == [9]
    [whole] = textlog.read(path, ReadOptions())
    parts = pl.concat([first.frame, more.frame.filter(pl.col("step") < 9), last.frame])
    assert parts.sort("step", "metric").equals(whole.frame.sort("step", "metric"))


def test_a_file_shorter_than_the_cursor_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("".join(_megatron(i) for i in range(1, 4)))
    [run] = textlog.read(path, ReadOptions(start_offset=10_000))
    assert [i.kind for i in run.data_quality] == ["truncated-file"]
    assert sorted(set(run.frame.get_column("step"))) == [1, 2, 3]
    assert run.cursor[str(path)] == path.stat().st_size


def test_shapes_are_frozen_data() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SHAPES[0].name = "x"  # type: ignore[misc]
