"""One GPU-row resolution for every calculator (issue 14).

MFU, memory and energy each resolved ``gpu`` with their own copy of the same block; these
tests pin that a spelling names the same row (and peak) in all of them, that an unknown
name is the same one sentence everywhere, and that a user table's row reaches them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainlens.calculators import (
    energy,
    gpu_row,
    load_hardware_table,
    mfu,
    resolve_gpu,
    training_memory,
)
from trainlens.core.errors import UsageError

SPELLINGS = {
    "H100 SXM": ["h100", "H100 SXM", "h100-sxm", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"],
    "A100 SXM4 80GB": ["a100-80gb", "NVIDIA A100-SXM4-80GB"],
    "V100 SXM2": ["v100"],
}


def _rows_seen(name: str, table: object = None) -> dict[str, str | None]:
    kwargs = {"table": table} if table is not None else {}
    return {
        "mfu": mfu(1e9, 1e4, gpu=name, dtype="fp16", **kwargs).gpu,  # type: ignore[arg-type]
        "memory": training_memory(1e9, gpu=name, **kwargs).gpu,  # type: ignore[arg-type]
        "energy": energy(gpu_hours=10, gpu=name, **kwargs).gpu,  # type: ignore[arg-type]
    }


@pytest.mark.parametrize(
    ("row", "name"), [(row, name) for row, names in SPELLINGS.items() for name in names]
)
def test_every_spelling_names_the_same_row_in_every_calculator(row: str, name: str) -> None:
    if row not in {g.name for g in load_hardware_table()}:
        pytest.skip(f"{row} not in the packaged table")
    assert set(_rows_seen(name).values()) == {row}
    table_row = resolve_gpu(name)[0]
    # and the figures each takes from it are that row's
    assert mfu(1e9, 1e4, gpu=name, dtype="fp16").peak_flops == table_row.peak_flops("fp16")
    assert training_memory(1e9, gpu=name).device_memory_bytes == table_row.memory_bytes
    assert energy(gpu_hours=10, gpu=name).watts == table_row.tdp_w


def test_the_match_notes_are_the_same_in_every_calculator() -> None:
    # 'h100' could mean SXM or PCIe: each result says which row it took, in the same words
    expected = resolve_gpu("h100")[1]
    assert expected
    for result in (
        mfu(1e9, 1e4, gpu="h100"),
        training_memory(1e9, gpu="h100"),
        energy(gpu_hours=10, gpu="h100"),
    ):
        assert result.assumptions[: len(expected)] == expected


def test_unknown_gpu_is_the_same_sentence_everywhere() -> None:
    messages = []
    for call in (
        lambda: mfu(1e9, 1e4, gpu="h1000"),
        lambda: training_memory(1e9, gpu="h1000"),
        lambda: energy(gpu_hours=10, gpu="h1000"),
        lambda: gpu_row("h1000", None, []),
    ):
        with pytest.raises(UsageError) as info:
            call()
        messages.append(str(info.value))
    assert len(set(messages)) == 1
    assert messages[0].startswith("unknown GPU 'h1000': did you mean H100 SXM")


def test_a_user_table_row_reaches_every_calculator(tmp_path: Path) -> None:
    csv = tmp_path / "hw.csv"
    csv.write_text(
        "name,aliases,fp16_dense_tflops,memory_gb,tdp_w\nLab Card,labcard;lc1,100,24,250\n"
    )
    table = load_hardware_table(csv)
    assert set(_rows_seen("lc1", table).values()) == {"Lab Card"}
    assert mfu(1e9, 1e4, gpu="lc1", dtype="fp16", table=table).peak_flops == 100e12
    assert training_memory(1e9, gpu="lc1", table=table).device_memory_bytes == 24e9
    assert energy(gpu_hours=10, gpu="lc1", table=table).watts == 250


def test_gpu_row_passes_a_row_through_and_none_as_none() -> None:
    row = resolve_gpu("a100")[0]
    notes: list[str] = []
    assert gpu_row(row, None, notes) is row and notes == []
    assert gpu_row(None, None, notes) is None and notes == []
