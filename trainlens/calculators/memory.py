"""Training memory per GPU, by owner: weights, gradients, fp32 master copy, optimizer states,
activations.

Model states follow ZeRO (Rajbhandari et al. 2020): mixed-precision Adam keeps 2 bytes of
16-bit weights, 2 of 16-bit gradients and 12 of fp32 master weights, momentum and variance
per parameter (16 B); stage 1 shards the optimizer states (with the master copy) over the
Nd data-parallel ranks, stage 2 also the gradients, stage 3 also the weights. Hugging Face's
accounting keeps fp32 gradients (18 B/param): ``grad_dtype="fp32"``.

Activations follow Korthikanti et al. 2022 (16-bit, per layer): s·b·h·(34 + 5·a·s/h) bytes
without parallelism; tensor parallelism of degree t divides the 24 and the 5·a·s/h parts,
adding sequence parallelism divides all of it; selective recomputation drops the 5·a·s/h
part; full recomputation keeps only each layer's input, 2·s·b·h.
"""

from __future__ import annotations

from trainlens.calculators.flops import RECOMPUTE_MODES
from trainlens.calculators.hardware import GPU, HardwareTable, gpu_row
from trainlens.calculators.units import require_positive
from trainlens.core.dataclass import dataclass, field
from trainlens.core.errors import UsageError

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp32")

OPTIMIZER_BYTES: dict[str, float] = {
    "adam": 8.0,  # fp32 momentum + variance
    "adamw": 8.0,
    "adam8bit": 2.0,  # bitsandbytes 8-bit states (block statistics are negligible)
    "sgd": 0.0,
    "sgd-momentum": 4.0,  # fp32 momentum buffer
    "adafactor": 0.0,  # factored second moment: rows + columns per matrix, no momentum
}
OPTIMIZERS: tuple[str, ...] = tuple(OPTIMIZER_BYTES)

_OPTIMIZER_TEXT = {
    "adam": "Adam: fp32 momentum and variance, 8 B/param",
    "adamw": "AdamW: fp32 momentum and variance, 8 B/param",
    "adam8bit": "8-bit Adam (bitsandbytes): two 8-bit states, 2 B/param",
    "sgd": "SGD without momentum: no optimizer state",
    "sgd-momentum": "SGD with momentum: one fp32 buffer, 4 B/param",
    "adafactor": (
        "Adafactor with its default beta1=None: the factored second moment holds rows + "
        "columns per matrix, counted as 0 B/param (with momentum add 4 B/param)"
    ),
}


@dataclass(frozen=True)
class MemoryResult:
    """Bytes per GPU by owner, their total, and how it compares with the device."""

    params: float
    precision: str
    optimizer: str
    zero_stage: int
    dp: int
    tp: int
    sequence_parallel: bool
    recompute: str
    weights_bytes: float
    gradients_bytes: float
    master_bytes: float
    optimizer_bytes: float
    activations_bytes: float | None  # None when the shapes were not given
    activations_per_layer_bytes: float | None
    total_bytes: float
    bytes_per_param: float  # model states per parameter, before any sharding
    model_states_bytes: float  # model states of the whole model, before any sharding
    gpu: str | None = None
    device_memory_bytes: float | None = None
    fits: bool | None = None
    headroom_bytes: float | None = None  # device memory minus the total; negative: short
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def owners(self) -> dict[str, float]:
        """Bytes per GPU by owner, in the order a person adds them up."""
        out = {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "master weights (fp32)": self.master_bytes,
            "optimizer states": self.optimizer_bytes,
        }
        if self.activations_bytes is not None:
            out["activations"] = self.activations_bytes
        return out


def model_state_bytes_per_param(
    precision: str = "bf16", optimizer: str = "adamw", grad_dtype: str = "half"
) -> dict[str, float]:
    """Bytes per parameter for weights, gradients, master copy and optimizer states.

    bf16/fp16 mixed precision: 16-bit weights (2), 16-bit gradients (2, or 4 with
    ``grad_dtype="fp32"``), fp32 master (4). fp8: fp8 primary weights (1) with fp32 master
    and 16-bit gradients. fp32: 4 + 4, no master copy. Optimizer states are fp32 (8-bit Adam
    aside) whatever the precision.
    """
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}.")
    if optimizer not in OPTIMIZER_BYTES:
        raise UsageError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}.")
    if grad_dtype not in ("half", "fp32"):
        raise UsageError(f"unknown gradient dtype {grad_dtype!r}; choose half or fp32.")
    if precision == "fp32":
        weights, grads, master = 4.0, 4.0, 0.0
    else:
        weights = 1.0 if precision == "fp8" else 2.0
        grads = 4.0 if grad_dtype == "fp32" else 2.0
        master = 4.0
    return {
        "weights": weights,
        "gradients": grads,
        "master": master,
        "optimizer": OPTIMIZER_BYTES[optimizer],
    }


