"""Training compute: FLOPs per token, total FLOPs, GPU-hours, Chinchilla-optimal sizes.

Conventions (cited in docs/calculators.md):

* Model FLOPs per token = 6·N + 12·L·H·Q·T (Kaplan et al. 2020; PaLM, Chowdhery et al.
  2022, appendix B): 2 FLOPs per weight per token forward, 4 backward; the attention
  term counts QKᵀ and attention·V for a sequence of T tokens, not halved for causal masks.
* Hardware FLOPs add what activation recomputation runs again (Korthikanti et al. 2022):
  selective recomputation doubles the attention term (their s/3h in place of s/6h); full
  recomputation also re-runs the rest of the forward pass: 8·N + 2·attention.
* N is the non-embedding parameter count: every weight that does a matmul per token.
  Count a (tied) output projection, leave out position embeddings.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Literal

from trainlens.calculators.hardware import GPU, HardwareTable, dense_peak, gpu_row
from trainlens.calculators.units import require_positive
from trainlens.core.dataclass import dataclass
from trainlens.core.errors import UsageError

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")

CHINCHILLA_TOKENS_PER_PARAM = 20.0
"""Hoffmann et al. 2022: compute-optimal training uses ≈ 20 tokens per parameter."""


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE_MODES:
        raise UsageError(
            f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE_MODES)}."
        )


def attention_flops_per_token(layers: int, heads: int, head_dim: int, seq_len: int) -> float:
    """12·L·H·Q·T: attention-score and attention-value FLOPs per token, forward + backward."""
    for value, what in (
        (layers, "layers"),
        (heads, "heads"),
        (head_dim, "head dim"),
        (seq_len, "sequence length"),
    ):
        require_positive(value, what)
    return 12.0 * layers * heads * head_dim * seq_len


def attention_term(
    layers: int | None,
    heads: int | None,
    head_dim: int | None,
    seq_len: int | None,
    hidden: int | None = None,
    assumptions: list[str] | None = None,
) -> float:
    """The attention term when the shapes are known, else 0; half-given is an error.

    Without ``head_dim``, ``hidden`` gives it: Q = h / H, or, with no heads either,
    H·Q = h (12·L·h·T, said in ``assumptions``). ``hidden`` alone (no layers, no sequence
    length) asks for no attention term: ``flops`` also takes it for the per-iteration form.
    """
    from_hidden = False
    if head_dim is None and hidden is not None:
        if heads is not None:
            if hidden % heads:
                raise UsageError("--hidden must be a multiple of --heads.")
            head_dim = hidden // heads
        elif layers is not None or seq_len is not None:
            # the heads' total width is the hidden size, so 12·L·H·Q·T = 12·L·h·T
            heads, head_dim, from_hidden = 1, hidden, True
    given = {
        "--layers": layers,
        "--heads": heads,
        "--head-dim": head_dim,
        "--seq-len": seq_len,
    }
    if all(v is None for v in given.values()):
        return 0.0
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise UsageError(
            f"the attention term needs --layers, --heads, --head-dim and --seq-len; "
            f"missing {', '.join(missing)}."
        )
    assert layers is not None and heads is not None and head_dim is not None
    assert seq_len is not None
    if from_hidden and assumptions is not None:
        assumptions.append("Attention term from --hidden: H·Q = h, so 12·L·h·s per token.")
    return attention_flops_per_token(layers, heads, head_dim, seq_len)


def model_flops_per_token(params: float, attn_flops_per_token: float = 0.0) -> float:
    """6·N + attention term: the FLOPs a training step needs per token, recomputation aside."""
    require_positive(params, "params")
    return 6.0 * params + attn_flops_per_token


def hardware_flops_per_token(
    params: float, attn_flops_per_token: float = 0.0, recompute: str = "none"
) -> float:
    """The FLOPs the device actually runs per token, counting recomputation.

    none: 6N + A; selective: 6N + 2A (the attention core runs again; Korthikanti et al.'s
    s/3h); full: 8N + 2A (the whole forward runs again).
    """
    _check_recompute(recompute)
    require_positive(params, "params")
    if recompute == "none":
        return 6.0 * params + attn_flops_per_token
    if recompute == "selective":
        return 6.0 * params + 2.0 * attn_flops_per_token
    return 8.0 * params + 2.0 * attn_flops_per_token


def korthikanti_flops_per_iteration(
    batch: int,
    layers: int,
    seq_len: int,
    hidden: int,
    vocab: int,
    recompute: str = "none",
) -> float:
    """FLOPs per iteration of a GPT layer stack with its logits (Korthikanti et al. 2022).

    Model FLOPs (recompute="none"): 72·B·L·s·h²·(1 + s/6h + V/12hL). Hardware FLOPs with
    selective recomputation: s/3h in place of s/6h (both from the paper). For full
    recomputation trainlens extends the same accounting (8·N + 2·attention per token, the
    logits not recomputed): 96·B·L·s·h²·(1 + s/4h + V/16hL).
    """
    _check_recompute(recompute)
    for value, what in (
        (batch, "batch"),
        (layers, "layers"),
        (seq_len, "sequence length"),
        (hidden, "hidden size"),
        (vocab, "vocabulary size"),
    ):
        require_positive(value, what)
    b, n_layers, s, h, v = (float(x) for x in (batch, layers, seq_len, hidden, vocab))
    base = b * n_layers * s * h * h
    if recompute == "none":
        return 72.0 * base * (1 + s / (6 * h) + v / (12 * h * n_layers))
    if recompute == "selective":
        return 72.0 * base * (1 + s / (3 * h) + v / (12 * h * n_layers))
    return 96.0 * base * (1 + s / (4 * h) + v / (16 * h * n_layers))


@dataclass(frozen=True)
class IterationFlops:
    """Model and hardware FLOPs of one iteration (Korthikanti et al. 2022)."""

    batch: int
    layers: int
    seq_len: int
    hidden: int
    vocab: int
    recompute: str
    model_flops: float
    hardware_flops: float
    model_flops_per_token: float
    assumptions: list[str] = field(default_factory=list)


_ITERATION_RECOMPUTE_TEXT = {
    "none": "No recomputation: hardware FLOPs = model FLOPs.",
    "selective": "Selective recomputation: s/3h in place of s/6h (the paper).",
    "full": "Full recomputation: 96·B·L·s·h²·(1 + s/4h + V/16hL) (trainlens: "
    "the layers' forward runs twice, the logits once).",
}


def flops_per_iteration(
    batch: int | None,
    layers: int | None,
    seq_len: int | None,
    hidden: int | None,
    vocab: int | None,
    recompute: str = "none",
) -> IterationFlops:
    """:func:`korthikanti_flops_per_iteration` as model and hardware FLOPs, with the
    assumptions behind them; a missing shape is a UsageError that names it."""
    shapes = {"--batch": batch, "--layers": layers, "--seq-len": seq_len, "--hidden": hidden}
    shapes["--vocab"] = vocab
    missing = [k for k, v in shapes.items() if v is None]
    if missing:
        raise UsageError(
            "FLOPs per iteration need --batch, --layers, --seq-len, --hidden and --vocab; "
            f"missing {', '.join(missing)}."
        )
    assert batch is not None and layers is not None and seq_len is not None
    assert hidden is not None and vocab is not None
    _check_recompute(recompute)
    model = korthikanti_flops_per_iteration(batch, layers, seq_len, hidden, vocab, "none")
    hardware = korthikanti_flops_per_iteration(batch, layers, seq_len, hidden, vocab, recompute)
    return IterationFlops(
        batch=batch,
        layers=layers,
        seq_len=seq_len,
        hidden=hidden,
        vocab=vocab,
        recompute=recompute,
        model_flops=model,
        hardware_flops=hardware,
        model_flops_per_token=model / (batch * seq_len),
        assumptions=[
            "Model FLOPs per iteration 72·B·L·s·h²·(1 + s/6h + V/12hL) (Korthikanti et "
            "al. 2022; includes the logits, assumes a 4h MLP).",
            _ITERATION_RECOMPUTE_TEXT[recompute],
        ],
    )


@dataclass(frozen=True)
class ComputeResult:
    """Total training compute and what it costs in device time."""

    params: float
    tokens: float
    flops: float
    flops_per_token: float
    attention_flops_per_token: float
    tokens_per_param: float
    chinchilla_tokens: float
    gpu: str | None = None
    dtype: str | None = None
    peak_flops: float | None = None  # per device, dense
    mfu: float | None = None  # the utilization assumed for the time estimate
    gpu_hours: float | None = None
    gpu_days: float | None = None
    n_gpus: int | None = None
    wall_days: float | None = None
    assumptions: list[str] = field(default_factory=list)


def training_compute(
    params: float,
    tokens: float | None = None,
    *,
    attn_flops_per_token: float = 0.0,
    peak_flops: float | None = None,
    mfu: float = 0.4,
    n_gpus: int | None = None,
    gpu: str | None = None,
    dtype: str | None = None,
) -> ComputeResult:
    """6·N·D (+ attention·D) FLOPs, and GPU-hours at ``mfu`` of ``peak_flops`` when given.

    Without ``tokens`` the Chinchilla compute-optimal D = 20·N is used (and said so).
    """
    require_positive(params, "params")
    assumptions = [
        "Compute = 6·N·D: 2 FLOPs per parameter per token forward, 4 backward "
        "(Kaplan et al. 2020); N counts non-embedding parameters.",
    ]
    if tokens is None:
        tokens = CHINCHILLA_TOKENS_PER_PARAM * params
        assumptions.append(
            "Tokens not given: using the Chinchilla compute-optimal D = 20·N "
            "(Hoffmann et al. 2022)."
        )
    require_positive(tokens, "tokens")
    if attn_flops_per_token:
        assumptions.append(
            "Attention term 12·L·H·Q·T per token added (PaLM appendix B), "
            "not halved for causal masking."
        )
    else:
        assumptions.append(
            "Attention FLOPs left out (give --layers/--heads/--head-dim/--seq-len to add "
            "12·L·H·Q·T per token); they matter when the sequence is long next to the width."
        )
    per_token = model_flops_per_token(params, attn_flops_per_token)
    total = per_token * tokens
    gpu_hours = gpu_days = wall_days = None
    if peak_flops is not None:
        require_positive(peak_flops, "peak")
        require_positive(mfu, "MFU")
        if mfu > 1:
            raise UsageError(f"MFU must be at most 100 %; got {mfu:g}.")
        gpu_hours = total / (peak_flops * mfu) / 3600.0
        gpu_days = gpu_hours / 24.0
        assumptions.append(
            f"Device time at {100 * mfu:.3g} % MFU of the dense peak {peak_flops / 1e12:g} TFLOP/s"
            + (f" ({gpu}, {dtype})" if gpu else "")
            + "; well-tuned large runs reach 35-55 % (PaLM 46.2 %)."
        )
        if n_gpus is not None:
            require_positive(n_gpus, "GPUs")
            wall_days = gpu_days / n_gpus
            assumptions.append(
                f"Wall time assumes all {n_gpus} GPUs busy for the whole run "
                "(no restarts, evaluation or queueing)."
            )
    return ComputeResult(
        params=float(params),
        tokens=float(tokens),
        flops=total,
        flops_per_token=per_token,
        attention_flops_per_token=float(attn_flops_per_token),
        tokens_per_param=float(tokens) / float(params),
        chinchilla_tokens=CHINCHILLA_TOKENS_PER_PARAM * float(params),
        gpu=gpu,
        dtype=dtype,
        peak_flops=peak_flops,
        mfu=mfu if peak_flops is not None else None,
        gpu_hours=gpu_hours,
        gpu_days=gpu_days,
        n_gpus=n_gpus,
        wall_days=wall_days,
        assumptions=assumptions,
    )


def model_training_compute(
    params: float,
    tokens: float | None = None,
    *,
    layers: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    seq_len: int | None = None,
    hidden: int | None = None,
    gpu: str | GPU | None = None,
    dtype: str = "bf16",
    peak_flops: float | None = None,
    mfu: float = 0.4,
    n_gpus: int | None = None,
    table: HardwareTable | None = None,
) -> ComputeResult:
    """:func:`training_compute` of a model given by its shapes on a named GPU: what
    ``trainlens flops --params`` computes. The attention term comes from the shapes
    (:func:`attention_term`), the peak from ``peak_flops`` or the ``gpu``'s dense ``dtype``
    rate; the assumptions of both come first in the result's."""
    notes: list[str] = []
    attn = attention_term(layers, heads, head_dim, seq_len, hidden, notes)
    row = gpu_row(gpu, table, notes)
    result = training_compute(
        params,
        tokens,
        attn_flops_per_token=attn,
        peak_flops=dense_peak(row, dtype, peak_flops),
        mfu=mfu,
        n_gpus=n_gpus,
        gpu=None if row is None else row.name,
        dtype=dtype,
    )
    return replace(result, assumptions=notes + result.assumptions)


