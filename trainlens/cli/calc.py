"""Calculator commands: ``mfu``, ``flops``, ``memory``, ``energy``, ``gpus``.

Numbers are taken as text so ``1.3e9``, ``1.3B`` and ``40k`` all work; the library parses
and checks them (a bad one is a UsageError: one sentence, exit 2). Each command prints its
result, then the assumptions behind it; ``--json`` prints the same as one JSON object.
The calculators are imported inside the commands so ``trainlens --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trainlens.cli.app import app

if TYPE_CHECKING:
    from trainlens.calculators.hardware import HardwareTable

NumberOpt = Annotated[str | None, typer.Option(show_default=False)]


# ---- helpers ----------------------------------------------------------------------------
def _num(text: str | None, option: str, *, allow_zero: bool = False) -> float | None:
    from trainlens.calculators.units import parse_number

    return None if text is None else parse_number(text, option, allow_zero=allow_zero)


def _int(text: str | None, option: str, *, allow_zero: bool = False) -> int | None:
    from trainlens.calculators.units import parse_int

    return None if text is None else parse_int(text, option, allow_zero=allow_zero)


def _required(text: str | None, option: str, what: str) -> str:
    if text is None:
        from trainlens.core.errors import UsageError

        raise UsageError(f"{option} is required: {what}.")
    return text


def _table(path: Path | None) -> HardwareTable:
    from trainlens.calculators.hardware import load_hardware_table

    return load_hardware_table(path)


def _sci(value: float, digits: int = 4) -> str:
    from trainlens.calculators.units import format_number

    return format_number(value, digits)


def _pct(fraction: float) -> str:
    return f"{100.0 * fraction:.1f} %"


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:,.2f} GB"


def _emit_json(payload: dict[str, Any]) -> None:
    import json

    typer.echo(json.dumps(payload, indent=2, sort_keys=False, allow_nan=False, default=str))


def _as_dict(result: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(result)


def _print_rows(rows: list[tuple[str, str]], indent: str = "  ") -> None:
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{indent}{label.ljust(width)}  {value}")


def _print_notes(warnings: list[str], assumptions: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"\nwarning: {warning}")
    typer.echo("\nAssumptions:")
    for line in assumptions:
        typer.echo(f"  - {line}")


def _check_choice(value: str, choices: tuple[str, ...], option: str) -> str:
    from trainlens.core.errors import UsageError

    lowered = value.strip().lower()
    if lowered not in choices:
        raise UsageError(f"{option} must be one of {', '.join(choices)}; got {value!r}.")
    return lowered


DTYPE_HELP = "Precision of the matmuls: bf16, fp16, fp8, tf32 or fp32 (the non-tensor rate)."
RECOMPUTE_HELP = "Activation recomputation: none, selective or full (Korthikanti et al. 2022)."
TABLE_HELP = "A CSV of extra or overriding GPU rows (same columns as `trainlens gpus --json`)."


# ---- mfu --------------------------------------------------------------------------------
@app.command()
def mfu(
    params: Annotated[
        str | None,
        typer.Option("--params", help="Non-embedding parameters N, e.g. 1.3e9 or 1.3B."),
    ] = None,
    tps: Annotated[
        str | None,
        typer.Option(
            "--tps", "--tokens-per-sec", help="Tokens per second of the whole job, e.g. 40k."
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="GPU name or alias (h100, a100-80gb, 'NVIDIA H100 PCIe')."),
    ] = None,
    gpus: Annotated[str, typer.Option("--gpus", help="Number of devices sharing the tokens/s.")] = (
        "1"
    ),
    dtype: Annotated[str, typer.Option("--dtype", help=DTYPE_HELP)] = "bf16",
    layers: Annotated[
        str | None, typer.Option("--layers", help="Layers L (attention term).")
    ] = None,
    heads: Annotated[str | None, typer.Option("--heads", help="Attention heads H.")] = None,
    head_dim: Annotated[str | None, typer.Option("--head-dim", help="Head dimension Q.")] = None,
    seq_len: Annotated[str | None, typer.Option("--seq-len", help="Sequence length T.")] = None,
    recompute: Annotated[str, typer.Option("--recompute", help=RECOMPUTE_HELP)] = "none",
    peak_tflops: Annotated[
        str | None,
        typer.Option("--peak-tflops", help="Dense peak TFLOP/s per device, instead of the table."),
    ] = None,
    table: Annotated[Path | None, typer.Option("--table", help=TABLE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """Model FLOPs utilization: 6·N (+ attention) × tokens/s ÷ the dense peak."""
    from trainlens.calculators.hardware import DTYPES
    from trainlens.calculators.mfu import mfu as compute_mfu
    from trainlens.core.errors import UsageError

    n_params = _num(_required(params, "--params", "the non-embedding parameter count"), "--params")
    tokens_per_sec = _num(_required(tps, "--tps", "tokens per second of the whole job"), "--tps")
    n_gpus = _int(gpus, "--gpus")
    dtype = _check_choice(dtype, DTYPES, "--dtype")
    recompute = _check_choice(recompute, ("none", "selective", "full"), "--recompute")
    peak = _num(peak_tflops, "--peak-tflops")
    if gpu is None and peak is None:
        raise UsageError("give --gpu NAME (see `trainlens gpus`) or --peak-tflops.")
    assert n_params is not None and tokens_per_sec is not None and n_gpus is not None
    result = compute_mfu(
        n_params,
        tokens_per_sec,
        None if peak is None else peak * 1e12,
        gpu=gpu,
        dtype=dtype,
        n_gpus=n_gpus,
        layers=_int(layers, "--layers"),
        heads=_int(heads, "--heads"),
        head_dim=_int(head_dim, "--head-dim"),
        seq_len=_int(seq_len, "--seq-len"),
        recompute=recompute,
        table=_table(table) if table is not None else None,
    )
    if as_json:
        payload = _as_dict(result)
        payload["mfu_percent"] = 100.0 * result.mfu
        payload["hfu_percent"] = 100.0 * result.hfu
        payload["peak_is_dense"] = True
        _emit_json(payload)
        return 0

    typer.echo(f"MFU {_pct(result.mfu)}  (model FLOPs / dense peak)")
    if result.recompute != "none":
        typer.echo(f"HFU {_pct(result.hfu)}  (counting {result.recompute} recomputation)")
    typer.echo("")
    fpt = f"{_sci(result.model_flops_per_token, 6)}  = 6·N"
    if result.attention_flops_per_token:
        fpt += f" + {_sci(result.attention_flops_per_token, 6)} attention"
    rows = [
        ("params N", f"{_sci(result.params, 6)} (non-embedding)"),
        ("model FLOPs per token", fpt),
    ]
    if result.recompute != "none":
        rows.append(("hardware FLOPs per token", _sci(result.hardware_flops_per_token, 6)))
    rows += [
        (
            "tokens/s",
            f"{result.tokens_per_sec:,.6g} for the job = {result.tokens_per_sec_per_gpu:,.6g}"
            f" per device x {result.n_gpus}",
        ),
        ("achieved", f"{result.achieved_flops_per_gpu / 1e12:,.1f} TFLOP/s per device"),
        (
            "peak",
            f"{result.peak_flops / 1e12:g} TFLOP/s per device, dense {result.dtype}"
            + (f" ({result.gpu})" if result.gpu and peak is None else ""),
        ),
    ]
    _print_rows(rows)
    _print_notes(result.warnings, result.assumptions)
    return 0


# ---- flops ------------------------------------------------------------------------------
@app.command()
def flops(
    params: Annotated[
        str | None, typer.Option("--params", help="Non-embedding parameters N (e.g. 70B).")
    ] = None,
    tokens: Annotated[
        str | None,
        typer.Option("--tokens", help="Training tokens D (default: Chinchilla 20·N)."),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option("--budget", help="A compute budget in FLOPs: the Chinchilla-optimal N, D."),
    ] = None,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers L.")] = None,
    heads: Annotated[str | None, typer.Option("--heads", help="Attention heads H.")] = None,
    head_dim: Annotated[str | None, typer.Option("--head-dim", help="Head dimension Q.")] = None,
    seq_len: Annotated[str | None, typer.Option("--seq-len", help="Sequence length s (T).")] = None,
    hidden: Annotated[str | None, typer.Option("--hidden", help="Hidden size h.")] = None,
    vocab: Annotated[str | None, typer.Option("--vocab", help="Vocabulary size V.")] = None,
    batch: Annotated[
        str | None, typer.Option("--batch", help="Sequences per iteration B (per-iteration form).")
    ] = None,
    recompute: Annotated[str, typer.Option("--recompute", help=RECOMPUTE_HELP)] = "none",
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU for GPU-hours.")] = None,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="Number of GPUs (for wall time).")
    ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help=DTYPE_HELP)] = "bf16",
    mfu_text: Annotated[
        str, typer.Option("--mfu", help="Utilization assumed for GPU-hours: 0.4 or 40%.")
    ] = "0.4",
    peak_tflops: Annotated[
        str | None, typer.Option("--peak-tflops", help="Dense peak TFLOP/s per device.")
    ] = None,
    table: Annotated[Path | None, typer.Option("--table", help=TABLE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """Training compute 6·N·D (+ attention), GPU-hours, Chinchilla sizes, FLOPs per iteration."""
    from trainlens.calculators.flops import (
        attention_flops_per_token,
        chinchilla_optimal,
        korthikanti_flops_per_iteration,
        training_compute,
    )
    from trainlens.calculators.hardware import DTYPES, resolve_gpu
    from trainlens.calculators.units import parse_fraction
    from trainlens.core.errors import UsageError

    dtype = _check_choice(dtype, DTYPES, "--dtype")
    recompute = _check_choice(recompute, ("none", "selective", "full"), "--recompute")
    n_params = _num(params, "--params")
    n_tokens = _num(tokens, "--tokens")
    c_budget = _num(budget, "--budget")
    n_layers = _int(layers, "--layers")
    n_heads = _int(heads, "--heads")
    q = _int(head_dim, "--head-dim")
    s = _int(seq_len, "--seq-len")
    h = _int(hidden, "--hidden")
    v = _int(vocab, "--vocab")
    b = _int(batch, "--batch")
    n_gpus = _int(gpus, "--gpus")
    per_iteration_shapes = {"--batch": b, "--layers": n_layers, "--seq-len": s, "--hidden": h}
    per_iteration_shapes["--vocab"] = v
    wants_iteration = b is not None or v is not None

    if n_params is None and c_budget is None and not wants_iteration:
        raise UsageError(
            "give --params (total compute), --budget (Chinchilla-optimal size) or "
            "--batch/--layers/--seq-len/--hidden/--vocab (FLOPs per iteration)."
        )
    if c_budget is not None and n_params is not None:
        raise UsageError("give --params or --budget, not both.")
    if tokens is not None and n_params is None:
        raise UsageError("--tokens needs --params.")

    payload: dict[str, Any] = {}
    sections: list[tuple[str, list[tuple[str, str]], list[str], list[str]]] = []

    if c_budget is not None:
        opt = chinchilla_optimal(compute=c_budget)
        payload["chinchilla"] = _as_dict(opt)
        sections.append(
            (
                f"Chinchilla-optimal for {_sci(c_budget)} FLOPs",
                [
                    ("params N", _sci(opt.params)),
                    ("tokens D", f"{_sci(opt.tokens)}  ({opt.tokens_per_param:g} per parameter)"),
                ],
                [],
                opt.assumptions,
            )
        )

    if n_params is not None:
        attn = 0.0
        extra: list[str] = []
        if n_heads is not None or q is not None:
            if q is None and n_heads is not None and h is not None:
                if h % n_heads:
                    raise UsageError("--hidden must be a multiple of --heads.")
                q = h // n_heads
            if None in (n_layers, n_heads, q, s):
                raise UsageError(
                    "the attention term needs --layers, --heads, --head-dim (or --hidden) "
                    "and --seq-len."
                )
            assert n_layers is not None and n_heads is not None and q is not None
            assert s is not None
            attn = attention_flops_per_token(n_layers, n_heads, q, s)
        elif n_layers is not None and s is not None and h is not None:
            attn = 12.0 * n_layers * h * s
            extra.append("Attention term from --hidden: H·Q = h, so 12·L·h·s per token.")
        peak: float | None = None
        gpu_name: str | None = None
        mfu_value = parse_fraction(mfu_text, "--mfu")
        peak_given = _num(peak_tflops, "--peak-tflops")
        if peak_given is not None:
            peak = peak_given * 1e12
        if gpu is not None:
            row, notes = resolve_gpu(gpu, _table(table) if table is not None else None)
            extra.extend(notes)
            gpu_name = row.name
            if peak is None:
                peak = row.peak_flops(dtype)
        result = training_compute(
            n_params,
            n_tokens,
            attn_flops_per_token=attn,
            peak_flops=peak,
            mfu=mfu_value,
            n_gpus=n_gpus,
            gpu=gpu_name,
            dtype=dtype,
        )
        payload["compute"] = _as_dict(result)
        payload["compute"]["assumptions"] = extra + result.assumptions
        rows = [
            ("params N", _sci(result.params, 6)),
            ("tokens D", f"{_sci(result.tokens, 6)}  ({result.tokens_per_param:,.3g} per param)"),
            ("FLOPs per token", _sci(result.flops_per_token, 6)),
            ("total compute", f"{_sci(result.flops)} FLOPs"),
            (
                "Chinchilla-optimal D",
                f"{_sci(result.chinchilla_tokens)} (20 per param; you have "
                f"{result.tokens / result.chinchilla_tokens:.3g}x that)",
            ),
        ]
        if result.gpu_hours is not None and result.gpu_days is not None:
            rows.append(
                (
                    "GPU-hours",
                    f"{result.gpu_hours:,.0f}  ({result.gpu_days:,.1f} GPU-days at "
                    f"{_pct(mfu_value)} MFU)",
                )
            )
        if result.wall_days is not None:
            rows.append(("wall time", f"{result.wall_days:,.2f} days on {n_gpus} GPUs"))
        elif result.gpu_hours is None:
            rows.append(("GPU-hours", "give --gpu (or --peak-tflops) and --mfu"))
        sections.append(("Training compute", rows, [], extra + result.assumptions))

    if wants_iteration:
        missing = [k for k, val in per_iteration_shapes.items() if val is None]
        if missing:
            raise UsageError(
                "FLOPs per iteration need --batch, --layers, --seq-len, --hidden and --vocab; "
                f"missing {', '.join(missing)}."
            )
        assert b is not None and n_layers is not None and s is not None
        assert h is not None and v is not None
        model = korthikanti_flops_per_iteration(b, n_layers, s, h, v, "none")
        hardware = korthikanti_flops_per_iteration(b, n_layers, s, h, v, recompute)
        payload["per_iteration"] = {
            "batch": b,
            "layers": n_layers,
            "seq_len": s,
            "hidden": h,
            "vocab": v,
            "recompute": recompute,
            "model_flops": model,
            "hardware_flops": hardware,
            "model_flops_per_token": model / (b * s),
            "assumptions": [
                "Model FLOPs per iteration 72·B·L·s·h²·(1 + s/6h + V/12hL) (Korthikanti et "
                "al. 2022; includes the logits, assumes a 4h MLP).",
                {
                    "none": "No recomputation: hardware FLOPs = model FLOPs.",
                    "selective": "Selective recomputation: s/3h in place of s/6h (the paper).",
                    "full": "Full recomputation: 96·B·L·s·h²·(1 + s/4h + V/16hL) (trainlens: "
                    "the layers' forward runs twice, the logits once).",
                }[recompute],
            ],
        }
        rows = [
            ("model FLOPs / iteration", _sci(model)),
            ("per token", _sci(model / (b * s))),
        ]
        if recompute != "none":
            rows.append((f"hardware FLOPs ({recompute})", _sci(hardware)))
        sections.append(
            (
                f"FLOPs per iteration (B={b}, L={n_layers}, s={s}, h={h}, V={v})",
                rows,
                [],
                payload["per_iteration"]["assumptions"],
            )
        )

    if as_json:
        _emit_json(payload)
        return 0
    for i, (title, rows, warnings, assumptions) in enumerate(sections):
        if i:
            typer.echo("")
        typer.echo(title)
        _print_rows(rows)
        _print_notes(warnings, assumptions)
    return 0


# ---- memory -----------------------------------------------------------------------------
@app.command()
def memory(
    params: Annotated[str | None, typer.Option("--params", help="Parameters, e.g. 7B.")] = None,
    precision: Annotated[
        str, typer.Option("--precision", help="bf16 / fp16 (mixed), fp8, or fp32.")
    ] = "bf16",
    optimizer: Annotated[
        str,
        typer.Option("--optimizer", help="adamw, adam, adam8bit, sgd, sgd-momentum or adafactor."),
    ] = "adamw",
    grad_dtype: Annotated[
        str,
        typer.Option(
            "--grad-dtype",
            help="half (ZeRO/Megatron: 16 B/param with Adam) or fp32 (HF Trainer/AMP: 18 B).",
        ),
    ] = "half",
    zero: Annotated[str, typer.Option("--zero", help="ZeRO stage 0-3.")] = "0",
    dp: Annotated[str, typer.Option("--dp", help="Data-parallel ranks Nd.")] = "1",
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel degree t.")] = "1",
    sp: Annotated[bool, typer.Option("--sp", help="Sequence parallelism (with --tp).")] = False,
    recompute: Annotated[str, typer.Option("--recompute", help=RECOMPUTE_HELP)] = "none",
    micro_batch: Annotated[
        str | None, typer.Option("--micro-batch", help="Sequences per GPU per step b.")
    ] = None,
    seq_len: Annotated[str | None, typer.Option("--seq-len", help="Sequence length s.")] = None,
    layers: Annotated[str | None, typer.Option("--layers", help="Layers L.")] = None,
    hidden: Annotated[str | None, typer.Option("--hidden", help="Hidden size h.")] = None,
    heads: Annotated[str | None, typer.Option("--heads", help="Attention heads a.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU to check the fit on.")] = None,
    memory_gb: Annotated[
        str | None, typer.Option("--memory-gb", help="Device memory in GB, instead of the table.")
    ] = None,
    table: Annotated[Path | None, typer.Option("--table", help=TABLE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """Training memory per GPU by owner (weights, gradients, optimizer, activations) and the fit."""
    from trainlens.calculators.memory import OPTIMIZERS, PRECISIONS, training_memory
    from trainlens.core.errors import UsageError

    stage = _int(zero, "--zero", allow_zero=True)
    if stage not in (0, 1, 2, 3):
        raise UsageError(f"--zero must be 0, 1, 2 or 3; got {zero!r}.")
    n_params = _num(_required(params, "--params", "the parameter count"), "--params")
    assert n_params is not None and stage is not None
    n_dp = _int(dp, "--dp")
    n_tp = _int(tp, "--tp")
    assert n_dp is not None and n_tp is not None
    result = training_memory(
        n_params,
        precision=_check_choice(precision, PRECISIONS, "--precision"),
        optimizer=_check_choice(optimizer, OPTIMIZERS, "--optimizer"),
        grad_dtype=_check_choice(grad_dtype, ("half", "fp32"), "--grad-dtype"),
        zero_stage=stage,
        dp=n_dp,
        tp=n_tp,
        sequence_parallel=sp,
        recompute=_check_choice(recompute, ("none", "selective", "full"), "--recompute"),
        micro_batch=_int(micro_batch, "--micro-batch"),
        seq_len=_int(seq_len, "--seq-len"),
        layers=_int(layers, "--layers"),
        hidden=_int(hidden, "--hidden"),
        heads=_int(heads, "--heads"),
        gpu=gpu,
        device_memory_gb=_num(memory_gb, "--memory-gb"),
        table=_table(table) if table is not None else None,
    )
    if as_json:
        payload = _as_dict(result)
        payload["owners_bytes"] = result.owners
        payload["total_gb"] = result.total_bytes / 1e9
        _emit_json(payload)
        return 0

    if result.device_memory_bytes is not None and result.headroom_bytes is not None:
        where = f" of {result.device_memory_bytes / 1e9:g} GB" + (
            f" ({result.gpu})" if result.gpu else ""
        )
        verdict = (
            f"fits, {_gb(result.headroom_bytes)} spare"
            if result.fits
            else f"does NOT fit, over by {_gb(-result.headroom_bytes)}"
        )
        typer.echo(f"Memory per GPU: {_gb(result.total_bytes)}{where}: {verdict}")
    else:
        typer.echo(f"Memory per GPU: {_gb(result.total_bytes)}  (give --gpu to check the fit)")
    typer.echo("")
    rows = [(owner, _gb(value)) for owner, value in result.owners.items()]
    if result.activations_per_layer_bytes is not None and layers is not None:
        rows[-1] = (
            "activations",
            f"{_gb(result.activations_bytes or 0.0)}  "
            f"({_gb(result.activations_per_layer_bytes)} per layer x {layers})",
        )
    rows.append(("total", _gb(result.total_bytes)))
    _print_rows(rows)
    typer.echo(
        f"\nModel states: {result.bytes_per_param:g} B/param x {_sci(result.params, 6)} = "
        f"{_gb(result.model_states_bytes)} before sharding."
    )
    _print_notes(result.warnings, result.assumptions)
    return 0


# ---- energy -----------------------------------------------------------------------------
@app.command()
def energy(
    gpu_hours: Annotated[
        str | None, typer.Option("--gpu-hours", help="Device-hours of the run, e.g. 1.08M.")
    ] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="Number of GPUs.")] = None,
    hours: Annotated[
        str | None,
        typer.Option("--hours", help="Wall time: 36 (hours), 36h, 2.5d, 90min or 5400s."),
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU (its TDP is the power).")] = None,
    watts: Annotated[
        str | None, typer.Option("--watts", help="Measured average watts per GPU.")
    ] = None,
    pue: Annotated[
        str | None, typer.Option("--pue", help="Power usage effectiveness (default 1.1).")
    ] = None,
    grid: Annotated[
        str | None,
        typer.Option("--grid", help="gCO2e/kWh as a number, or a preset (see --grids)."),
    ] = None,
    tokens: Annotated[
        str | None, typer.Option("--tokens", help="Tokens trained (for per-million figures).")
    ] = None,
    list_grids: Annotated[
        bool, typer.Option("--grids", help="List the grid presets and their sources.")
    ] = False,
    table: Annotated[Path | None, typer.Option("--table", help=TABLE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """Energy (kWh) and carbon (tCO2e): GPU-hours x watts x PUE x grid intensity."""
    from trainlens.calculators.energy import (
        DEFAULT_GRID,
        DEFAULT_PUE,
        GRID_PRESETS,
    )
    from trainlens.calculators.energy import energy as compute_energy
    from trainlens.calculators.units import parse_duration_hours

    if list_grids:
        if as_json:
            _emit_json(
                {
                    "default": DEFAULT_GRID,
                    "presets": [_as_dict(p) for p in GRID_PRESETS.values()],
                }
            )
            return 0
        width = max(len(name) for name in GRID_PRESETS)
        for preset in GRID_PRESETS.values():
            default = "  (default)" if preset.name == DEFAULT_GRID else ""
            typer.echo(
                f"{preset.name.ljust(width)}  {preset.g_per_kwh:>6g} gCO2e/kWh  "
                f"{preset.source}{default}"
            )
        return 0

    pue_value = DEFAULT_PUE if pue is None else _num(pue, "--pue")
    assert pue_value is not None
    result = compute_energy(
        gpu_hours=_num(gpu_hours, "--gpu-hours"),
        n_gpus=_int(gpus, "--gpus"),
        hours=None if hours is None else parse_duration_hours(hours, "--hours"),
        watts=_num(watts, "--watts"),
        gpu=gpu,
        pue=pue_value,
        grid=DEFAULT_GRID if grid is None else grid,
        tokens=_num(tokens, "--tokens"),
        table=_table(table) if table is not None else None,
    )
    if as_json:
        _emit_json(_as_dict(result))
        return 0
    typer.echo(f"Energy {result.kwh:,.0f} kWh  ->  {result.tco2e:,.2f} tCO2e")
    typer.echo("")
    rows = [
        ("GPU-hours", f"{result.gpu_hours:,.0f}"),
        ("power", f"{result.watts:g} W per GPU ({result.watts_source})"),
        ("PUE", f"{result.pue:g}"),
        ("grid", f"{result.grid_g_per_kwh:g} gCO2e/kWh ({result.grid})"),
    ]
    if result.kwh_per_million_tokens is not None:
        rows.append(
            (
                "per million tokens",
                f"{result.kwh_per_million_tokens:.4g} kWh, "
                f"{result.kg_co2e_per_million_tokens:.4g} kgCO2e",
            )
        )
    _print_rows(rows)
    _print_notes([], result.assumptions)
    return 0


# ---- gpus -------------------------------------------------------------------------------
_TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("bf16", "bf16_dense_tflops"),
    ("fp16", "fp16_dense_tflops"),
    ("fp8", "fp8_dense_tflops"),
    ("tf32", "tf32_dense_tflops"),
    ("fp32", "fp32_tflops"),
    ("mem GB", "memory_gb"),
    ("TB/s", "mem_bw_tbps"),
    ("TDP W", "tdp_w"),
)


@app.command()
def gpus(
    name: Annotated[
        str | None, typer.Argument(help="Show one GPU in full (name or alias).")
    ] = None,
    table: Annotated[Path | None, typer.Option("--table", help=TABLE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """The hardware table: dense peaks (TFLOP/s) per dtype, memory, bandwidth, TDP, sources."""
    hw = _table(table)
    if name is not None:
        row, notes = hw.resolve(name)
        if as_json:
            payload = row.to_dict()
            payload["match_notes"] = notes
            _emit_json(payload)
            return 0
        typer.echo(f"{row.name} ({row.vendor})" if row.vendor else row.name)
        fields = [("aliases", ", ".join(row.aliases) or "-")]
        for label, attr in _TABLE_COLUMNS:
            value = getattr(row, attr)
            unit = "" if label in ("mem GB", "TB/s", "TDP W") else " TFLOP/s dense"
            fields.append((label, "-" if value is None else f"{value:g}{unit}"))
        fields.append(("source", row.source or "-"))
        if row.notes:
            fields.append(("notes", row.notes))
        if row.origin != "packaged":
            fields.append(("from", row.origin))
        _print_rows(fields)
        for note in notes:
            typer.echo(f"  - {note}")
        return 0

    if as_json:
        _emit_json(
            {
                "peaks": "dense TFLOP/s (vendor headline tensor figures are 2:4-sparse, 2x)",
                "gpus": [g.to_dict() for g in hw],
            }
        )
        return 0
    header = ["name", "vendor"] + [label for label, _ in _TABLE_COLUMNS]
    body = []
    for row in hw:
        cells = [row.name + (" *" if row.origin != "packaged" else ""), row.vendor]
        for _, attr in _TABLE_COLUMNS:
            value = getattr(row, attr)
            cells.append("-" if value is None else f"{value:g}")
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        left = [cells[i].ljust(widths[i]) for i in range(2)]
        right = [cells[i].rjust(widths[i]) for i in range(2, len(cells))]
        return "  ".join(left + right).rstrip()

    typer.echo(line(header))
    for cells in body:
        typer.echo(line(cells))
    typer.echo(
        "\nPeaks are DENSE TFLOP/s (vendors' headline tensor figures are 2:4-sparse, twice "
        "these); fp32 is the non-tensor rate; GB = 1e9 bytes; '-' = not published or not "
        "supported."
    )
    if any(row.origin != "packaged" for row in hw):
        typer.echo("* from the user table " + str(table))
    typer.echo("\nSources:")
    for row in hw:
        typer.echo(f"  {row.name}: {row.source}")
        if row.notes:
            typer.echo(f"    note: {row.notes}")
    return 0
