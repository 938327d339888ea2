"""``trainlens gpus``: the hardware table, one GPU in full, or as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainlens.cli._calc_common import TABLE_HELP, emit_json, hardware_table, print_rows
from trainlens.cli.app import app

# ---- gpus -------------------------------------------------------------------------------
_TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("bf16", "bf16_dense_tflops"),
    ("fp16", "fp16_dense_tflops"),
    ("fp8", "fp8_dense_tflops"),
    ("tf32", "tf32_dense_tflops"),
    ("fp32", "fp32_tflops"),
    ("mem GB", "memory_gb"),
    ("TB/s", "mem_bw_tbps"),
    ("TDP W", "tdp_w"),
)


@app.command()
def gpus(
    name: Annotated[
        str | None, typer.Argument(help="Show one GPU in full (name or alias).")
    ] = None,
    table: Annotated[Path | None, typer.Option("--table", help=TABLE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """The hardware table: dense peaks (TFLOP/s) per dtype, memory, bandwidth, TDP, sources."""
    hw = hardware_table(table)
    if name is not None:
        row, notes = hw.resolve(name)
        if as_json:
            payload = row.to_dict()
            payload["match_notes"] = notes
            emit_json(payload)
            return 0
        typer.echo(f"{row.name} ({row.vendor})" if row.vendor else row.name)
        fields = [("aliases", ", ".join(row.aliases) or "-")]
        for label, attr in _TABLE_COLUMNS:
            value = getattr(row, attr)
            unit = "" if label in ("mem GB", "TB/s", "TDP W") else " TFLOP/s dense"
            fields.append((label, "-" if value is None else f"{value:g}{unit}"))
        fields.append(("source", row.source or "-"))
        if row.notes:
            fields.append(("notes", row.notes))
        if row.origin != "packaged":
            fields.append(("from", row.origin))
        print_rows(fields)
        for note in notes:
            typer.echo(f"  - {note}")
        return 0

    if as_json:
        emit_json(
            {
                "peaks": "dense TFLOP/s (vendor headline tensor figures are 2:4-sparse, 2x)",
                "gpus": [g.to_dict() for g in hw],
            }
        )
        return 0
    header = ["name", "vendor"] + [label for label, _ in _TABLE_COLUMNS]
    body = []
    for row in hw:
        cells = [row.name + (" *" if row.origin != "packaged" else ""), row.vendor]
        for _, attr in _TABLE_COLUMNS:
            value = getattr(row, attr)
            cells.append("-" if value is None else f"{value:g}")
        body.append(cells)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        left = [cells[i].ljust(widths[i]) for i in range(2)]
        right = [cells[i].rjust(widths[i]) for i in range(2, len(cells))]
        return "  ".join(left + right).rstrip()

    typer.echo(line(header))
    for cells in body:
        typer.echo(line(cells))
    typer.echo(
        "\nPeaks are DENSE TFLOP/s (vendors' headline tensor figures are 2:4-sparse, twice "
        "these); fp32 is the non-tensor rate; GB = 1e9 bytes; '-' = not published or not "
        "supported."
    )
    if any(row.origin != "packaged" for row in hw):
        typer.echo("* from the user table " + str(table))
    typer.echo("\nSources:")
    for row in hw:
        typer.echo(f"  {row.name}: {row.source}")
        if row.notes:
            typer.echo(f"    note: {row.notes}")
    return 0
