"""YOLOv5's ``results.txt``: the table its train.py wrote before ``results.csv`` (issue 26).

YOLOv5 up to v5.0 (2021), YOLOv7, the ultralytics/yolov3 archive and the many forks of
their train.py append one line per epoch to ``runs/train/<name>/results.txt``, with no
header: the progress bar's text of the epoch's last batch, then the evaluation's results,
each field right-aligned in 10 characters::

         0/29     1.86G   0.09854   0.09318         0    0.1917        24       416  ...
    epoch/last  gpu_mem       box       obj       cls     total    labels  img_size

then ``P R mAP@.5 mAP@.5:.95 val_box val_obj val_cls`` (``'%10.4g' * 7 % results``). The
ultralytics/yolov3 archive writes ``P R mAP@.5 F1`` in their place (told apart by the
values: its fourth is 2PR/(P+R) on every row), and yolov5-face a fourth loss part
(``landmark``, named by the gain in the ``hyp.yaml`` beside). Read as the columns YOLOv5
gives the same figures in its later ``results.csv`` and its TensorBoard, so the YOLOv5 rules
(:func:`trainlens.readers._fwtables.finish`) apply: the step is the epoch (from 0, as
its TensorBoard), ``train/loss`` the logged total, ``gpu_mem`` the reserved memory
(``memory_reserved() / 1E9``, GB of 10^9 bytes). A line of another shape (a cut last
line) is said and left out; nothing in the file's other lines is lost.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from trainlens.core.names import Alias
from trainlens.core.run import DataIssue
from trainlens.readers._fwtables import SOURCE_LINE

_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:nan|inf)"
# `epoch/last  gpu_mem` and then the numbers: 13 (three loss parts) or 14 (four)
LINE = re.compile(
    rb"^[ \t]*([0-9]+)/([0-9]+)[ \t]+([0-9.]+(?:[eE][-+]?[0-9]+)?)G((?:[ \t]+(?:"
    + _NUM.encode()
    + rb")){13,14})[ \t]*\r?$"
)
_PARTS = ("box", "obj", "cls")
_RESULTS = ("metrics/precision", "metrics/recall", "metrics/mAP_0.5", "metrics/mAP_0.5:0.95")
NOTE_KIND = "framework-layout"
# the gains a fork's hyp.yaml adds for a fourth loss part (yolov5-face: landmark)
_FOURTH_PARTS = {"landmark", "theta", "angle", "kpt", "mask", "seg"}


def sniff(path: Path, head: bytes) -> bool:
    """The head's whole lines are YOLOv5 results rows (at least one; the last may be cut)."""
    lines = [ln for ln in head.split(b"\n") if ln.strip()]
    if not head.endswith(b"\n") and len(lines) > 1:
        lines = lines[:-1]  # (the head may end inside a line)
    if not lines:
        return False
    widths = {len(ln.split()) for ln in lines}
    return len(widths) == 1 and all(LINE.match(ln) for ln in lines)


def frame(
    data: bytes, path: Path
) -> tuple[pl.DataFrame, list[DataIssue], dict[str, object], dict[str, Alias]]:
    """The table of ``data`` (the whole file), the notes on it, the run's metadata and the
    aliases of its columns."""
    source = str(path)
    rows: list[list[float]] = []
    lines: list[int] = []
    last: set[int] = set()
    bad: list[int] = []
    width = 0
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        m = LINE.match(raw)
        fields = m.group(4).split() if m else []
        if m is None or (width and len(fields) != width):
            bad.append(n)
            continue
        width = width or len(fields)
        last.add(int(m.group(2)))
        rows.append([float(m.group(1)), float(m.group(3)), *map(float, fields)])
        lines.append(n)
    names = _names(width, rows, path)
    df = pl.DataFrame(rows, schema=names, orient="row")
    df = df.with_columns(
        pl.col("epoch").cast(pl.Int64), pl.Series(SOURCE_LINE, lines, dtype=pl.Int64)
    )
    layout = ", ".join(names[1:])
    notes = [
        DataIssue(
            kind=NOTE_KIND,
            source=source,
            message=(
                "a YOLOv5-style results.txt (no header): its columns are read by the layout "
                f"of the train.py that writes it, and named as YOLOv5's results.csv names "
                f"them: the epoch (of epoch/last), {layout}"
            ),
            severity="info",
        )
    ]
    if bad:
        notes.append(
            DataIssue(
                kind="malformed-line",
                source=source,
                location=f"line {bad[0]}",
                message=(
                    f"{len(bad)} line(s) not of the file's results layout (first: line "
                    f"{bad[0]}; a line cut short, or another program's text): left out"
                ),
                count=len(bad),
                severity="warning",
            )
        )
    meta: dict[str, object] = {"framework": "yolov5"}
    if len(last) == 1:
        meta["max_steps"] = last.pop()  # (the last epoch, counted from 0: the last step)
    return df, notes, meta, {"gpu_mem": Alias("mem/reserved", 1e9)}


def _names(width: int, rows: list[list[float]], path: Path) -> list[str]:
    parts = list(_PARTS)
    if width == 14:
        parts.append(_fourth_part(path))
    names = ["epoch", "gpu_mem", *(f"train/{p}_loss" for p in parts), "train/loss"]
    names += ["labels", "img_size"]
    results = list(_RESULTS)
    if width == 13 and _fourth_is_f1(rows):
        results[3] = "metrics/F1"  # (the ultralytics/yolov3 archive's P, R, mAP, F1)
    return names + results + [f"val/{p}_loss" for p in _PARTS]


def _fourth_is_f1(rows: list[list[float]]) -> bool:
    """Whether the fourth result is the harmonic mean of P and R on every row that has
    one (the values are printed to 3 or 4 significant digits)."""
    seen = 0
    for row in rows:
        p, r, fourth = row[8], row[9], row[11]
        if p + r <= 0:
            continue
        f1 = 2 * p * r / (p + r)
        if abs(fourth - f1) > 0.005 * max(f1, 1e-3) + 1e-4:
            return False
        seen += 1
    return seen > 0


def _fourth_part(path: Path) -> str:
    """The name of a fourth loss part: the one gain for such a part in the ``hyp.yaml``
    beside the file (yolov5-face's ``landmark``), else ``part4``."""
    try:
        text = (path.parent / "hyp.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "part4"
    keys = set(re.findall(r"^([a-z][a-z0-9_]*):", text, flags=re.M))
    named = sorted(keys & _FOURTH_PARTS)
    return named[0] if len(named) == 1 else "part4"
