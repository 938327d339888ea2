"""Calculators: MFU/HFU, training compute, training memory, energy and carbon.

Pure functions over numbers and the packaged hardware table. Each returns a small frozen
dataclass holding the numbers and the ``assumptions`` behind them; the CLI formats them.
Nothing here imports polars; numpy is imported only inside :func:`mfu_series` and
:func:`integrate_power`.
"""

from trainlens.calculators.energy import (
    DEFAULT_GRID,
    DEFAULT_PUE,
    GRID_PRESETS,
    EnergyResult,
    GridPreset,
    MeasuredEnergy,
    PowerIntegral,
    energy,
    integrate_power,
    measured_energy,
    resolve_grid,
)
from trainlens.calculators.flops import (
    CHINCHILLA_TOKENS_PER_PARAM,
    ChinchillaResult,
    ComputeResult,
    IterationFlops,
    attention_flops_per_token,
    attention_term,
    chinchilla_optimal,
    flops_per_iteration,
    hardware_flops_per_token,
    korthikanti_flops_per_iteration,
    model_flops_per_token,
    model_training_compute,
    training_compute,
)
from trainlens.calculators.hardware import (
    DTYPES,
    GPU,
    HardwareTable,
    dense_peak,
    gpu_row,
    load_hardware_table,
    lookup_gpu,
    normalize_gpu_name,
    resolve_gpu,
)
from trainlens.calculators.memory import (
    OPTIMIZERS,
    PRECISIONS,
    MemoryResult,
    activation_bytes_per_layer,
    model_state_bytes_per_param,
    training_memory,
)
from trainlens.calculators.mfu import MFUResult, mfu, mfu_series
from trainlens.calculators.units import parse_duration_hours, parse_int, parse_number

__all__ = [
    "CHINCHILLA_TOKENS_PER_PARAM",
    "DEFAULT_GRID",
    "DEFAULT_PUE",
    "DTYPES",
    "GPU",
    "GRID_PRESETS",
    "OPTIMIZERS",
    "PRECISIONS",
    "ChinchillaResult",
    "ComputeResult",
    "EnergyResult",
    "GridPreset",
    "HardwareTable",
    "IterationFlops",
    "MFUResult",
    "MeasuredEnergy",
    "MemoryResult",
    "PowerIntegral",
    "activation_bytes_per_layer",
    "attention_flops_per_token",
    "attention_term",
    "chinchilla_optimal",
    "dense_peak",
    "energy",
    "flops_per_iteration",
    "gpu_row",
    "hardware_flops_per_token",
    "integrate_power",
    "korthikanti_flops_per_iteration",
    "load_hardware_table",
    "lookup_gpu",
    "measured_energy",
    "mfu",
    "mfu_series",
    "model_flops_per_token",
    "model_state_bytes_per_param",
    "model_training_compute",
    "normalize_gpu_name",
    "parse_duration_hours",
    "parse_int",
    "parse_number",
    "resolve_gpu",
    "resolve_grid",
    "training_compute",
    "training_memory",
]
