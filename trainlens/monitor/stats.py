"""The figures the monitor computes from tensors: norms, entropy, padding, batch size.

Each returns 0-d tensors on the tensors' device (no host sync), or the deferred figures of
trainlens.monitor.records over them; the monitor's writer thread turns a batch of them
into numbers once per flush.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from trainlens.monitor.records import Calc, Ratio, evaluate

try:
    from trainlens.monitor import _entropy as _compiled
except ImportError:  # not built (no C compiler at install): torch's ops take the entropy
    _compiled = None  # type: ignore[assignment]

#: the compiled entropy runs where it is vectorized (x86-64 with AVX2, FMA and F16C); on
#: other CPUs torch's own vectorized ops are faster than its scalar loop
_FAST = bool(_compiled is not None and _compiled.FAST)
_LOGIT_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_MAX_LEADING = 8  # the leading dimensions the lane walks (MAXDIM in _entropy.c)
_MASK_KINDS = {
    torch.bool: 1,
    torch.uint8: 1,
    torch.int32: 2,
    torch.int64: 3,
    torch.float32: 4,
    torch.int8: 5,
}

#: rows of logits per entropy chunk: at most 2**22 values (16 MB in fp32) of temporaries
#: at a time, whatever the vocabulary, instead of a second batch·seq·vocab tensor
_CHUNK_VALUES = 1 << 22


def norms(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of each tensor (fp32), one fused call where torch has it."""
    if not tensors:
        return []
    ts = list(tensors)
    if all(t.dtype == torch.float32 for t in ts):
        return list(torch._foreach_norm(ts))
    # (accumulated in fp32: a bf16 norm keeps 3 significant digits)
    return list(torch._foreach_norm(ts, 2, dtype=torch.float32))


def copies(tensors: list[torch.Tensor], fused: bool = False) -> list[torch.Tensor]:
    """A copy of each tensor (under no_grad: no detach needed). On the CPU one clone each:
    torch's foreach ops have no fused CPU kernel, and a clone is a memcpy where
    ``_foreach_mul(ts, 1.0)`` multiplies (right after a training step of tiny_gpt: 93 µs
    against 129 µs for its 38 tensors, 0.53 ms against 0.65 ms at 826k parameters);
    elsewhere, or ``fused`` (DTensors: one op to shard-propagate, not one per tensor), one
    fused call (one launch on a GPU, not one per tensor)."""
    if fused or not tensors or not tensors[0].is_cpu:
        return list(torch._foreach_mul(tensors, 1.0))
    return [t.clone() for t in tensors]


def global_norm(per_tensor: Sequence[torch.Tensor]) -> torch.Tensor:
    """sqrt(sum of squares) of per-tensor norms, as ``clip_grad_norm_`` combines them."""
    if not per_tensor:
        return torch.zeros(())
    device = per_tensor[0].device
    return torch.stack([n if n.device == device else n.to(device) for n in per_tensor]).norm()


