"""The attention term from a model's shapes: one rule for ``mfu``, ``flops`` and the library.

``trainlens flops`` had its own copy of the attention term in the CLI (with the head width
from ``--hidden``); a half-given shape was an error in ``mfu`` but silently dropped in
``flops``, whose output then said "give --layers ... to add" with --layers given. The mfu
rule won: half-given is one sentence naming what is missing, in both commands.
"""

from __future__ import annotations

import json

import pytest

from trainlens.calculators.flops import (
    attention_flops_per_token,
    attention_term,
    flops_per_iteration,
    korthikanti_flops_per_iteration,
    model_training_compute,
    training_compute,
)
from trainlens.calculators.hardware import resolve_gpu
from trainlens.cli import main
from trainlens.core.errors import UsageError


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_head_width_from_hidden_is_hidden_over_heads() -> None:
    assert attention_term(96, 96, None, 2048, hidden=12288) == attention_flops_per_token(
        96, 96, 128, 2048
    )
    notes: list[str] = []
    # no heads either: H·Q = h, the same 12·L·h·s, and the result says so
    assert attention_term(96, None, None, 2048, 12288, notes) == 12.0 * 96 * 12288 * 2048
    assert notes == ["Attention term from --hidden: H·Q = h, so 12·L·h·s per token."]
    with pytest.raises(UsageError, match="--hidden must be a multiple of --heads"):
        attention_term(96, 95, None, 2048, hidden=12288)
    # hidden alone asks for nothing (flops takes it for the per-iteration form)
    assert attention_term(None, None, None, None, hidden=12288) == 0.0


@pytest.mark.parametrize(
    ("flags", "missing"),
    [
        (["--layers", "32"], "--heads, --head-dim, --seq-len"),
        (["--layers", "32", "--seq-len", "2048"], "--heads, --head-dim"),
        (["--heads", "32", "--head-dim", "128"], "--layers, --seq-len"),
        (["--layers", "32", "--hidden", "4096"], "--seq-len"),
    ],
)
def test_half_given_shapes_are_the_same_error_in_mfu_and_flops(
    capsys: pytest.CaptureFixture[str], flags: list[str], missing: str
) -> None:
    expected = f"missing {missing}."
    code, _, err = _cli(capsys, "flops", "--params", "7B", *flags)
    assert code == 2 and expected in err and "Traceback" not in err
    if "--hidden" not in flags:  # mfu has no --hidden
        code, _, mfu_err = _cli(
            capsys, "mfu", "--params", "7B", "--tps", "1k", "--gpu", "h100", *flags
        )
        assert code == 2 and mfu_err == err


def test_flops_json_is_the_library_result(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(
        capsys,
        *("flops", "--params", "70B", "--tokens", "1.4T", "--gpu", "a100", "--gpus", "1024"),
        *("--layers", "80", "--heads", "64", "--head-dim", "128", "--seq-len", "4096", "--json"),
    )
    assert code == 0
    got = json.loads(out)["compute"]
    lib = model_training_compute(
        70e9, 1.4e12, layers=80, heads=64, head_dim=128, seq_len=4096, gpu="a100", n_gpus=1024
    )
    assert got["flops"] == lib.flops and got["gpu_hours"] == lib.gpu_hours
    assert got["assumptions"] == lib.assumptions
    # the same as training_compute given the pieces by hand
    row = resolve_gpu("a100")[0]
    by_hand = training_compute(
        70e9,
        1.4e12,
        attn_flops_per_token=attention_flops_per_token(80, 64, 128, 4096),
        peak_flops=row.peak_flops("bf16"),
        n_gpus=1024,
        gpu=row.name,
        dtype="bf16",
    )
    assert lib.flops == by_hand.flops and lib.wall_days == by_hand.wall_days
    assert lib.assumptions[len(lib.assumptions) - len(by_hand.assumptions) :] == (
        by_hand.assumptions
    )


def test_per_iteration_matches_korthikanti_and_names_missing_shapes() -> None:
    it = flops_per_iteration(1536, 96, 2048, 12288, 51200, "selective")
    assert it.model_flops == korthikanti_flops_per_iteration(1536, 96, 2048, 12288, 51200)
    assert it.hardware_flops == korthikanti_flops_per_iteration(
        1536, 96, 2048, 12288, 51200, "selective"
    )
    assert it.hardware_flops > it.model_flops
    assert it.model_flops_per_token == it.model_flops / (1536 * 2048)
    with pytest.raises(UsageError, match="missing --hidden, --vocab"):
        flops_per_iteration(8, 12, 1024, None, None)
