"""detectron2's evaluation results on its stdout (issue 26).

``d2.evaluation.testing.print_csv_format`` prints each task's results as three lines::

    [11/19 09:09:41] d2.evaluation.testing INFO: copypaste: Task: bbox
    [11/19 09:09:41] d2.evaluation.testing INFO: copypaste: AP,AP50,AP75,APs,APm,APl
    [11/19 09:09:41] d2.evaluation.testing INFO: copypaste: 14.8034,28.8891,13.3763,...

the names on one line and the numbers on the next, so no one-line shape reads them. They
are read here as ``val/<task>/<name>`` (``val/bbox/AP``: what its ``metrics.json`` holds
as ``bbox/AP``), in percent as printed, at the last training step before them. A triple
that a piece cuts is finished with the next piece (a followed log).
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.readers.textlog.pipeline import LONG_SCHEMA, empty_long

HINT = "copypaste: "
_TASK = re.compile(r"copypaste: Task: (?P<task>[A-Za-z0-9_.-]+)[ \t]*$")
_LIST = re.compile(r"copypaste: (?P<items>[^,\s][^\n]*,[^\n]*[^,\s])[ \t]*$")


def read(df: pl.DataFrame, carry: list[tuple[int, str]], field_offset: int) -> pl.DataFrame:
    """The results in the piece ``df`` (``lineno, line``) as the long frame with a null
    ``step`` (they take the last step before them); ``carry`` holds the lines of a triple
    the piece cut, for the next piece."""
    lines = df.filter(pl.col("line").str.contains(HINT, literal=True))
    rows = [*carry, *((int(n), str(t)) for n, t in lines.iter_rows())]
    carry.clear()
    out: list[tuple[int, int, str, str]] = []
    i = 0
    while i < len(rows):
        task = _TASK.search(rows[i][1])
        if task is None:
            i += 1
            continue
        if i + 2 >= len(rows):
            carry.extend(rows[i:])  # (the piece ends inside the triple)
            break
        (n0, _), (n1, head), (n2, body) = rows[i : i + 3]
        names, numbers = _LIST.search(head), _LIST.search(body)
        if names is None or numbers is None or (n1, n2) != (n0 + 1, n0 + 2):
            i += 1
            continue
        keys = [k.strip() for k in names.group("items").split(",")]
        vals = [v.strip() for v in numbers.group("items").split(",")]
        if len(keys) == len(vals):
            prefix = f"val/{task.group('task')}/"
            out.extend((n2, 0, prefix + k, v) for k, v in zip(keys, vals, strict=True))
        i += 3
    if not out:
        return empty_long()
    long = pl.DataFrame(
        {
            "lineno": [r[0] for r in out],
            "field": list(range(field_offset, field_offset + len(out))),
            "step": pl.Series([None] * len(out), dtype=pl.Int64),
            "metric": [r[2] for r in out],
            "raw": [r[3] for r in out],
        },
        schema=LONG_SCHEMA,
    )
    return long
