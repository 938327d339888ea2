"""The hardware table: dense peak FLOP/s per dtype, memory, bandwidth and TDP, with sources.

The table ships as ``trainlens/data/hardware.csv``. Every figure is a *dense* rate (NVIDIA's
and AMD's headline numbers are 2:4-sparse, twice the dense rate). A user CSV with the same
columns adds rows or overrides fields of existing ones (``trainlens gpus --table FILE``).

Names match case-insensitively against the row name and its aliases after normalization:
vendor words (NVIDIA, GeForce, Tesla, AMD, Instinct, Intel, Google) and every character that
is not a letter or digit are dropped, so ``"NVIDIA H100 80GB HBM3"``, ``"h100-sxm"`` and
``"H100 SXM"`` all resolve to the H100 SXM row.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import field, fields, replace
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from trainlens.calculators.units import require_positive
from trainlens.core.dataclass import dataclass
from trainlens.core.errors import UnreadableInputError, UsageError

DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "tf32", "fp32")
"""Precisions with a peak column; ``fp32`` is the non-tensor-core (vector) rate."""

DTYPE_COLUMNS: dict[str, str] = {
    "bf16": "bf16_dense_tflops",
    "fp16": "fp16_dense_tflops",
    "fp8": "fp8_dense_tflops",
    "tf32": "tf32_dense_tflops",
    "fp32": "fp32_tflops",
}

NUMERIC_COLUMNS: tuple[str, ...] = (
    "bf16_dense_tflops",
    "fp16_dense_tflops",
    "tf32_dense_tflops",
    "fp32_tflops",
    "fp8_dense_tflops",
    "memory_gb",
    "mem_bw_tbps",
    "tdp_w",
)
TEXT_COLUMNS: tuple[str, ...] = ("name", "aliases", "vendor", "source", "notes")
COLUMNS: tuple[str, ...] = (
    "name",
    "aliases",
    "vendor",
    *NUMERIC_COLUMNS,
    "source",
    "notes",
)

_VENDOR_WORDS = re.compile(r"\b(nvidia|geforce|tesla|amd|instinct|intel|google)\b")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalize_gpu_name(name: str) -> str:
    """``"NVIDIA GeForce RTX 4090"`` -> ``"rtx4090"``; ``"h100-sxm"`` -> ``"h100sxm"``."""
    lowered = _VENDOR_WORDS.sub(" ", name.lower())
    return _NON_ALNUM.sub("", lowered)


@dataclass(frozen=True)
class GPU:
    """One row of the hardware table. Rates in TFLOP/s (dense), memory in GB (1e9 bytes)."""

    name: str
    aliases: tuple[str, ...] = ()
    vendor: str = ""
    bf16_dense_tflops: float | None = None
    fp16_dense_tflops: float | None = None
    tf32_dense_tflops: float | None = None
    fp32_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    memory_gb: float | None = None
    mem_bw_tbps: float | None = None
    tdp_w: float | None = None
    source: str = ""
    notes: str = ""
    origin: str = "packaged"  # "packaged", or the user file that added/changed the row

    def peak_tflops(self, dtype: str = "bf16") -> float | None:
        """The dense peak for ``dtype`` in TFLOP/s, or None when the table has none."""
        column = DTYPE_COLUMNS.get(dtype)
        if column is None:
            raise UsageError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}.")
        value = getattr(self, column)
        return None if value is None else float(value)

    def peak_flops(self, dtype: str = "bf16") -> float:
        """The dense peak for ``dtype`` in FLOP/s; a UsageError when the table has none."""
        tflops = self.peak_tflops(dtype)
        if tflops is None:
            have = [d for d in DTYPES if self.peak_tflops(d) is not None]
            offer = f"it has {', '.join(have)}" if have else "it has no peak figures"
            raise UsageError(
                f"{self.name} has no dense {dtype} peak in the hardware table ({offer}); "
                "choose another --dtype or give --peak-tflops."
            )
        return tflops * 1e12

    @property
    def memory_bytes(self) -> float | None:
        return None if self.memory_gb is None else self.memory_gb * 1e9

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["aliases"] = list(self.aliases)
        return out


@dataclass(frozen=True)
class HardwareTable:
    """The rows, plus an index from normalized names and aliases to rows."""

    gpus: tuple[GPU, ...]
    index: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __iter__(self) -> Iterator[GPU]:
        return iter(self.gpus)

    def __len__(self) -> int:
        return len(self.gpus)

    def resolve(self, name: str) -> tuple[GPU, list[str]]:
        """The row for ``name`` and the assumptions that the match itself implies."""
        key = normalize_gpu_name(name)
        if not key or key not in self.index:
            raise UsageError(self._unknown_message(name, key))
        gpu = self.gpus[self.index[key]]
        notes: list[str] = []
        if key != normalize_gpu_name(gpu.name):
            notes.append(f"GPU {name!r} read as {gpu.name}.")
            others = sorted(
                {
                    self.gpus[i].name
                    for k, i in self.index.items()
                    if k.startswith(key) and self.gpus[i] is not gpu
                }
            )
            if others:
                notes.append(
                    f"{name!r} could also mean {', '.join(others)}; {gpu.name} assumed "
                    "(name the variant to choose another)."
                )
        if gpu.notes.startswith("CHOICE:"):
            notes.append(
                f"Table choice for {gpu.name}: {gpu.notes.removeprefix('CHOICE:').strip()}"
            )
        if gpu.origin != "packaged":
            notes.append(f"{gpu.name} figures from {gpu.origin}.")
        return gpu, notes

    def lookup(self, name: str) -> GPU:
        return self.resolve(name)[0]

    def _unknown_message(self, name: str, key: str) -> str:
        keys = list(self.index)
        close = difflib.get_close_matches(key, keys, n=6, cutoff=0.5)
        suggestions: list[str] = []
        for k in close:
            row = self.gpus[self.index[k]].name
            if row not in suggestions:
                suggestions.append(row)
        hint = (
            f"did you mean {', '.join(suggestions[:3])}?"
            if suggestions
            else "`trainlens gpus` lists the known names"
        )
        return (
            f"unknown GPU {name!r}: {hint} (or give --peak-tflops, or add a row with --table FILE)"
        )


def _parse_float(raw: str, column: str, where: str) -> float | None:
    text = raw.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UnreadableInputError(
            f"{where}: column {column!r} must be a number or empty; got {text!r}"
        ) from None
    if not value > 0 or value == float("inf"):
        raise UnreadableInputError(f"{where}: column {column!r} must be positive; got {text!r}")
    return value


def _rows_from_csv(text: str, origin: str) -> list[tuple[dict[str, Any], set[str], int]]:
    """Parse rows; returns (values, columns given non-empty, line number) per row."""
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    if "name" not in header:
        raise UnreadableInputError(f"{origin}: a hardware table needs a 'name' column")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        raise UnreadableInputError(
            f"{origin}: unknown column(s) {', '.join(map(repr, unknown))}; "
            f"the columns are {', '.join(COLUMNS)}"
        )
    rows: list[tuple[dict[str, Any], set[str], int]] = []
    for record in reader:
        line = reader.line_num
        where = f"{origin}, line {line}"
        name = (record.get("name") or "").strip()
        if not name:
            raise UnreadableInputError(f"{where}: the row has no name")
        values: dict[str, Any] = {"name": name, "origin": origin}
        given: set[str] = set()
        for column in header:
            raw = record.get(column)
            if raw is None or column == "name" or not raw.strip():
                continue
            given.add(column)
            if column in NUMERIC_COLUMNS:
                values[column] = _parse_float(raw, column, where)
            elif column == "aliases":
                values[column] = tuple(a.strip() for a in raw.split(";") if a.strip())
            else:
                values[column] = raw.strip()
        rows.append((values, given, line))
    return rows


def _build(gpus: list[GPU], origin: str) -> HardwareTable:
    index: dict[str, int] = {}
    for i, gpu in enumerate(gpus):
        for label in (gpu.name, *gpu.aliases):
            key = normalize_gpu_name(label)
            if not key:
                continue
            if key in index and index[key] != i:
                other = gpus[index[key]].name
                raise UnreadableInputError(
                    f"{origin}: the name {label!r} of {gpu.name} also matches {other}; "
                    "names and aliases must be unique after normalization"
                )
            index[key] = i
    return HardwareTable(gpus=tuple(gpus), index=index)


@lru_cache(maxsize=1)
def _packaged_table() -> HardwareTable:
    resource = files("trainlens") / "data" / "hardware.csv"
    text = resource.read_text(encoding="utf-8")
    gpus = [GPU(**values) for values, _, _ in _rows_from_csv(text, "packaged")]
    return _build(gpus, "trainlens/data/hardware.csv")


def load_hardware_table(extra_path: str | Path | None = None) -> HardwareTable:
    """The packaged table, with the rows of ``extra_path`` (a CSV) added or overriding.

    A user row whose name matches an existing row (by name or alias, normalized) replaces
    only the fields it fills in, so a one-column override such as ``name,tdp_w`` works; a
    row with a new name is added. Aliases given for an existing row are added to its own.
    """
    table = _packaged_table()
    if extra_path is None:
        return table
    path = Path(extra_path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UnreadableInputError(f"{path}: hardware table not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableInputError(f"{path}: cannot read the hardware table ({exc})") from None
    gpus = list(table.gpus)
    index = dict(table.index)
    for values, given, line in _rows_from_csv(text, str(path)):
        key = normalize_gpu_name(values["name"])
        if key in index:
            i = index[key]
            current = gpus[i]
            changes = {k: v for k, v in values.items() if k in given or k == "origin"}
            changed = [c for c in NUMERIC_COLUMNS if c in given]
            # keep the packaged source for the figures the user row leaves alone
            changes["source"] = (
                f"{path}: {', '.join(changed) or 'aliases/notes'} from "
                f"{values.get('source', 'no source given')}; other figures: {current.source}"
            )
            if "aliases" in changes:
                changes["aliases"] = tuple(dict.fromkeys((*current.aliases, *changes["aliases"])))
            changes.pop("name", None)
            gpus[i] = replace(current, **changes)
        else:
            if not (given & set(DTYPE_COLUMNS.values())):
                raise UnreadableInputError(
                    f"{path}, line {line}: new GPU {values['name']!r} has no peak figure "
                    "(give at least bf16_dense_tflops or another dtype column)"
                )
            gpus.append(GPU(**values))
            index[key] = len(gpus) - 1
        for alias in values.get("aliases", ()):
            index[normalize_gpu_name(alias)] = index[key]
    return _build(gpus, str(path))


def resolve_gpu(name: str, table: HardwareTable | None = None) -> tuple[GPU, list[str]]:
    """The row for ``name`` and the assumptions the match implies (e.g. 'h100' = SXM)."""
    return (table or load_hardware_table()).resolve(name)


def lookup_gpu(name: str, table: HardwareTable | None = None) -> GPU:
    """The row for a GPU name or alias; an unknown name raises UsageError with suggestions."""
    return resolve_gpu(name, table)[0]


def gpu_row(
    gpu: str | GPU | None, table: HardwareTable | None, assumptions: list[str]
) -> GPU | None:
    """The row behind a calculator's ``gpu`` argument: a row as given, a name resolved in
    ``table`` (the match's own notes appended to ``assumptions``), or None when no GPU is
    named. The one resolution the MFU, compute, memory and energy calculators share, so a
    spelling that names a row in one names the same row in all."""
    if gpu is None:
        return None
    if isinstance(gpu, GPU):
        return gpu
    row, notes = resolve_gpu(gpu, table)
    assumptions.extend(notes)
    return row


def dense_peak(row: GPU | None, dtype: str, peak_flops: float | None) -> float | None:
    """The dense peak in FLOP/s per device: ``peak_flops`` when given, else ``row``'s
    ``dtype`` rate (a UsageError when the table has none), else None."""
    if peak_flops is not None:
        require_positive(peak_flops, "peak")
        return float(peak_flops)
    return None if row is None else row.peak_flops(dtype)
