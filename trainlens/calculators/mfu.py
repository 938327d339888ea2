"""Model and hardware FLOPs utilization (MFU / HFU).

MFU = model FLOPs per token × tokens/s per device ÷ the device's dense peak (PaLM,
Chowdhery et al. 2022, appendix B). HFU counts the FLOPs activation recomputation runs
again (Korthikanti et al. 2022), so HFU ≥ MFU. See :mod:`trainlens.calculators.flops` for
the FLOP counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainlens.calculators.flops import (
    RECOMPUTE_MODES,
    attention_term,
    hardware_flops_per_token,
    model_flops_per_token,
)
from trainlens.calculators.hardware import GPU, HardwareTable, dense_peak, gpu_row
from trainlens.calculators.units import format_number, require_positive
from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

LOW_MFU = 0.20
"""Below this, the result explains what usually costs the throughput."""

LOW_MFU_CAUSES = (
    "the input pipeline (the GPU waits for data), micro-batches too small to fill the "
    "device, unfused kernels (eager attention, no torch.compile or fused optimizer), or "
    "communication that is not overlapped with compute"
)

#: the best MFU published for large jobs, the bar a figure near 100 % is set against
#: (PaLM 540B: 46.2 %, Chowdhery et al. 2022, table 3; MegaScale 175B on 12,288 GPUs:
#: 55.2 %, Jiang et al. 2024, NSDI, abstract)
BEST_PUBLISHED = "46-55 %"

WHY_IMPOSSIBLE = (
    "a step also runs memory-bound work (norms, softmax, the optimizer) and waits on data "
    "and communication, so no run reaches the dense peak (the best published large runs "
    f"reach {BEST_PUBLISHED})"
)


def is_impossible(fraction: float) -> bool:
    """Whether an MFU (or HFU) cannot be true: it prints as 100.0 % or more. The one rule
    behind ``trainlens mfu`` and analyze's summary."""
    return round(100.0 * fraction, 1) >= 100.0


def peak_words(gpu: str | None, dtype: str, peak_flops: float, dtype_source: str) -> str:
    """The peak a figure was computed against, and where its precision came from:
    ``H100 SXM dense fp32 66.9 TFLOP/s; precision from --dtype``."""
    device = f"{gpu} " if gpu else ""
    return f"{device}dense {dtype} {peak_flops / 1e12:g} TFLOP/s; precision {dtype_source}"


def impossible_message(fraction: float, what: str, checks: str, peak: str) -> str:
    """An MFU/HFU that cannot be true: the figure, why not, what to check, the peak used."""
    return (
        f"{what} {100.0 * fraction:.1f} % is impossible: {WHY_IMPOSSIBLE}. Check {checks} "
        f"(peak used: {peak})."
    )


@dataclass(frozen=True)
class MFUResult:
    """MFU and HFU with the numbers that produced them. Fractions, not percentages."""

    mfu: float
    hfu: float
    params: float
    tokens_per_sec: float  # the whole job
    tokens_per_sec_per_gpu: float
    n_gpus: int
    model_flops_per_token: float
    hardware_flops_per_token: float
    attention_flops_per_token: float
    achieved_flops_per_gpu: float  # model FLOP/s per device
    peak_flops: float  # dense, per device
    dtype: str
    gpu: str | None
    recompute: str
    dtype_source: str = "as given"  # "from --dtype", "bf16 by default, ...", ...
    impossible: bool = False  # MFU or HFU at or above 100 % (is_impossible)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


def _peak_for(
    gpu: str | GPU | None,
    dtype: str,
    peak: float | None,
    table: HardwareTable | None,
    assumptions: list[str],
) -> tuple[float, GPU | None]:
    row = gpu_row(gpu, table, assumptions)
    value = dense_peak(row, dtype, peak)
    if value is None:
        raise UsageError("give a GPU (--gpu) or a peak (--peak-tflops) to compute MFU.")
    if peak is not None:
        assumptions.append(
            f"Peak: {peak / 1e12:g} TFLOP/s per device as given (taken as a dense {dtype} rate; "
            "a sparse headline figure would halve the MFU)."
        )
    else:
        assert row is not None
        assumptions.append(
            f"Peak: {value / 1e12:g} TFLOP/s per device, the dense {dtype} rate of {row.name} "
            "(vendors' headline tensor figures are 2:4-sparse, twice the dense rate)."
        )
    return value, row


