"""Calculators: every published figure in shared/reference/calculator_vectors.md, the
hardware table, number parsing, and properties (monotonicity, units) with hypothesis."""

from __future__ import annotations

import csv
import itertools
import math
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainlens.calculators import (
    GPU,
    GRID_PRESETS,
    activation_bytes_per_layer,
    attention_flops_per_token,
    chinchilla_optimal,
    energy,
    hardware_flops_per_token,
    korthikanti_flops_per_iteration,
    load_hardware_table,
    lookup_gpu,
    mfu,
    mfu_series,
    model_flops_per_token,
    model_state_bytes_per_param,
    normalize_gpu_name,
    parse_duration_hours,
    parse_number,
    resolve_gpu,
    training_compute,
    training_memory,
)
from trainlens.calculators.hardware import COLUMNS, DTYPES
from trainlens.calculators.units import parse_fraction
from trainlens.core.errors import UnreadableInputError, UsageError

GB = 1e9

# ---- published figures: MFU --------------------------------------------------------------


def test_design_brief_mfu_is_31_5_percent() -> None:
    result = mfu(1.3e9, 40_000, 989e12)
    assert result.mfu == pytest.approx(0.315, abs=5e-4)
    assert result.model_flops_per_token == 6 * 1.3e9


def test_design_brief_mfu_through_the_table_h100_is_sxm_dense() -> None:
    result = mfu(1.3e9, 40_000, gpu="h100")
    assert result.gpu == "H100 SXM"
    assert result.peak_flops == pytest.approx(989.4e12)
    assert round(100 * result.mfu, 1) == 31.5
    text = " ".join(result.assumptions)
    assert "dense" in text and "H100 SXM" in text and "'h100'" in text
    assert "H100 PCIe" in text  # says which other variants the short name could mean


NANOGPT_N = 123_587_328
NANOGPT_TOKENS_PER_ITER = 480 * 1024


def test_nanogpt_flops_per_token() -> None:
    attn = attention_flops_per_token(layers=12, heads=12, head_dim=64, seq_len=1024)
    assert model_flops_per_token(NANOGPT_N, attn) == 854_770_176


@pytest.mark.parametrize(("dt", "expected"), [(1.0, 1.3466), (10.0, 0.13466)])
def test_nanogpt_estimate_mfu(dt: float, expected: float) -> None:
    result = mfu(
        NANOGPT_N,
        NANOGPT_TOKENS_PER_ITER / dt,
        312e12,
        layers=12,
        heads=12,
        head_dim=64,
        seq_len=1024,
    )
    assert result.mfu == pytest.approx(expected, rel=1e-4)
    if expected > 1:
        assert result.impossible
        assert any("134.7 % is impossible" in w and "peak given" in w for w in result.warnings)
    else:
        assert any("input pipeline" in w for w in result.warnings)  # below 20 %


def test_nanogpt_on_the_a100_row_gives_the_same_number() -> None:
    result = mfu(
        NANOGPT_N,
        NANOGPT_TOKENS_PER_ITER,
        gpu="a100",
        layers=12,
        heads=12,
        head_dim=64,
        seq_len=1024,
    )
    assert result.mfu == pytest.approx(1.3466, rel=1e-4)


@pytest.mark.parametrize(("with_attention", "expected"), [(True, 0.462), (False, 0.457)])
def test_palm_540b_mfu(with_attention: bool, expected: float) -> None:
    shapes = (
        {"layers": 118, "heads": 48, "head_dim": 256, "seq_len": 2048} if with_attention else {}
    )
    result = mfu(540e9, 238.3e3, gpu="tpu v4", n_gpus=6144, **shapes)  # type: ignore[arg-type]
    assert result.peak_flops == 275e12
    assert result.mfu == pytest.approx(expected, abs=5e-4)


