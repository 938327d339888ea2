"""Seeing the pre-clip gradient norm wherever the user clips.

``torch.nn.utils.clip_grad_norm_`` computes the total norm and then calls
``torch.nn.utils.clip_grad._clip_grads_with_norm_`` through its module's globals. Wrapping
that one function (once per process) shows the monitor the norm ``clip_grad_norm_``
returns and the ``max_norm`` it clipped to, however the user imported ``clip_grad_norm_``
(``from torch.nn.utils import clip_grad_norm_`` before the monitor existed included),
and inside HF Accelerate and Lightning, which call it too. No extra norm is computed.
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trainlens.monitor.loop import Monitor

#: monitors told about every clip (weak: a monitor that is dropped stops listening)
ACTIVE: weakref.WeakSet[Monitor] = weakref.WeakSet()


def install() -> None:
    import torch.nn.utils as utils
    import torch.nn.utils.clip_grad as cg

    if getattr(cg._clip_grads_with_norm_, "_trainlens", False):
        return
    original = cg._clip_grads_with_norm_

    @functools.wraps(original)
    def clip_with_norm(
        parameters: Any, max_norm: float, total_norm: torch.Tensor, foreach: bool | None = None
    ) -> None:
        if ACTIVE:
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            for mon in list(ACTIVE):
                mon._saw_clip(params, float(max_norm), total_norm)
            parameters = params
        return original(parameters, max_norm, total_norm, foreach)

    clip_with_norm._trainlens = True  # type: ignore[attr-defined]
    cg._clip_grads_with_norm_ = clip_with_norm
    # the public alias (torch.nn.utils.clip_grads_with_norm_) for loops that call
    # get_total_norm and clip_grads_with_norm_ themselves, looked up at call time
    utils.clip_grads_with_norm_ = clip_with_norm