@dataclass(frozen=True)
class ChinchillaResult:
    """A compute-optimal model size and token count for a budget (C = 6·N·D, D = 20·N)."""

    compute: float
    params: float
    tokens: float
    tokens_per_param: float = CHINCHILLA_TOKENS_PER_PARAM
    assumptions: list[str] = field(default_factory=list)


def chinchilla_optimal(
    *,
    params: float | None = None,
    compute: float | None = None,
    tokens_per_param: float = CHINCHILLA_TOKENS_PER_PARAM,
) -> ChinchillaResult:
    """Compute-optimal (N, D) for a parameter count or a FLOP budget.

    From N: D = 20·N, C = 6·N·D. From C: C = 6·N·20·N, so N = √(C/120), D = 20·N.
    """
    if (params is None) == (compute is None):
        raise UsageError("give exactly one of params or a compute budget.")
    require_positive(tokens_per_param, "tokens per parameter")
    if params is not None:
        require_positive(params, "params")
        n = float(params)
    else:
        assert compute is not None
        require_positive(compute, "compute budget")
        n = math.sqrt(float(compute) / (6.0 * tokens_per_param))
    d = tokens_per_param * n
    return ChinchillaResult(
        compute=6.0 * n * d,
        params=n,
        tokens=d,
        tokens_per_param=tokens_per_param,
        assumptions=[
            f"Compute-optimal D ≈ {tokens_per_param:g}·N (Hoffmann et al. 2022; their table "
            "runs 20-21.6 tokens per parameter) and C = 6·N·D.",
            "Optimal for the training loss at a fixed budget, not for inference cost: "
            "models served a lot are usually trained on many more tokens.",
        ],
    )