def mean_entropy(logits: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Mean entropy (nats) of softmax(logits) over the positions ``mask`` keeps (the
    monitor itself keeps the deferred pieces until its conversion)."""
    return evaluate(entropy_and_padding(logits, mask)[0])


def entropy_and_padding(
    logits: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[Ratio, Ratio | None]:
    """(mean entropy over the kept positions, padding fraction of ``mask``), deferred.

    Per position, with p = softmax(z): H = logsumexp(z) - sum(p * z), and logsumexp(z) =
    max(z) - log(max(p)) (the largest logit has the largest probability), so one softmax
    and three row reductions give it, in chunks of rows: only chunk-sized temporaries
    exist next to the logits (never a second full-size tensor). A -inf logit (a masked
    token) has p = 0 and adds nothing: its 0 * -inf is a NaN that nansum leaves out.
    What needs the logits is done here; the rest (a log, two subtractions, the masked
    mean, the kept count) is per position and left to the conversion (numpy there).
    Measured right after a training step of tiny_gpt (512 x 96 logits, one thread, cold
    caches): 233 µs, against 441 µs for log_softmax, exp and a dot product (the method
    before) and 308 µs for this one reduced here; then 184 -> 150 µs without reshaping
    the logits and the mask (2026-12-03, same machine). The padding fraction comes from the
    same mask (the count of kept positions the mean needs anyway); it is None when there
    is no mask of the logits' shape.

    Logits in CPU memory go to the compiled lane instead where it is built and vectorized
    (:func:`_entropy_cpu`): the same figure from one pass over them, finished here. On an
    accelerator these ops are launches that cost the host little, and they stay.
    """
    if _FAST:
        got = _entropy_cpu(logits, mask)
        if got is not None:
            return got
    vocab = logits.shape[-1]
    positions = logits.numel() // max(vocab, 1)
    rows = max(1, min(positions, _CHUNK_VALUES // max(vocab, 1)))
    keep = None
    if mask is not None and mask.numel() == positions:
        # a copy: the caller may reuse its mask's memory before the conversion (in its own
        # shape: the conversion flattens it, no reshape op here)
        keep = mask.to(device=logits.device, dtype=torch.float32, copy=True)
    # (a mask of another shape, e.g. of shifted labels, is not used)
    # detached, nothing below is recorded for autograd: one op, where entering and leaving
    # no_grad cost twice that right after a training step of tiny_gpt (12 against 6 µs)
    z = logits.detach()
    if rows >= positions:
        # on the logits' own shape: a reshape is an op too (~15 µs right after a training
        # step of tiny_gpt, for a view), and the conversion flattens
        p = torch.softmax(z, -1, dtype=torch.float32)
        zmax, pmax = z.amax(-1), p.amax(-1)
        pz = p.mul_(z).nansum(-1)  # (in place: p is ours)
    else:
        z = z.reshape(-1, vocab)
        zmax = torch.empty(positions, dtype=z.dtype, device=z.device)
        pmax = torch.empty(positions, dtype=torch.float32, device=z.device)
        pz = torch.empty(positions, dtype=torch.float32, device=z.device)
        for i in range(0, positions, rows):
            c = z[i : i + rows]
            p = torch.softmax(c, -1, dtype=torch.float32)
            torch.amax(c, -1, out=zmax[i : i + rows])
            torch.amax(p, -1, out=pmax[i : i + rows])
            torch.nansum(p.mul_(c), -1, out=pz[i : i + rows])
    if keep is None:
        entropy = Ratio([Calc([zmax, pmax, pz], _entropy_sum)], [float(positions)], leaves=False)
        return entropy, None
    kept = Calc([keep], _sum)
    entropy = Ratio([Calc([zmax, pmax, pz, keep], _entropy_sum)], [kept], leaves=False)
    return entropy, Ratio([kept], [float(positions)], scale=-1.0, offset=1.0, leaves=False)


def _entropy_sum(v: list[Any]) -> float:
    """Sum over positions (weighted by the kept mask, when there is one) of
    max(z) - log(max(p)) - sum(p * z): numpy arrays at the conversion. A position the
    mask leaves out counts for nothing, a NaN there included (as in the compiled lane)."""
    rows = v[0] - np.log(v[1]) - v[2]
    if len(v) <= 3:
        return float(rows.sum())
    w = v[3].ravel()
    rows = rows.ravel()
    kept = w != 0
    return float(np.dot(rows[kept], w[kept]))


def _entropy_cpu(
    logits: torch.Tensor, mask: torch.Tensor | None
) -> tuple[Ratio, Ratio | None] | None:
    """:func:`entropy_and_padding` by the compiled lane (trainlens/monitor/_entropy.c: one
    pass over the logits, eight at a time, no temporaries), worked out here: two floats,
    nothing left to the conversion. None where it does not apply: logits not a plain CPU
    tensor of float32, bfloat16 or float16 with a contiguous last dimension, or a mask of
    the logits' positions on another device, or more leading dimensions than the lane
    walks (8). Inside tiny_gpt's loop, right after each training step (512 x 96 logits,
    with the batch's mask): 60 µs median against 140 µs for torch's ops."""
    if type(logits) is not torch.Tensor or not logits.is_cpu:
        return None  # (a subclass such as a DTensor: its data pointer is not the whole)
    code = _LOGIT_CODES.get(logits.dtype)
    shape = logits.shape
    if code is None or not shape:
        return None
    vocab = shape[-1]
    strides = logits.stride()
    if vocab < 1 or (strides[-1] != 1 and vocab > 1):
        return None
    lead = shape[:-1]
    if len(lead) > _MAX_LEADING:
        return None
    positions = logits.numel() // vocab
    if mask is None or mask.numel() != positions:
        # (a mask of another shape, e.g. of shifted labels, is not used)
        total, _ = _compiled.entropy(logits.data_ptr(), code, lead, strides[:-1], vocab)
        return Ratio([total], [float(positions)]), None
    if type(mask) is not torch.Tensor or not mask.is_cpu:
        return None
    kind = _MASK_KINDS.get(mask.dtype)
    if kind is None:
        mask, kind = mask.to(torch.float32), 4
    if not mask.is_contiguous():
        mask = mask.contiguous()
    total, kept = _compiled.entropy(
        logits.data_ptr(), code, lead, strides[:-1], vocab, mask.data_ptr(), kind
    )
    return (
        Ratio([total], [kept]),
        Ratio([kept], [float(positions)], scale=-1.0, offset=1.0),
    )


def _sum(v: list[Any]) -> float:
    return float(v[0].sum())


def padding_fraction(mask: torch.Tensor) -> Ratio:
    """Share of positions the attention mask marks as padding (mask == 0)."""
    m = mask.detach()
    return Ratio([m.sum(dtype=torch.float32)], [float(m.numel())], scale=-1.0, offset=1.0)


def _first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        for key in ("input_ids", "tokens", "x", "inputs"):
            if isinstance(batch.get(key), torch.Tensor):
                return batch[key]
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            if isinstance(item, torch.Tensor):
                return item
    return None


def batch_size(batch: Any) -> tuple[int | None, int | None]:
    """(tokens, samples) of a batch: its input ids when it holds integer token ids of
    shape (batch, seq), else only samples (the first dimension)."""
    t = _first_tensor(batch)
    if t is None:
        return None, None
    # the shape and the dtype read once (each tensor attribute read from Python costs a
    # few µs right after a training step)
    shape, dtype = t.shape, t.dtype
    if not shape:
        return None, None
    is_ids = not (dtype.is_floating_point or dtype.is_complex) and dtype is not torch.bool
    return (shape[0] * shape[1] if is_ids and len(shape) == 2 else None), shape[0]


def attention_mask_of(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, Mapping) and isinstance(batch.get("attention_mask"), torch.Tensor):
        return batch["attention_mask"]
    return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: /proc/self/statm kept open and read with pread: 2 µs a read, against 21 µs to open,
#: read and close it (measured on the build machine)
_STATM: list[int] = []


def rss_bytes() -> float | None:
    """Resident set size of this process (Linux /proc; None elsewhere)."""
    try:
        if not _STATM:
            _STATM.append(os.open("/proc/self/statm", os.O_RDONLY))
        return float(int(os.pread(_STATM[0], 128, 0).split()[1]) * _PAGE)
    except (OSError, ValueError, IndexError):
        return None


def memory(device: torch.device) -> dict[str, float]:
    """Device memory (CUDA allocated / reserved / peak, bytes) and host RSS."""
    out: dict[str, float] = {}
    if device.type == "cuda" and torch.cuda.is_available():
        out["mem/allocated"] = float(torch.cuda.memory_allocated(device))
        out["mem/reserved"] = float(torch.cuda.memory_reserved(device))
        out["mem/peak"] = float(torch.cuda.max_memory_allocated(device))
    rss = rss_bytes()
    if rss is not None:
        out["mem/rss"] = rss
    return out