def activation_bytes_per_layer(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    heads: int | None = None,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Korthikanti et al. 2022, 16-bit activations of one transformer layer in bytes."""
    if recompute not in RECOMPUTE_MODES:
        raise UsageError(
            f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE_MODES)}."
        )
    for value, what in (
        (seq_len, "sequence length"),
        (micro_batch, "micro-batch"),
        (hidden, "hidden size"),
        (tp, "tensor-parallel degree"),
    ):
        require_positive(value, what)
    s, b, h, t = float(seq_len), float(micro_batch), float(hidden), float(tp)
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1.0)
    if recompute == "selective":
        return 34.0 * sbh / t if sequence_parallel else sbh * (10.0 + 24.0 / t)
    if heads is None:
        raise UsageError(
            "activations without recomputation need the number of attention heads (--heads)."
        )
    require_positive(heads, "heads")
    scores = 5.0 * heads * s / h
    if sequence_parallel:
        return sbh * (34.0 + scores) / t
    return sbh * (10.0 + 24.0 / t + scores / t)


def _advice(owners: dict[str, float]) -> str:
    largest = max(owners, key=lambda k: owners[k])
    fixes = {
        "weights": "ZeRO stage 3 or tensor parallelism shards the weights",
        "gradients": "ZeRO stage 2 or 3 shards the gradients",
        "master weights (fp32)": "ZeRO stage 1 or more shards the master copy",
        "optimizer states": "ZeRO stage 1 or more shards them; an 8-bit optimizer quarters them",
        "activations": (
            "activation recomputation (selective or full), a smaller micro-batch or "
            "sequence parallelism shrink them"
        ),
    }
    return f"the largest share is {largest} ({owners[largest] / 1e9:.3g} GB): {fixes[largest]}."


def training_memory(
    params: float,
    *,
    precision: str = "bf16",
    optimizer: str = "adamw",
    grad_dtype: str = "half",
    zero_stage: int = 0,
    dp: int = 1,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    micro_batch: int | None = None,
    seq_len: int | None = None,
    layers: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    gpu: str | GPU | None = None,
    device_memory_gb: float | None = None,
    table: HardwareTable | None = None,
) -> MemoryResult:
    """Memory per GPU for training a model of ``params`` parameters.

    Activations are counted when ``micro_batch``, ``seq_len``, ``layers`` and ``hidden`` are
    all given (and ``heads`` without recomputation). The device's memory comes from
    ``device_memory_gb`` or the ``gpu`` row.
    """
    require_positive(params, "params")
    if zero_stage not in (0, 1, 2, 3):
        raise UsageError(f"ZeRO stage must be 0, 1, 2 or 3; got {zero_stage!r}.")
    require_positive(dp, "data-parallel degree")
    require_positive(tp, "tensor-parallel degree")
    if recompute not in RECOMPUTE_MODES:
        raise UsageError(
            f"unknown recomputation {recompute!r}; choose one of {', '.join(RECOMPUTE_MODES)}."
        )
    per_param = model_state_bytes_per_param(precision, optimizer, grad_dtype)
    assumptions: list[str] = []

    row = gpu_row(gpu, table, assumptions)

    # tensor parallelism splits every weight matrix t ways (layer norms and biases, which
    # are replicated, are ignored)
    local = float(params) / tp
    weights = per_param["weights"] * local
    grads = per_param["gradients"] * local
    master = per_param["master"] * local
    optim = per_param["optimizer"] * local
    if zero_stage >= 1:
        master /= dp
        optim /= dp
    if zero_stage >= 2:
        grads /= dp
    if zero_stage >= 3:
        weights /= dp

    bytes_per_param = sum(per_param.values())
    if precision == "fp32":
        assumptions.append("fp32 training: 4 B weights + 4 B gradients, no master copy.")
    elif precision == "fp8":
        assumptions.append(
            "fp8 training: fp8 primary weights (1 B, as Transformer Engine's fp8 model "
            "parameters), 16-bit gradients, fp32 master copy; recipes that keep bf16 weights "
            "and cast per GEMM use the bf16 figures."
        )
    else:
        grad_text = (
            "fp32 gradients (4 B, Hugging Face / PyTorch AMP accounting)"
            if grad_dtype == "fp32"
            else "16-bit gradients (2 B, ZeRO / Megatron accounting)"
        )
        assumptions.append(
            f"Mixed {precision} precision: 16-bit weights (2 B), {grad_text}, fp32 master copy "
            "(4 B)."
        )
    assumptions.append(f"Optimizer: {_OPTIMIZER_TEXT[optimizer]}.")
    assumptions.append(
        f"Model states {bytes_per_param:g} B/param before sharding"
        + (f"; tensor parallelism divides them by {tp}" if tp > 1 else "")
        + (
            f"; ZeRO stage {zero_stage} over {dp} data-parallel ranks shards "
            + {
                1: "the optimizer states and master copy",
                2: "the optimizer states, master copy and gradients",
                3: "weights, gradients, master copy and optimizer states",
            }[zero_stage]
            + "."
            if zero_stage
            else "; no ZeRO sharding (every data-parallel rank holds a full copy)."
        )
    )

    shapes = {
        "--micro-batch": micro_batch,
        "--seq-len": seq_len,
        "--layers": layers,
        "--hidden": hidden,
    }
    activations: float | None = None
    per_layer: float | None = None
    if all(v is not None for v in shapes.values()):
        assert micro_batch is not None and seq_len is not None
        assert layers is not None and hidden is not None
        require_positive(layers, "layers")
        per_layer = activation_bytes_per_layer(
            seq_len,
            micro_batch,
            hidden,
            heads,
            tp=tp,
            sequence_parallel=sequence_parallel,
            recompute=recompute,
        )
        scale = 2.0 if precision == "fp32" else 1.0
        per_layer *= scale
        activations = per_layer * layers
        assumptions.append(
            "Activations per layer from Korthikanti et al. 2022: "
            + {
                "none": "s·b·h·(34 + 5·a·s/h) bytes, the s×s attention scores included "
                "(fused/flash attention never stores them: --recompute selective models it)",
                "selective": "34·s·b·h bytes (attention core recomputed or fused)",
                "full": "2·s·b·h bytes (only each layer's input is kept)",
            }[recompute]
            + (f", tensor parallel {tp}" if tp > 1 else "")
            + (" with sequence parallelism" if sequence_parallel and tp > 1 else "")
            + (", doubled for fp32" if scale != 1.0 else "")
            + "; embeddings, final norm and logits not counted, no pipeline parallelism."
        )
    else:
        given = [k for k, v in shapes.items() if v is not None]
        if given:
            missing = [k for k, v in shapes.items() if v is None]
            raise UsageError(
                f"activations need --micro-batch, --seq-len, --layers and --hidden; "
                f"missing {', '.join(missing)}."
            )
        assumptions.append(
            "Activations not counted: give --micro-batch, --seq-len, --layers, --hidden "
            "(and --heads) to add them."
        )
    assumptions.append(
        "Not counted: CUDA context (~0.3-1 GB), allocator fragmentation, communication "
        "buffers and temporary workspaces."
    )

    total = weights + grads + master + optim + (activations or 0.0)
    device_bytes: float | None = None
    if device_memory_gb is not None:
        require_positive(device_memory_gb, "device memory")
        device_bytes = device_memory_gb * 1e9
    elif row is not None:
        device_bytes = row.memory_bytes
    fits = None if device_bytes is None else total <= device_bytes
    headroom = None if device_bytes is None else device_bytes - total
    if device_bytes is not None:
        assumptions.append(
            f"Device memory {device_bytes / 1e9:g} GB"
            + (f" ({row.name})" if row is not None and device_memory_gb is None else "")
            + " as written on the spec sheet (GB = 1e9 bytes)."
        )

    result_owners = {
        "weights": weights,
        "gradients": grads,
        "master weights (fp32)": master,
        "optimizer states": optim,
    }
    if activations is not None:
        result_owners["activations"] = activations
    warnings: list[str] = []
    if fits is False:
        warnings.append(f"Does not fit: {_advice(result_owners)}")

    return MemoryResult(
        params=float(params),
        precision=precision,
        optimizer=optimizer,
        zero_stage=zero_stage,
        dp=int(dp),
        tp=int(tp),
        sequence_parallel=bool(sequence_parallel),
        recompute=recompute,
        weights_bytes=weights,
        gradients_bytes=grads,
        master_bytes=master,
        optimizer_bytes=optim,
        activations_bytes=activations,
        activations_per_layer_bytes=per_layer,
        total_bytes=total,
        bytes_per_param=bytes_per_param,
        model_states_bytes=bytes_per_param * float(params),
        gpu=row.name if row is not None else None,
        device_memory_bytes=device_bytes,
        fits=fits,
        headroom_bytes=headroom,
        warnings=warnings,
        assumptions=assumptions,
    )
