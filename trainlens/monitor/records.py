"""The monitor's records as the hot path leaves them, and their conversion to numbers.

A record is a dict of figures in the form cheapest to make on the training thread: a
Python float, a 0-d tensor, or a deferred figure whose last arithmetic (a division, a
sum of squares, a clip factor, the entropy's per-position reduction) is left to the
conversion: a :class:`Ratio` or a :class:`Calc` over leaves (floats, 0-d tensors, 1-D
tensors). On the CPU each tensor op right after a training step costs 10-50 µs, cold, so
the hot path is built for op count.

The conversion runs on the monitor's writer thread (trainlens.monitor.writer), once per
flush, with as few torch calls as it can: one ``stack`` and one transfer of every 0-d
tensor of the batch per device, the 1-D ones as numpy arrays (one ``cat`` and one
transfer per device off the CPU), and the arithmetic in Python and numpy. Each torch
call is a point where the writer thread gives up the GIL and has to win it back from
the training thread (and a torch op of a thread torch did not start can use an OpenMP
team of its own: a 512-value ``log`` took 10 ms there on the 2-core build machine), so
their count is what the writer's cost, and its interference with the training thread,
comes down to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import numpy as np
import torch


class Ratio(NamedTuple):
    """``offset + scale * sum(nums) / sum(dens)``, worked out at the conversion.

    The hot path then spends no tensor op on a division, a sign or a micro-batch sum: in
    tiny_gpt's loop each op right after a training step costs 10-50 µs (cold caches and
    dispatch), against 1-8 µs for the same op in a hot loop (measured op by op). ``nums``
    and ``dens`` hold floats, 0-d tensors or :class:`Calc` figures.
    """

    nums: list[Any]
    dens: list[Any]
    scale: float = 1.0
    offset: float = 0.0
    leaves: bool = True  # nums and dens hold no Calc (the conversion's fast path)

    def plus(self, other: Ratio) -> Ratio:
        """Both together: micro-batches pooled by their own weights (kept positions)."""
        return self._replace(
            nums=self.nums + other.nums,
            dens=self.dens + other.dens,
            leaves=self.leaves and other.leaves,
        )


class Calc(NamedTuple):
    """A figure worked out at the conversion: ``fn(inputs)``, each input as a float (a
    float, a 0-d tensor, a :class:`Calc` or a :class:`Ratio`) or, for a 1-D tensor, a
    float64 numpy array."""

    inputs: list[Any]
    fn: Callable[[list[Any]], float]
    leaves: bool = True  # the inputs are floats and tensors only (no Calc, no Ratio)


class Calcs(NamedTuple):
    """Several figures worked out at the conversion: ``fn(inputs)`` (as for
    :class:`Calc`) is a dict of ``name: value`` merged into the row (the record's key
    for it names nothing)."""

    inputs: list[Any]
    fn: Callable[[list[Any]], dict[str, float]]
    leaves: bool = True


Scalar = float | torch.Tensor
Value = Scalar | Calc | Calcs | Ratio
#: key prefix of a :class:`Calcs` entry in a record (a key no figure has)
CALCS = "\0calcs:"


def nonfinite(rec: Mapping[str, Value]) -> bool:
    """The record holds a NaN or an infinity the host can see without waiting for a
    device: its Python floats and its 0-d CPU tensors (a read of CPU memory, ~0.4 us each;
    stacking them first costs 10 us). A value on an accelerator is left to the next
    flush: reading it here would be a host sync per step (with ``on_finding`` /
    ``stop_on`` every record is written at once)."""
    for value in rec.values():
        if type(value) is float:
            if not math.isfinite(value):
                return True
        elif (
            isinstance(value, torch.Tensor)
            and value.ndim == 0
            and value.is_cpu
            and not math.isfinite(value.item())
        ):
            return True
    return False


def pooled(values: list[Any]) -> Value:
    """One step's figure from its micro-batches' values: ratios pooled by their weights,
    other values averaged (one value, the common case, costs nothing; tensors are
    averaged here, so that the non-finite check sees the mean)."""
    if len(values) == 1:
        return cast(Value, values[0])
    if all(isinstance(v, Ratio) for v in values):
        ratios = cast(list[Ratio], values)
        out = ratios[0]
        for r in ratios[1:]:
            out = out.plus(r)
        return out
    if all(type(v) is float for v in values):
        return sum(cast(list[float], values)) / len(values)
    if all(isinstance(v, torch.Tensor) for v in values):
        return torch.stack(values).float().mean()
    return Calc(list(values), _mean, leaves=False)  # (a step mixing ratios and values: rare)


def _mean(v: list[Any]) -> float:
    return sum(v) / len(v)


# ---- the conversion (the writer thread) ----------------------------------------------


def to_numbers(records: list[dict[str, Value]]) -> list[dict[str, Any]]:
    """The records with every tensor replaced by its float and every deferred figure
    worked out, with one stack and one transfer per device for the whole batch."""
    flat: list[Any] = []  # every leaf the records hold, in order
    for rec in records:
        for value in rec.values():
            if type(value) is float or isinstance(value, torch.Tensor):
                flat.append(value)
            else:
                _collect(value, flat)
    vals = _leaf_values(flat)
    at = [0]  # where the next leaf's value is in vals
    rows: list[dict[str, Any]] = []
    for rec in records:
        row: dict[str, Any] = {}
        for key, value in rec.items():
            if type(value) is float or isinstance(value, torch.Tensor):
                row[key] = vals[at[0]]
                at[0] += 1
            elif isinstance(value, Calcs):
                row.update(value.fn(_inputs(value.inputs, value.leaves, vals, at)))
            else:
                row[key] = _build(value, vals, at)
        row["step"] = int(row["step"])
        rows.append(row)
    return rows


def evaluate(value: Value) -> float:
    """One figure as a float (outside the monitor: tests, helpers)."""
    return float(to_numbers([{"step": 0.0, "v": value}])[0]["v"])


def _collect(node: Any, flat: list[Any]) -> None:
    parts = (node.nums, node.dens) if isinstance(node, Ratio) else (node.inputs,)
    for part in parts:
        if node.leaves:
            flat.extend(part)
            continue
        for x in part:
            if isinstance(x, (Calc, Calcs, Ratio)):
                _collect(x, flat)
            else:
                flat.append(x)


def _inputs(inputs: list[Any], leaves: bool, vals: list[Any], at: list[int]) -> list[Any]:
    """The values of ``inputs`` (leaves or nodes), consumed from ``vals`` at ``at``."""
    if leaves:  # the common case: one slice
        i = at[0]
        at[0] = i + len(inputs)
        return vals[i : at[0]]
    return [_build(x, vals, at) for x in inputs]


def _build(node: Any, vals: list[Any], at: list[int]) -> Any:
    if isinstance(node, Calc):
        return node.fn(_inputs(node.inputs, node.leaves, vals, at))
    if isinstance(node, Ratio):
        nums = _inputs(node.nums, node.leaves, vals, at)
        den = sum(_inputs(node.dens, node.leaves, vals, at))
        return node.offset + node.scale * sum(nums) / den if den else math.nan
    i = at[0]
    at[0] = i + 1
    return vals[i]


#: values per torch call of the conversion at most: under ATen's grain size (32768) a
#: CPU op runs serially, so the writer thread never starts an OpenMP team of its own
_CALL_VALUES = 16384


def _leaf_values(flat: Sequence[Any]) -> list[Any]:
    """Each leaf as a float (a 1-D tensor as a float64 numpy array): one stack and one
    transfer of the 0-d tensors per device; the 1-D ones as numpy views on the CPU
    (no torch op at all), or one cat and one copy per device elsewhere. A tensor met
    twice (the kept mask of the entropy and of the padding) is converted once."""
    out: list[Any] = list(flat)  # (floats stay as they are)
    cpu: list[int] = []  # the 0-d CPU tensors, the common case
    scalars: dict[torch.device, list[int]] = {torch.device("cpu"): cpu}
    vectors: dict[torch.device, dict[int, list[int]]] = {}  # by id: where each one is
    for i, item in enumerate(flat):
        if type(item) is float:
            continue
        if not isinstance(item, torch.Tensor):
            out[i] = float(item)
        elif item.ndim == 0:
            (cpu if item.is_cpu else scalars.setdefault(item.device, [])).append(i)
        else:
            vectors.setdefault(item.device, {}).setdefault(id(item), []).append(i)
    for idx in scalars.values():
        for k in range(0, len(idx), _CALL_VALUES):  # (none when idx is empty)
            part = idx[k : k + _CALL_VALUES]
            got = torch.stack([flat[i] for i in part]).double().tolist()
            for i, v in zip(part, got, strict=True):
                out[i] = v
    for device, where in vectors.items():
        ts = [flat[places[0]] for places in where.values()]
        if device.type == "cpu":
            arrays = [_array(t) for t in ts]
        else:  # one cat on the device and one copy
            whole = _array(torch.cat([t.reshape(-1) for t in ts]).cpu())
            arrays = np.split(whole, np.cumsum([t.numel() for t in ts])[:-1])
        for places, a in zip(where.values(), arrays, strict=True):
            for i in places:
                out[i] = a
    return out


def _array(t: torch.Tensor) -> np.ndarray:
    if t.dtype not in (torch.float32, torch.float64):
        t = t.float()  # (bf16 has no numpy type)
    return t.numpy().astype(np.float64)


# ---- deferred figures of the optimizer step ------------------------------------------


def grad_norms(
    keys: list[str], with_grad: list[bool], norms: torch.Tensor, clip: tuple[Any, float] | None
) -> Calcs:
    """``grad_norm/<name>`` of every tensor (``keys``): ``norms`` (1-D, one per tensor
    with a gradient, ``with_grad`` saying which), exactly 0 for the others; divided by
    the clip factor when the grads were clipped already (``clip_grad_norm_`` scaled all
    by one factor: ``clip`` is its total norm and ``max_norm``)."""
    inputs = [norms] if clip is None else [norms, clip[0]]
    max_norm = 0.0 if clip is None else clip[1]
    every = all(with_grad)

    def fn(v: list[Any]) -> dict[str, float]:
        per = v[0]
        if clip is not None:
            per = per / min(max_norm / (v[1] + 1e-6), 1.0)
        got = per.tolist()
        if every:
            return dict(zip(keys, got, strict=True))
        it = iter(got)
        return {k: next(it) if g else 0.0 for k, g in zip(keys, with_grad, strict=True)}

    return Calcs(inputs, fn)


def update_ratios(keys: list[str], norms: torch.Tensor) -> Calcs:
    """``update_ratio`` (‖ΔW‖ / ‖W‖ over every tensor) and ``update_ratio/<name>`` (``keys``)
    from the per-tensor norms of the update and then of the weights after it (1-D)."""
    n = len(keys)

    def fn(v: list[Any]) -> dict[str, float]:
        d, w = v[0][:n], v[0][n:]
        out = {"update_ratio": float(np.sqrt(d @ d) / max(np.sqrt(w @ w), 1e-30))}
        out.update(zip(keys, (d / np.maximum(w, 1e-30)).tolist(), strict=True))
        return out

    return Calcs([norms], fn)


def make_whole(records: list[dict[str, Value]]) -> None:
    """Each DTensor the records hold (FSDP2's sharded params and grads, and their norms)
    replaced by its whole value: a collective every rank makes here in the same order, on
    the training thread (each rank holds records of the same shape and flushes at the
    same steps)."""
    for rec in records:
        for key, value in rec.items():
            rec[key] = _whole(value)


def _whole(node: Any) -> Any:
    if isinstance(node, (Calc, Calcs)):
        return node._replace(inputs=[_whole(x) for x in node.inputs])
    if isinstance(node, Ratio):
        return node._replace(
            nums=[_whole(x) for x in node.nums], dens=[_whole(x) for x in node.dens]
        )
    if isinstance(node, torch.Tensor) and hasattr(node, "full_tensor"):
        return node.full_tensor()
    return node