def test_hfu_selective_matches_korthikanti_s_over_3h() -> None:
    # a GPT whose N counts 12·L·h² of layer weights plus the V·h logits matrix
    b, n_layers, s, h, v = 4, 24, 2048, 2048, 51200
    n = 12 * n_layers * h * h + v * h
    attn = 12.0 * n_layers * h * s
    tokens = b * s
    model = korthikanti_flops_per_iteration(b, n_layers, s, h, v, "none")
    selective = korthikanti_flops_per_iteration(b, n_layers, s, h, v, "selective")
    assert model == pytest.approx(
        72 * b * n_layers * s * h**2 * (1 + s / (6 * h) + v / (12 * h * n_layers))
    )
    assert selective == pytest.approx(
        72 * b * n_layers * s * h**2 * (1 + s / (3 * h) + v / (12 * h * n_layers))
    )
    assert model / tokens == pytest.approx(model_flops_per_token(n, attn))
    assert selective / tokens == pytest.approx(hardware_flops_per_token(n, attn, "selective"))
    full = korthikanti_flops_per_iteration(b, n_layers, s, h, v, "full")
    # full: the layers' forward runs twice (8·N for the layer weights, 6 for the logits)
    layer_n = 12 * n_layers * h * h
    assert full / tokens == pytest.approx(8 * layer_n + 6 * v * h + 2 * attn)


def test_hfu_beside_mfu() -> None:
    shapes = {"layers": 24, "heads": 16, "head_dim": 128, "seq_len": 4096}
    none = mfu(1.3e9, 30_000, gpu="a100-80gb", recompute="none", **shapes)  # type: ignore[arg-type]
    sel = mfu(1.3e9, 30_000, gpu="a100-80gb", recompute="selective", **shapes)  # type: ignore[arg-type]
    full = mfu(1.3e9, 30_000, gpu="a100-80gb", recompute="full", **shapes)  # type: ignore[arg-type]
    attn = 12.0 * 24 * 16 * 128 * 4096
    assert none.hfu == none.mfu == sel.mfu == full.mfu
    assert sel.hfu == pytest.approx(none.mfu * (6 * 1.3e9 + 2 * attn) / (6 * 1.3e9 + attn))
    assert full.hfu == pytest.approx(none.mfu * (8 * 1.3e9 + 2 * attn) / (6 * 1.3e9 + attn))


# ---- published figures: total compute ----------------------------------------------------


def test_gpt3_compute() -> None:
    result = training_compute(175e9, 300e9)
    assert result.flops == pytest.approx(3.15e23, rel=1e-9)
    assert result.flops == pytest.approx(3.14e23, rel=0.005)  # published


def test_chinchilla_compute_and_tokens_per_param() -> None:
    result = training_compute(70e9, 1.4e12)
    assert result.flops == pytest.approx(5.88e23, rel=1e-9)
    assert result.tokens_per_param == pytest.approx(20.0)
    optimal = chinchilla_optimal(compute=5.88e23)
    assert optimal.params == pytest.approx(70e9, rel=1e-9)
    assert optimal.tokens == pytest.approx(1.4e12, rel=1e-9)
    assert chinchilla_optimal(params=70e9).tokens == pytest.approx(1.4e12)
    # without tokens, D defaults to Chinchilla's 20·N and says so
    default = training_compute(70e9)
    assert default.tokens == 1.4e12
    assert any("Chinchilla" in a for a in default.assumptions)


def test_llama3_405b_compute() -> None:
    result = training_compute(405e9, 15.6e12)
    assert result.flops == pytest.approx(3.79e25, rel=1e-3)
    assert result.flops == pytest.approx(3.8e25, rel=0.005)  # published


def test_gpu_hours_from_compute() -> None:
    result = training_compute(70e9, 1.4e12, peak_flops=312e12, mfu=0.5, n_gpus=1000)
    assert result.gpu_hours == pytest.approx(5.88e23 / (312e12 * 0.5) / 3600)
    assert result.wall_days == pytest.approx(result.gpu_hours / 24 / 1000)  # type: ignore[operator]


# ---- published figures: memory -----------------------------------------------------------


def test_zero_mixed_precision_adam_is_16_bytes_per_param() -> None:
    per_param = model_state_bytes_per_param("fp16", "adam")
    assert per_param == {"weights": 2, "gradients": 2, "master": 4, "optimizer": 8}
    result = training_memory(1.5e9, precision="fp16", optimizer="adam")
    assert result.bytes_per_param == 16
    assert result.total_bytes == pytest.approx(24 * GB)
    assert result.weights_bytes == pytest.approx(3 * GB)  # fp16 weights alone


