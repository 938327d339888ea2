"""Units decided from each metric's block give what a filter over every row gives.

units.infer reads a metric's values as a slice of its block when the frame is one block
per metric (issue 28: a filter over 11M rows cost 80 ms a metric); the decisions, the
notes and the scaled frame must be those of the filter."""

from __future__ import annotations

import polars as pl
import pytest

from trainlens.core import units
from trainlens.core.canonical import canonicalize
from trainlens.core.names import AliasTable


def _long(columns: dict[str, list[float]]) -> tuple[pl.DataFrame, list[int]]:
    rows = [
        (step, name, value, 100.0 + step)
        for name, values in columns.items()
        for step, value in enumerate(values)
    ]
    frame = pl.DataFrame(
        rows, schema=["step", "metric", "value", "wall_time"], orient="row"
    ).with_columns(pl.col("metric").cast(pl.Enum(list(columns))))
    return frame, [len(v) for v in columns.values()]


CASES = {
    "memory in MB, times in ms, a wait in ms": {
        "mem_allocated": [900.0, 1000.0, float("nan"), 1100.0, -1.0],
        "step_time": [1500.0, 1600.0, 1700.0, 0.0],
        "dataloader_wait": [200.0, 220.0, 210.0],
        "loss": [3.0, 2.9, 2.8],
    },
    "memory in GB and MFU in percent": {
        "gpu0/mem_used": [12.0, 12.5, float("inf")],
        "mfu": [35.0, 41.0, 38.0, 40.0],
        "loss_cls": [1.0, 0.9],
        "loss_bbox": [0.5, 0.4],
    },
    "nothing to decide": {"loss": [3.0, 2.0], "lr": [1e-3, 1e-3]},
}


@pytest.mark.parametrize("name", list(CASES))
def test_block_slices_decide_as_the_filter_does(name: str) -> None:
    long, counts = _long(CASES[name])
    frame, _, raw_names, blocks = canonicalize(
        long, source="run.jsonl", aliases=AliasTable(), block_counts=counts
    )
    assert blocks is not None and blocks.frame is frame
    by_blocks = units.infer(frame, raw_names, AliasTable(), "run.jsonl", blocks)
    by_filter = units.infer(frame, raw_names, AliasTable(), "run.jsonl")
    assert by_blocks[0].equals(by_filter[0])
    assert by_blocks[1] == by_filter[1]
    if name != "nothing to decide":
        assert by_filter[1], "the case decides at least one unit"


def test_blocks_of_another_frame_are_not_used() -> None:
    long, counts = _long(CASES["memory in MB, times in ms, a wait in ms"])
    frame, _, raw_names, blocks = canonicalize(
        long, source="run.jsonl", aliases=AliasTable(), block_counts=counts
    )
    assert blocks is not None
    other = frame.sort("value", nulls_last=True)  # rows moved: the blocks say nothing of it
    by_blocks = units.infer(other, raw_names, AliasTable(), "run.jsonl", blocks)
    by_filter = units.infer(other, raw_names, AliasTable(), "run.jsonl")
    assert by_blocks[0].equals(by_filter[0]) and by_blocks[1] == by_filter[1]
