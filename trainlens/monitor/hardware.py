"""What the monitor knows about where it runs: device, GPU model, dtype, world size, and
the figures that follow from them (memory, loss scale, MFU through trainlens.calculators)."""

from __future__ import annotations

from typing import Any

import torch

from trainlens.core.dataclass import dataclass
from trainlens.monitor import stats


def _dist() -> tuple[int, int]:
    """(rank, world size) of an initialised torch.distributed job, else (0, 1)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class Hardware:
    device: torch.device
    dtype: str
    n_params: int
    gpu: str | None
    rank: int
    world_size: int
    scaler: Any = None
    peak_flops: float | None = None  # dense peak of the GPU at dtype, when known
    mfu_note: str | None = None

    @classmethod
    def detect(
        cls,
        model: torch.nn.Module,
        *,
        scaler: Any = None,
        gpu: str | None = None,
        dtype: str | None = None,
    ) -> Hardware:
        params = list(model.parameters())
        device = params[0].device if params else torch.device("cpu")
        if dtype is None:
            dtype = str(params[0].dtype).removeprefix("torch.") if params else "float32"
            if scaler is not None and getattr(scaler, "is_enabled", lambda: False)():
                dtype = "float16"  # a GradScaler means fp16 autocast
        if gpu is None and device.type == "cuda":
            gpu = torch.cuda.get_device_name(device)
        rank, world = _dist()
        hw = cls(device, dtype, sum(p.numel() for p in params), gpu, rank, world, scaler)
        hw._resolve_peak()
        return hw

    def _resolve_peak(self) -> None:
        if not self.gpu:
            self.mfu_note = "no GPU: MFU is not logged"
            return
        # the one GPU table and dtype spelling analyze uses (no second copy here)
        from trainlens.calculators import dense_peak, gpu_row
        from trainlens.core.errors import TrainlensError
        from trainlens.efficiency import dtype_of

        try:
            row = gpu_row(self.gpu, None, [])
            self.peak_flops = dense_peak(row, dtype_of({"dtype": self.dtype}), None)
        except TrainlensError as exc:
            self.mfu_note = f"MFU not logged: {exc}"

    def config(self) -> dict[str, Any]:
        """The run-config keys trainlens.runconfig reads (MODEL_KEYS spellings)."""
        cfg: dict[str, Any] = {
            "n_params": self.n_params,
            "dtype": self.dtype,
            "device": str(self.device),
            "world_size": self.world_size,
        }
        if self.gpu:
            cfg["gpu"] = self.gpu
        if self.mfu_note:
            cfg["mfu_note"] = self.mfu_note
        return cfg

    def per_rank(self, figures: dict[str, float]) -> dict[str, float]:
        """``<name>/rank<i>`` of every rank's figures (a collective: every rank calls it at
        the same step). One all_gather of a few numbers, every ``every`` steps."""
        dist = torch.distributed
        names = sorted(figures)
        device = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        mine = torch.tensor([figures[n] for n in names], dtype=torch.float64, device=device)
        got = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(got, mine)
        return {
            f"{name}/rank{rank}": float(v)
            for rank, values in enumerate(got)
            for name, v in zip(names, values.tolist(), strict=True)
        }

    def memory(self) -> dict[str, float]:
        return stats.memory(self.device)

    def loss_scale(self) -> torch.Tensor | None:
        s = self.scaler
        if s is None or not s.is_enabled():
            return None
        scale = getattr(s, "_scale", None)  # the tensor itself: no sync (get_scale() syncs)
        return scale.detach().clone() if isinstance(scale, torch.Tensor) else None

    def add_mfu(self, row: dict[str, Any]) -> None:
        tps = row.get("tokens_per_sec")
        if self.peak_flops and isinstance(tps, float):
            from trainlens.calculators import mfu_series

            row["mfu"] = float(
                mfu_series([tps], self.n_params, self.peak_flops, self.world_size)[0]
            )