def test_hf_accounting_keeps_fp32_grads_18_bytes_per_param() -> None:
    result = training_memory(1.5e9, precision="fp16", optimizer="adamw", grad_dtype="fp32")
    assert result.bytes_per_param == 18
    assert result.total_bytes == pytest.approx(27 * GB)


@pytest.mark.parametrize("nd", [1, 8, 64, 1024])
def test_zero_stages(nd: int) -> None:
    psi = 7.5e9

    def total(stage: int) -> float:
        return training_memory(
            psi, precision="fp16", optimizer="adam", zero_stage=stage, dp=nd
        ).total_bytes

    assert total(0) == pytest.approx(16 * psi)
    assert total(1) == pytest.approx(4 * psi + 12 * psi / nd)
    assert total(2) == pytest.approx(2 * psi + 14 * psi / nd)
    assert total(3) == pytest.approx(16 * psi / nd)


def test_korthikanti_gpt3_activations() -> None:
    per_layer = activation_bytes_per_layer(2048, 1, 12288, 96)
    assert per_layer / GB == pytest.approx(2.87, abs=0.005)
    result = training_memory(175e9, micro_batch=1, seq_len=2048, layers=96, hidden=12288, heads=96)
    assert result.activations_bytes is not None
    assert result.activations_bytes / GB == pytest.approx(275, abs=0.5)


def test_korthikanti_parallel_and_recompute_forms() -> None:
    s, b, h, a, t = 2048, 2, 8192, 64, 8
    sbh = s * b * h
    assert activation_bytes_per_layer(s, b, h, a, recompute="selective") == 34 * sbh
    assert activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * sbh
    tp_only = activation_bytes_per_layer(s, b, h, a, tp=t)
    assert tp_only == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    tp_sp = activation_bytes_per_layer(s, b, h, a, tp=t, sequence_parallel=True)
    assert tp_sp == pytest.approx(sbh * (34 + 5 * a * s / h) / t)
    assert activation_bytes_per_layer(
        s, b, h, a, tp=t, sequence_parallel=True, recompute="selective"
    ) == pytest.approx(34 * sbh / t)


def test_memory_fit_against_the_device() -> None:
    fits = training_memory(1.5e9, gpu="v100")
    assert fits.fits is True and fits.headroom_bytes == pytest.approx(8 * GB)
    too_big = training_memory(7e9, gpu="h100")
    assert too_big.fits is False
    assert too_big.headroom_bytes == pytest.approx(80 * GB - 112 * GB)
    assert any("optimizer states" in w and "ZeRO" in w for w in too_big.warnings)


# ---- published figures: energy -----------------------------------------------------------


def test_bloom_energy_and_carbon() -> None:
    result = energy(gpu_hours=1_082_990, gpu="a100", pue=1.0, grid="bloom-jean-zay")
    assert result.watts == 400
    assert result.kwh == pytest.approx(433_196, abs=0.5)
    assert result.tco2e == pytest.approx(24.7, abs=0.05)


@pytest.mark.parametrize(
    ("gpu_hours", "tco2e"), [(184_320, 31.22), (368_640, 62.44), (1_720_320, 291.42)]
)
def test_llama2_carbon(gpu_hours: float, tco2e: float) -> None:
    result = energy(gpu_hours=gpu_hours, watts=400, pue=1.0, grid="llama2-implied")
    assert result.tco2e == pytest.approx(tco2e, abs=0.01)
    # the intensity the model card implies
    assert tco2e * 1e6 / result.kwh == pytest.approx(423.5, abs=0.1)


def test_energy_defaults_are_stated() -> None:
    result = energy(n_gpus=8, hours=10, gpu="h100", tokens=1e9)
    assert result.gpu_hours == 80
    assert result.pue == 1.1 and result.grid == "world"
    assert result.kwh == pytest.approx(80 * 700 * 1.1 / 1000)
    assert result.kwh_per_million_tokens == pytest.approx(result.kwh / 1000)
    text = " ".join(result.assumptions)
    assert "default" in text and "PUE 1.1" in text and "TDP" in text


