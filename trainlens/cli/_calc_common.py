"""What the calculator commands share: option parsing, number formats, printing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from trainlens.calculators.hardware import HardwareTable

#: a result section of ``flops``: title, (label, value) rows, assumptions
Section = tuple[str, list[tuple[str, str]], list[str]]

NumberOpt = Annotated[str | None, typer.Option(show_default=False)]


def parse_number_option(text: str | None, option: str, *, allow_zero: bool = False) -> float | None:
    """An option's text (``1.3e9``, ``1.3B``, ``40k``) as a float; None when not given.
    A bad number is a UsageError that names the option."""
    from trainlens.calculators.units import parse_number

    return None if text is None else parse_number(text, option, allow_zero=allow_zero)


def parse_int_option(text: str | None, option: str, *, allow_zero: bool = False) -> int | None:
    """An option's text as a whole number (``4k`` = 4000); None when not given."""
    from trainlens.calculators.units import parse_int

    return None if text is None else parse_int(text, option, allow_zero=allow_zero)


def required_option(text: str | None, option: str, what: str) -> str:
    if text is None:
        from trainlens.core.errors import UsageError

        raise UsageError(f"{option} is required: {what}.")
    return text


def hardware_table(path: Path | None) -> HardwareTable:
    from trainlens.calculators.hardware import load_hardware_table

    return load_hardware_table(path)


def sci(value: float, digits: int = 4) -> str:
    from trainlens.calculators.units import format_number

    return format_number(value, digits)


def pct(fraction: float) -> str:
    return f"{100.0 * fraction:.1f} %"


def gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:,.2f} GB"


def emit_json(payload: dict[str, Any]) -> None:
    import json

    typer.echo(json.dumps(payload, indent=2, sort_keys=False, allow_nan=False, default=str))


def as_dict(result: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(result)


def print_rows(rows: list[tuple[str, str]], indent: str = "  ") -> None:
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        typer.echo(f"{indent}{label.ljust(width)}  {value}")


def print_notes(warnings: list[str], assumptions: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"\nwarning: {warning}")
    typer.echo("\nAssumptions:")
    for line in assumptions:
        typer.echo(f"  - {line}")


def check_choice(value: str, choices: tuple[str, ...], option: str) -> str:
    from trainlens.core.errors import UsageError

    lowered = value.strip().lower()
    if lowered not in choices:
        raise UsageError(f"{option} must be one of {', '.join(choices)}; got {value!r}.")
    return lowered


DTYPE_HELP = "Precision of the matmuls: bf16, fp16, fp8, tf32 or fp32 (the non-tensor rate)."
RECOMPUTE_HELP = "Activation recomputation: none, selective or full (Korthikanti et al. 2022)."
TABLE_HELP = "A CSV of extra or overriding GPU rows (same columns as `trainlens gpus --json`)."
