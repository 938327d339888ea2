"""The figures the monitor computes from tensors: norms, entropy, padding, batch size.

Each returns a 0-d tensor on the tensors' device (no host sync); the monitor turns a
batch of them into numbers once per flush.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

#: rows of logits per entropy chunk: at most 2**22 values (16 MB in fp32) of temporaries
#: at a time, whatever the vocabulary, instead of a second batch·seq·vocab tensor
_CHUNK_VALUES = 1 << 22


def norms(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of each tensor (fp32), one fused call where torch has it."""
    if not tensors:
        return []
    got = torch._foreach_norm(list(tensors))
    return [n if n.dtype == torch.float32 else n.float() for n in got]


def global_norm(per_tensor: Sequence[torch.Tensor]) -> torch.Tensor:
    """sqrt(sum of squares) of per-tensor norms, as ``clip_grad_norm_`` combines them."""
    if not per_tensor:
        return torch.zeros(())
    device = per_tensor[0].device
    return torch.stack([n if n.device == device else n.to(device) for n in per_tensor]).norm()


def mean_entropy(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy (nats) of softmax(logits) over the positions ``mask`` keeps.

    H = -sum(exp(l) * l) with l = log_softmax(z), over chunks of rows, so that only
    chunk-sized temporaries exist next to the logits (never a second full-size tensor).
    Measured on 512 x 96 fp32 logits, one thread: 65 µs, against 93 µs for
    logsumexp - sum(softmax * z), 136 µs for sum(entr(softmax)) and 222 µs for
    torch.distributions.Categorical(...).entropy().
    """
    z = logits.detach()
    vocab = z.shape[-1]
    z = z.reshape(-1, vocab)
    keep = None
    if mask is not None:
        keep = mask.detach().reshape(-1).to(device=z.device, dtype=torch.float32)
        if keep.numel() != z.shape[0]:
            keep = None  # a mask of another shape (e.g. shifted labels) is not used
    rows = max(1, min(z.shape[0], _CHUNK_VALUES // max(vocab, 1)))
    lp, work = _buffers((rows, vocab), z.device)
    with torch.no_grad():
        parts = []
        for i in range(0, z.shape[0], rows):
            chunk = z[i : i + rows]
            n = chunk.shape[0]
            torch.log_softmax(chunk, -1, dtype=torch.float32, out=lp[:n])
            lp[:n].clamp_min_(-1e30)  # a -inf logit (a masked token) adds 0, not 0 * -inf
            torch.exp(lp[:n], out=work[:n])
            parts.append(work[:n].mul_(lp[:n]).sum(-1).neg_())
        h = parts[0] if len(parts) == 1 else torch.cat(parts)
        if keep is None:
            return h.mean()
        return torch.dot(h, keep) / keep.sum().clamp_min(1.0)


#: the entropy's two work buffers, kept between steps rather than allocated per step
#: (measured in tiny_gpt's loop: 204 µs a step with them, 266 µs with fresh temporaries)
_BUFFERS: dict[tuple[torch.device, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _buffers(shape: tuple[int, int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two float32 buffers of at least ``shape`` rows for ``device`` and this vocabulary."""
    got = _BUFFERS.get((device, shape[1]))
    if got is None or got[0].shape[0] < shape[0]:
        if len(_BUFFERS) >= 4:  # several vocabularies in turn: keep the memory bounded
            _BUFFERS.clear()
        lp = torch.empty(shape, dtype=torch.float32, device=device)
        got = (lp, torch.empty_like(lp))
        _BUFFERS[(device, shape[1])] = got
    return got


def padding_fraction(mask: torch.Tensor) -> torch.Tensor:
    """Share of positions the attention mask marks as padding (mask == 0)."""
    m = mask.detach()
    return 1.0 - m.float().mean() if m.numel() else torch.zeros(())


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
    if t is None or t.ndim == 0:
        return None, None
    samples = int(t.shape[0])
    is_ids = not (t.is_floating_point() or t.is_complex()) and t.dtype != torch.bool
    tokens = int(t.numel()) if is_ids and t.ndim == 2 else None
    return tokens, samples


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