def mfu(
    params: float,
    tokens_per_sec: float,
    peak: float | None = None,
    *,
    gpu: str | GPU | None = None,
    dtype: str = "bf16",
    n_gpus: int = 1,
    layers: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    seq_len: int | None = None,
    attn_flops_per_token: float | None = None,
    recompute: str = "none",
    table: HardwareTable | None = None,
    dtype_source: str = "as given",
) -> MFUResult:
    """MFU (and HFU) of a job running ``tokens_per_sec`` over ``n_gpus`` devices.

    ``peak`` is the dense FLOP/s of one device; when omitted it comes from ``gpu``'s row for
    ``dtype``. The attention term comes from ``layers``/``heads``/``head_dim``/``seq_len``
    (all four) or directly from ``attn_flops_per_token``. ``dtype_source`` says where the
    precision came from (``from --dtype``, ``bf16 by default``); the result's words name it.
    """
    require_positive(params, "params")
    require_positive(tokens_per_sec, "tokens/s")
    require_positive(n_gpus, "GPUs")
    if recompute not in RECOMPUTE_MODES:
        raise UsageError(
            f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE_MODES)}."
        )
    assumptions: list[str] = []
    peak_flops, row = _peak_for(gpu, dtype, peak, table, assumptions)

    if attn_flops_per_token is None:
        attn = attention_term(layers, heads, head_dim, seq_len)
    else:
        attn = float(attn_flops_per_token)
    model_fpt = model_flops_per_token(params, attn)
    hardware_fpt = hardware_flops_per_token(params, attn, recompute)
    per_gpu = tokens_per_sec / n_gpus
    achieved = model_fpt * per_gpu
    value = achieved / peak_flops
    hfu = hardware_fpt * per_gpu / peak_flops

    assumptions.append(
        f"Model FLOPs per token = 6·N with N = {format_number(params, 6)} non-embedding parameters "
        "(2 FLOPs per weight forward, 4 backward)"
        + (
            f" + {format_number(attn, 6)} for attention (12·L·H·Q·T, PaLM appendix B)."
            if attn
            else "; attention FLOPs not included (give --layers, --heads, --head-dim and "
            "--seq-len to add 12·L·H·Q·T)."
        )
    )
    assumptions.append(
        f"{tokens_per_sec:,.6g} tokens/s is the whole job's, split evenly over "
        f"{n_gpus} device{'s' if n_gpus != 1 else ''}."
    )
    if recompute == "none":
        assumptions.append("No activation recomputation: HFU = MFU.")
    elif recompute == "selective":
        assumptions.append(
            "Selective recomputation: HFU counts the attention term twice "
            "(Korthikanti et al. 2022: s/3h in place of s/6h)"
            + ("." if attn else "; with no attention term given, HFU = MFU.")
        )
    else:
        assumptions.append(
            "Full recomputation: HFU counts 8·N (the forward pass runs twice) plus the "
            "attention term twice."
        )

    warnings: list[str] = []
    if peak is None:
        peak_text = peak_words(row.name if row else None, dtype, peak_flops, dtype_source)
        device = "the device and --dtype"
    else:
        peak_text = f"{peak_flops / 1e12:g} TFLOP/s as given, taken as dense {dtype}"
        device = "the peak given (a dense rate, not the sparse headline)"
    impossible = is_impossible(value) or is_impossible(hfu)
    if is_impossible(value):
        warnings.append(
            impossible_message(
                value,
                "MFU",
                f"{device}, that N leaves out embeddings, and that --gpus counts every device "
                "behind this tokens/s",
                peak_text,
            )
        )
    elif is_impossible(hfu):
        warnings.append(
            impossible_message(hfu, "HFU", "the recomputation mode and the peak", peak_text)
        )
    elif value < LOW_MFU:
        warnings.append(
            f"MFU below {100 * LOW_MFU:g} % usually comes from {LOW_MFU_CAUSES}; also check that "
            "tokens/s is the whole job's rather than one device's."
        )

    return MFUResult(
        mfu=value,
        hfu=hfu,
        params=float(params),
        tokens_per_sec=float(tokens_per_sec),
        tokens_per_sec_per_gpu=per_gpu,
        n_gpus=int(n_gpus),
        model_flops_per_token=model_fpt,
        hardware_flops_per_token=hardware_fpt,
        attention_flops_per_token=attn,
        achieved_flops_per_gpu=achieved,
        peak_flops=peak_flops,
        dtype=dtype,
        gpu=row.name if row is not None else None,
        recompute=recompute,
        dtype_source=dtype_source,
        impossible=impossible,
        warnings=warnings,
        assumptions=assumptions,
    )


def mfu_series(
    tokens_per_sec: ArrayLike,
    params: float,
    peak_flops: float,
    n_gpus: int = 1,
    attn_flops_per_token: float = 0.0,
) -> np.ndarray:
    """MFU per logged point: (6·N + attention) × tokens/s ÷ (peak × n_gpus), vectorized.

    ``tokens_per_sec`` is the whole job's rate; NaN stays NaN.
    """
    import numpy as np

    require_positive(params, "params")
    require_positive(peak_flops, "peak")
    require_positive(n_gpus, "GPUs")
    tps = np.asarray(tokens_per_sec, dtype=np.float64)
    scale = model_flops_per_token(params, attn_flops_per_token) / (peak_flops * n_gpus)
    result: np.ndarray = tps * scale
    return result