def test_energy_presets_all_have_sources() -> None:
    for preset in GRID_PRESETS.values():
        assert preset.source and preset.g_per_kwh > 0
    assert GRID_PRESETS["bloom-jean-zay"].g_per_kwh == 57
    assert GRID_PRESETS["llama2-implied"].g_per_kwh == 423.5


def test_energy_input_errors() -> None:
    with pytest.raises(UsageError, match="TDP"):
        energy(gpu_hours=10, gpu="a10g")  # no TDP in the table: needs --watts
    with pytest.raises(UsageError, match="not both"):
        energy(gpu_hours=10, n_gpus=2, hours=3, watts=300)
    with pytest.raises(UsageError, match="unknown grid"):
        energy(gpu_hours=10, watts=300, grid="mars")
    with pytest.raises(UsageError, match="PUE"):
        energy(gpu_hours=10, watts=300, pue=0.9)
    assert energy(gpu_hours=10, watts=300, grid="350").grid_g_per_kwh == 350


# ---- the hardware table ------------------------------------------------------------------


def _packaged_rows() -> list[dict[str, str]]:
    text = (files("trainlens") / "data" / "hardware.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_packaged_table_columns_and_sources() -> None:
    rows = _packaged_rows()
    assert tuple(rows[0].keys()) == COLUMNS
    assert len(rows) == len(load_hardware_table())
    for row in rows:
        assert row["source"].strip(), row["name"]
        assert any(row[c].strip() for c in ("bf16_dense_tflops", "fp16_dense_tflops"))


def test_table_is_dense_not_sparse() -> None:
    assert lookup_gpu("h100").peak_tflops("bf16") == 989.4  # not the sparse 1979
    assert lookup_gpu("h100").peak_tflops("fp8") == 1978.9  # not the sparse 3958
    assert lookup_gpu("a100").peak_tflops("bf16") == 312  # not the sparse 624
    assert lookup_gpu("mi300x").peak_tflops("bf16") == 1307.4  # not 2614.9


def test_table_choices_where_sources_disagree() -> None:
    a10g = lookup_gpu("a10g")
    assert a10g.peak_tflops("bf16") == 70 and a10g.notes.startswith("CHOICE:")
    mi250x = lookup_gpu("AMD Instinct MI250X")
    assert mi250x.name == "MI250X GCD" and mi250x.peak_tflops("bf16") == 191.5
    assert lookup_gpu("mi250x-oam").peak_tflops("bf16") == 383
    assert lookup_gpu("b100").peak_tflops("bf16") == 1750
    gh200 = lookup_gpu("gh200")
    assert gh200.memory_gb == 96 and gh200.tdp_w is None
    assert lookup_gpu("gh200-144gb").memory_gb == 144
    _, notes = resolve_gpu("a10g")
    assert any(n.startswith("Table choice for A10G") for n in notes)


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("h100", "H100 SXM"),
        ("H100", "H100 SXM"),
        ("h100-sxm", "H100 SXM"),
        ("H100 SXM", "H100 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("nvidia h100_sxm", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("h100-nvl", "H100 NVL"),
        ("a100", "A100 SXM4 40GB"),
        ("a100-80gb", "A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("rtx-3090", "RTX 3090"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L4", "L4"),
        ("l40s", "L40S"),
        ("AMD Instinct MI300X", "MI300X"),
        ("tpu v4", "TPU v4"),
        ("v5e", "TPU v5e"),
        ("Intel Gaudi 2", "Gaudi2"),
    ],
)
def test_gpu_aliases(name: str, row: str) -> None:
    assert lookup_gpu(name).name == row


