"""Calculator commands: ``mfu``, ``flops``, ``memory``, ``energy`` (``gpus``: cli/calc_gpus.py).

Numbers are taken as text so ``1.3e9``, ``1.3B`` and ``40k`` all work; the library parses
and checks them (a bad one is a UsageError: one sentence, exit 2). Each command prints its
result, then the assumptions behind it; ``--json`` prints the same as one JSON object.
The calculators are imported inside the commands so ``trainlens --help`` stays fast; the
numbers all come from :mod:`trainlens.calculators`, this module only parses and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trainlens.cli._calc_common import (
    DTYPE_HELP,
    RECOMPUTE_HELP,
    TABLE_HELP,
    Section,
    as_dict,
    check_choice,
    emit_json,
    gb,
    hardware_table,
    parse_int_option,
    parse_number_option,
    pct,
    print_notes,
    print_rows,
    required_option,
    sci,
)
from trainlens.cli.app import app

if TYPE_CHECKING:
    from trainlens.calculators.energy import EnergyResult
    from trainlens.calculators.flops import ChinchillaResult, ComputeResult, IterationFlops
    from trainlens.calculators.memory import MemoryResult
    from trainlens.calculators.mfu import MFUResult


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
    dtype: Annotated[
        str | None, typer.Option("--dtype", help=DTYPE_HELP + " [default: bf16]")
    ] = None,
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

    n_params = parse_number_option(
        required_option(params, "--params", "the non-embedding parameter count"), "--params"
    )
    tokens_per_sec = parse_number_option(
        required_option(tps, "--tps", "tokens per second of the whole job"), "--tps"
    )
    n_gpus = parse_int_option(gpus, "--gpus")
    # where the precision came from is part of the answer: a peak is only as right as it
    dtype_source = "bf16 by default, --dtype to change" if dtype is None else "from --dtype"
    dtype = check_choice(dtype or "bf16", DTYPES, "--dtype")
    recompute = check_choice(recompute, ("none", "selective", "full"), "--recompute")
    peak = parse_number_option(peak_tflops, "--peak-tflops")
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
        layers=parse_int_option(layers, "--layers"),
        heads=parse_int_option(heads, "--heads"),
        head_dim=parse_int_option(head_dim, "--head-dim"),
        seq_len=parse_int_option(seq_len, "--seq-len"),
        recompute=recompute,
        table=hardware_table(table) if table is not None else None,
        dtype_source=dtype_source,
    )
    if as_json:
        payload = as_dict(result)
        payload["mfu_percent"] = 100.0 * result.mfu
        payload["hfu_percent"] = 100.0 * result.hfu
        payload["peak_is_dense"] = True
        emit_json(payload)
        return 0

    _print_mfu(result, peak_given=peak is not None)
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
        chinchilla_optimal,
        flops_per_iteration,
        model_training_compute,
    )
    from trainlens.calculators.hardware import DTYPES
    from trainlens.calculators.units import parse_fraction

    dtype = check_choice(dtype, DTYPES, "--dtype")
    recompute = check_choice(recompute, ("none", "selective", "full"), "--recompute")
    n_params = parse_number_option(params, "--params")
    c_budget = parse_number_option(budget, "--budget")
    n_layers = parse_int_option(layers, "--layers")
    s = parse_int_option(seq_len, "--seq-len")
    h = parse_int_option(hidden, "--hidden")
    b = parse_int_option(batch, "--batch")
    v = parse_int_option(vocab, "--vocab")
    wants_iteration = b is not None or v is not None

    _check_flops_request(n_params, c_budget, tokens, wants_iteration)

    payload: dict[str, Any] = {}
    sections: list[Section] = []
    if c_budget is not None:
        opt = chinchilla_optimal(compute=c_budget)
        payload["chinchilla"] = as_dict(opt)
        sections.append(_chinchilla_section(opt, c_budget))

    if n_params is not None:
        mfu_value = parse_fraction(mfu_text, "--mfu")
        peak = parse_number_option(peak_tflops, "--peak-tflops")
        n_gpus = parse_int_option(gpus, "--gpus")
        result = model_training_compute(
            n_params,
            parse_number_option(tokens, "--tokens"),
            layers=n_layers,
            heads=parse_int_option(heads, "--heads"),
            head_dim=parse_int_option(head_dim, "--head-dim"),
            seq_len=s,
            hidden=h,
            gpu=gpu,
            dtype=dtype,
            peak_flops=None if peak is None else peak * 1e12,
            mfu=mfu_value,
            n_gpus=n_gpus,
            table=hardware_table(table) if table is not None else None,
        )
        payload["compute"] = as_dict(result)
        sections.append(("Training compute", _compute_rows(result), result.assumptions))

    if wants_iteration:
        it = flops_per_iteration(b, n_layers, s, h, v, recompute)
        payload["per_iteration"] = as_dict(it)
        sections.append(_iteration_section(it))

    if as_json:
        emit_json(payload)
        return 0
    for i, (title, rows, assumptions) in enumerate(sections):
        if i:
            typer.echo("")
        typer.echo(title)
        print_rows(rows)
        print_notes([], assumptions)
    return 0


def _chinchilla_section(opt: ChinchillaResult, budget: float) -> Section:
    rows = [
        ("params N", sci(opt.params)),
        ("tokens D", f"{sci(opt.tokens)}  ({opt.tokens_per_param:g} per parameter)"),
    ]
    return (f"Chinchilla-optimal for {sci(budget)} FLOPs", rows, opt.assumptions)


def _iteration_section(it: IterationFlops) -> Section:
    rows = [
        ("model FLOPs / iteration", sci(it.model_flops)),
        ("per token", sci(it.model_flops_per_token)),
    ]
    if it.recompute != "none":
        rows.append((f"hardware FLOPs ({it.recompute})", sci(it.hardware_flops)))
    shapes = f"B={it.batch}, L={it.layers}, s={it.seq_len}, h={it.hidden}, V={it.vocab}"
    return (f"FLOPs per iteration ({shapes})", rows, it.assumptions)


def _check_flops_request(
    params: float | None, budget: float | None, tokens: str | None, wants_iteration: bool
) -> None:
    from trainlens.core.errors import UsageError

    if params is None and budget is None and not wants_iteration:
        raise UsageError(
            "give --params (total compute), --budget (Chinchilla-optimal size) or "
            "--batch/--layers/--seq-len/--hidden/--vocab (FLOPs per iteration)."
        )
    if budget is not None and params is not None:
        raise UsageError("give --params or --budget, not both.")
    if tokens is not None and params is None:
        raise UsageError("--tokens needs --params.")


def _compute_rows(result: ComputeResult) -> list[tuple[str, str]]:
    rows = [
        ("params N", sci(result.params, 6)),
        ("tokens D", f"{sci(result.tokens, 6)}  ({result.tokens_per_param:,.3g} per param)"),
        ("FLOPs per token", sci(result.flops_per_token, 6)),
        ("total compute", f"{sci(result.flops)} FLOPs"),
        (
            "Chinchilla-optimal D",
            f"{sci(result.chinchilla_tokens)} (20 per param; you have "
            f"{result.tokens / result.chinchilla_tokens:.3g}x that)",
        ),
    ]
    if result.gpu_hours is not None and result.gpu_days is not None:
        assert result.mfu is not None
        rows.append(
            (
                "GPU-hours",
                f"{result.gpu_hours:,.0f}  ({result.gpu_days:,.1f} GPU-days at "
                f"{pct(result.mfu)} MFU)",
            )
        )
    if result.wall_days is not None:
        rows.append(("wall time", f"{result.wall_days:,.2f} days on {result.n_gpus} GPUs"))
    elif result.gpu_hours is None:
        rows.append(("GPU-hours", "give --gpu (or --peak-tflops) and --mfu"))
    return rows


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

    stage = parse_int_option(zero, "--zero", allow_zero=True)
    if stage not in (0, 1, 2, 3):
        raise UsageError(f"--zero must be 0, 1, 2 or 3; got {zero!r}.")
    n_params = parse_number_option(
        required_option(params, "--params", "the parameter count"), "--params"
    )
    assert n_params is not None and stage is not None
    n_dp = parse_int_option(dp, "--dp")
    n_tp = parse_int_option(tp, "--tp")
    assert n_dp is not None and n_tp is not None
    result = training_memory(
        n_params,
        precision=check_choice(precision, PRECISIONS, "--precision"),
        optimizer=check_choice(optimizer, OPTIMIZERS, "--optimizer"),
        grad_dtype=check_choice(grad_dtype, ("half", "fp32"), "--grad-dtype"),
        zero_stage=stage,
        dp=n_dp,
        tp=n_tp,
        sequence_parallel=sp,
        recompute=check_choice(recompute, ("none", "selective", "full"), "--recompute"),
        micro_batch=parse_int_option(micro_batch, "--micro-batch"),
        seq_len=parse_int_option(seq_len, "--seq-len"),
        layers=parse_int_option(layers, "--layers"),
        hidden=parse_int_option(hidden, "--hidden"),
        heads=parse_int_option(heads, "--heads"),
        gpu=gpu,
        device_memory_gb=parse_number_option(memory_gb, "--memory-gb"),
        table=hardware_table(table) if table is not None else None,
    )
    if as_json:
        payload = as_dict(result)
        payload["owners_bytes"] = result.owners
        payload["total_gb"] = result.total_bytes / 1e9
        emit_json(payload)
        return 0

    _print_memory(result, layers)
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
    from trainlens.calculators.energy import DEFAULT_GRID, DEFAULT_PUE
    from trainlens.calculators.energy import energy as compute_energy
    from trainlens.calculators.units import parse_duration_hours

    if list_grids:
        _print_grids(as_json)
        return 0

    pue_value = DEFAULT_PUE if pue is None else parse_number_option(pue, "--pue")
    assert pue_value is not None
    result = compute_energy(
        gpu_hours=parse_number_option(gpu_hours, "--gpu-hours"),
        n_gpus=parse_int_option(gpus, "--gpus"),
        hours=None if hours is None else parse_duration_hours(hours, "--hours"),
        watts=parse_number_option(watts, "--watts"),
        gpu=gpu,
        pue=pue_value,
        grid=DEFAULT_GRID if grid is None else grid,
        tokens=parse_number_option(tokens, "--tokens"),
        table=hardware_table(table) if table is not None else None,
    )
    if as_json:
        emit_json(as_dict(result))
        return 0
    _print_energy(result)
    return 0


# ---- printing -------------------------------------------------------------------------
def _print_mfu(result: MFUResult, peak_given: bool) -> None:
    from trainlens.calculators.mfu import peak_words

    if peak_given:
        peak = f"{result.peak_flops / 1e12:g} TFLOP/s as given, taken as dense {result.dtype}"
    else:
        peak = peak_words(result.gpu, result.dtype, result.peak_flops, result.dtype_source)
    verdict = ": impossible, see the warning" if result.impossible else ""
    typer.echo(f"MFU {pct(result.mfu)}{verdict}  (model FLOPs / {peak})")
    if result.recompute != "none":
        typer.echo(f"HFU {pct(result.hfu)}  (counting {result.recompute} recomputation)")
    typer.echo("")
    fpt = f"{sci(result.model_flops_per_token, 6)}  = 6·N"
    if result.attention_flops_per_token:
        fpt += f" + {sci(result.attention_flops_per_token, 6)} attention"
    rows = [
        ("params N", f"{sci(result.params, 6)} (non-embedding)"),
        ("model FLOPs per token", fpt),
    ]
    if result.recompute != "none":
        rows.append(("hardware FLOPs per token", sci(result.hardware_flops_per_token, 6)))
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
            + (f" ({result.gpu})" if result.gpu and not peak_given else "")
            + f"; precision {result.dtype_source}",
        ),
    ]
    print_rows(rows)
    print_notes(result.warnings, result.assumptions)


def _print_memory(result: MemoryResult, layers: str | None) -> None:
    if result.device_memory_bytes is not None and result.headroom_bytes is not None:
        where = f" of {result.device_memory_bytes / 1e9:g} GB" + (
            f" ({result.gpu})" if result.gpu else ""
        )
        verdict = (
            f"fits, {gb(result.headroom_bytes)} spare"
            if result.fits
            else f"does NOT fit, over by {gb(-result.headroom_bytes)}"
        )
        typer.echo(f"Memory per GPU: {gb(result.total_bytes)}{where}: {verdict}")
    else:
        typer.echo(f"Memory per GPU: {gb(result.total_bytes)}  (give --gpu to check the fit)")
    typer.echo("")
    rows = [(owner, gb(value)) for owner, value in result.owners.items()]
    if result.activations_per_layer_bytes is not None and layers is not None:
        rows[-1] = (
            "activations",
            f"{gb(result.activations_bytes or 0.0)}  "
            f"({gb(result.activations_per_layer_bytes)} per layer x {layers})",
        )
    rows.append(("total", gb(result.total_bytes)))
    print_rows(rows)
    typer.echo(
        f"\nModel states: {result.bytes_per_param:g} B/param x {sci(result.params, 6)} = "
        f"{gb(result.model_states_bytes)} before sharding."
    )
    print_notes(result.warnings, result.assumptions)


def _print_energy(result: EnergyResult) -> None:
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
    print_rows(rows)
    print_notes([], result.assumptions)


def _print_grids(as_json: bool) -> None:
    from trainlens.calculators.energy import DEFAULT_GRID, GRID_PRESETS

    if as_json:
        emit_json(
            {
                "default": DEFAULT_GRID,
                "presets": [as_dict(p) for p in GRID_PRESETS.values()],
            }
        )
        return
    width = max(len(name) for name in GRID_PRESETS)
    for preset in GRID_PRESETS.values():
        default = "  (default)" if preset.name == DEFAULT_GRID else ""
        typer.echo(
            f"{preset.name.ljust(width)}  {preset.g_per_kwh:>6g} gCO2e/kWh  "
            f"{preset.source}{default}"
        )