def test_normalization() -> None:
    assert normalize_gpu_name("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert normalize_gpu_name("H100-SXM") == normalize_gpu_name("h100 sxm") == "h100sxm"


@pytest.mark.parametrize(("name", "suggested"), [("rtx4080", "RTX 4090"), ("h1000", "H100")])
def test_unknown_gpu_suggests_close_matches(name: str, suggested: str) -> None:
    with pytest.raises(UsageError) as info:
        lookup_gpu(name)
    message = str(info.value)
    assert f"unknown GPU {name!r}" in message and suggested in message
    assert "--peak-tflops" in message


def test_missing_dtype_peak_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="fp16"):
        mfu(1e9, 1e4, gpu="v100", dtype="bf16")  # V100 has no bf16; says what it has
    assert mfu(1e9, 1e4, gpu="v100", dtype="fp16").peak_flops == 125e12
    assert set(DTYPES) == {"bf16", "fp16", "fp8", "tf32", "fp32"}


def test_user_table_adds_and_overrides(tmp_path: Path) -> None:
    extra = tmp_path / "gpus.csv"
    extra.write_text(
        "name,aliases,bf16_dense_tflops,memory_gb,tdp_w,source\n"
        "H100 SXM,my-h100,,,650,measured at our site\n"
        "MyChip,mychip;chip-x,100,48,300,vendor sheet\n",
        encoding="utf-8",
    )
    table = load_hardware_table(extra)
    h100 = table.lookup("my-h100")
    assert h100.tdp_w == 650 and h100.bf16_dense_tflops == 989.4  # only tdp changed
    assert h100.origin == str(extra)
    assert h100.source.startswith(f"{extra}: tdp_w from measured at our site; other figures: ")
    assert "Lightning" in h100.source  # the packaged sources of the untouched figures stay
    assert table.lookup("h100").name == "H100 SXM"  # packaged aliases still work
    chip = table.lookup("chip-x")
    assert chip.name == "MyChip" and chip.peak_flops("bf16") == 100e12
    assert len(table) == len(load_hardware_table()) + 1
    result = mfu(1e9, 1e4, gpu="mychip", table=table)
    assert result.peak_flops == 100e12
    assert any(str(extra) in a for a in result.assumptions)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name,bf16_dense_tflops\nX,fast\n", "line 2"),
        ("name,bf16_dense_tflops\nX,-3\n", "positive"),
        ("name,speed\nX,3\n", "unknown column"),
        ("bf16_dense_tflops\n3\n", "'name' column"),
        ("name,memory_gb\nNewChip,80\n", "no peak figure"),
        ("name,aliases,bf16_dense_tflops\nX,h100,5\n", "also matches"),
    ],
)
def test_user_table_errors(tmp_path: Path, content: str, message: str) -> None:
    extra = tmp_path / "bad.csv"
    extra.write_text(content, encoding="utf-8")
    with pytest.raises(UnreadableInputError, match=message) as info:
        load_hardware_table(extra)
    assert str(extra) in str(info.value)


def test_user_table_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UnreadableInputError, match="not found"):
        load_hardware_table(tmp_path / "nope.csv")


def test_gpu_row_round_trips_to_dict() -> None:
    row = lookup_gpu("h100")
    again = GPU(**{**row.to_dict(), "aliases": tuple(row.to_dict()["aliases"])})
    assert again == row


# ---- number parsing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.3e9", 1.3e9),
        ("1.3B", 1.3e9),
        ("1.3b", 1.3e9),
        ("40k", 40_000),
        ("124M", 124e6),
        ("15.6T", 15.6e12),
        ("2_000", 2000),
        ("1,082,990", 1_082_990),
        (" 7 ", 7),
        (".5", 0.5),
    ],
)
def test_parse_number_accepts(text: str, value: float) -> None:
    assert parse_number(text, "--x") == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("-5", "must be positive"),
        ("0", "greater than zero"),
        ("abc", "must be a number"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("", "must be a number"),
        ("1.3X", "must be a number"),
    ],
)
def test_parse_number_refuses_with_one_sentence(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_number(text, "--params")
    message = str(info.value)
    assert fragment in message and message.startswith("--params")
    assert message.endswith(".") and "\n" not in message and message.count(". ") == 0


def test_parse_durations_and_fractions() -> None:
    assert parse_duration_hours("36", "--hours") == 36
    assert parse_duration_hours("2.5d", "--hours") == 60
    assert parse_duration_hours("90min", "--hours") == 1.5
    assert parse_duration_hours("5400s", "--hours") == 1.5
    with pytest.raises(UsageError, match="duration"):
        parse_duration_hours("3 weeks", "--hours")
    assert parse_fraction("40%", "--mfu") == pytest.approx(0.4)
    assert parse_fraction("0.4", "--mfu") == pytest.approx(0.4)
    assert parse_fraction("40", "--mfu") == pytest.approx(0.4)


def test_library_refuses_bad_numbers_too() -> None:
    for bad in (-1.0, 0.0, math.nan, math.inf):
        with pytest.raises(UsageError):
            mfu(bad, 1e4, 1e12)
        with pytest.raises(UsageError):
            mfu(1e9, bad, 1e12)
    with pytest.raises(UsageError, match="--heads"):
        mfu(1e9, 1e4, 1e12, layers=12)  # a half-given attention term
    with pytest.raises(UsageError, match="recomputation"):
        mfu(1e9, 1e4, 1e12, recompute="some")
    with pytest.raises(UsageError, match="ZeRO stage"):
        training_memory(1e9, zero_stage=4)


# ---- mfu_series --------------------------------------------------------------------------


def test_mfu_series_matches_the_scalar_and_keeps_nan() -> None:
    tps = np.array([40_000.0, 20_000.0, np.nan, 0.0])
    series = mfu_series(tps, 1.3e9, 989.4e12, n_gpus=1)
    assert series[0] == pytest.approx(mfu(1.3e9, 40_000, gpu="h100").mfu)
    assert series[1] == pytest.approx(series[0] / 2)
    assert np.isnan(series[2]) and series[3] == 0
    attn = attention_flops_per_token(12, 12, 64, 1024)
    with_attn = mfu_series(np.array([491_520.0]), NANOGPT_N, 312e12, 1, attn)
    assert with_attn[0] == pytest.approx(1.3466, rel=1e-4)
    per_8 = mfu_series(np.array([320_000.0]), 1.3e9, 989.4e12, n_gpus=8)
    assert per_8[0] == pytest.approx(series[0])


# ---- properties --------------------------------------------------------------------------

positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
params_st = st.floats(min_value=1e6, max_value=1e12)
tps_st = st.floats(min_value=1.0, max_value=1e8)
peak_st = st.floats(min_value=1e12, max_value=1e16)


@settings(max_examples=60, deadline=None)
@given(params=params_st, tps=tps_st, peak=peak_st, k=positive, gpus=st.integers(1, 4096))
def test_mfu_is_linear_in_tps_and_inverse_in_peak_and_gpus(
    params: float, tps: float, peak: float, k: float, gpus: int
) -> None:
    base = mfu(params, tps, peak).mfu
    assert base == pytest.approx(6 * params * tps / peak, rel=1e-12)
    assert mfu(params, tps * k, peak).mfu == pytest.approx(k * base, rel=1e-9)
    assert mfu(params, tps, peak * k).mfu == pytest.approx(base / k, rel=1e-9)
    assert mfu(params, tps, peak, n_gpus=gpus).mfu == pytest.approx(base / gpus, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    params=params_st,
    tps=tps_st,
    layers=st.integers(1, 128),
    heads=st.integers(1, 128),
    head_dim=st.sampled_from([32, 64, 128, 256]),
    seq_len=st.integers(1, 32768),
)
def test_hfu_is_ordered_by_recompute_and_attention_only_adds(
    params: float, tps: float, layers: int, heads: int, head_dim: int, seq_len: int
) -> None:
    shapes = {"layers": layers, "heads": heads, "head_dim": head_dim, "seq_len": seq_len}
    plain = mfu(params, tps, 1e15)
    results = [mfu(params, tps, 1e15, recompute=r, **shapes) for r in ("none", "selective", "full")]  # type: ignore[arg-type]
    assert results[0].mfu >= plain.mfu
    assert results[0].hfu == results[0].mfu
    assert results[0].hfu <= results[1].hfu <= results[2].hfu
    assert all(r.mfu == results[0].mfu for r in results)


@settings(max_examples=60, deadline=None)
@given(
    params=params_st,
    dp=st.integers(1, 1024),
    precision=st.sampled_from(["bf16", "fp16", "fp8", "fp32"]),
    optimizer=st.sampled_from(["adamw", "adam8bit", "sgd", "sgd-momentum", "adafactor"]),
)
def test_memory_per_gpu_non_increasing_in_zero_stage_and_ranks(
    params: float, dp: int, precision: str, optimizer: str
) -> None:
    def per_gpu(stage: int, ranks: int) -> float:
        return training_memory(
            params, precision=precision, optimizer=optimizer, zero_stage=stage, dp=ranks
        ).total_bytes

    totals = [per_gpu(stage, dp) for stage in range(4)]
    assert all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(totals))
    for stage in range(4):
        assert per_gpu(stage, dp) >= per_gpu(stage, dp * 2) * (1 - 1e-12)
    # model states scale linearly with the parameter count
    assert per_gpu(0, 1) == pytest.approx(
        2 * training_memory(params / 2, precision=precision, optimizer=optimizer).total_bytes
    )


@settings(max_examples=60, deadline=None)
@given(
    s=st.integers(1, 16384),
    b=st.integers(1, 64),
    h=st.sampled_from([512, 1024, 4096, 12288]),
    a=st.sampled_from([8, 16, 32, 96]),
    t=st.sampled_from([1, 2, 4, 8]),
    sp=st.booleans(),
)
def test_activations_ordered_by_recompute_and_linear_in_batch(
    s: int, b: int, h: int, a: int, t: int, sp: bool
) -> None:
    kw = {"tp": t, "sequence_parallel": sp}
    none, sel, full = (
        activation_bytes_per_layer(s, b, h, a, recompute=r, **kw)  # type: ignore[arg-type]
        for r in ("none", "selective", "full")
    )
    assert none >= sel >= full > 0
    assert activation_bytes_per_layer(s, 2 * b, h, a, **kw) == pytest.approx(2 * none)  # type: ignore[arg-type]
    # more tensor parallelism never needs more memory per GPU
    assert activation_bytes_per_layer(s, b, h, a, tp=2 * t, sequence_parallel=sp) <= none


@settings(max_examples=60, deadline=None)
@given(params=params_st, tokens=st.floats(1e6, 1e14), mfu_=st.floats(0.01, 1.0), peak=peak_st)
def test_compute_units(params: float, tokens: float, mfu_: float, peak: float) -> None:
    result = training_compute(params, tokens, peak_flops=peak, mfu=mfu_)
    assert result.flops == pytest.approx(6 * params * tokens, rel=1e-12)
    assert result.gpu_hours is not None
    assert result.gpu_hours * 3600 * peak * mfu_ == pytest.approx(result.flops, rel=1e-9)
    back = chinchilla_optimal(compute=chinchilla_optimal(params=params).compute)
    assert back.params == pytest.approx(params, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    hours=st.floats(1e-3, 1e7),
    watts=st.floats(1, 2000),
    pue=st.floats(1.0, 3.0),
    grid=st.floats(0.0, 1500.0),
    k=st.floats(0.1, 100.0),
)
def test_energy_units_and_linearity(
    hours: float, watts: float, pue: float, grid: float, k: float
) -> None:
    result = energy(gpu_hours=hours, watts=watts, pue=pue, grid=grid)
    assert result.kwh == pytest.approx(hours * watts * pue / 1000, rel=1e-12)
    assert result.tco2e == pytest.approx(result.kwh * grid / 1e6, rel=1e-12, abs=1e-15)
    doubled = energy(gpu_hours=hours * k, watts=watts, pue=pue, grid=grid)
    assert doubled.kwh == pytest.approx(k * result.kwh, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(value=st.floats(min_value=1e-6, max_value=1e20, allow_nan=False, allow_infinity=False))
def test_parse_number_round_trips(value: float) -> None:
    assert parse_number(repr(value), "--x") == value
    assert parse_number(f"{value!r}k", "--x") == pytest.approx(value * 1e3)
