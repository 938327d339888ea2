"""COCO-style evaluation results (detectron2's ``DatasetEvaluators``): their names, and
what a NaN among them means, for every format they are read from.

detectron2 names its evaluation results ``<task>/<metric>`` (``bbox/AP``, ``segm/AP50``,
``bbox/APs``, ``bbox/AP-<category>``, ``sem_seg/mIoU``, ``panoptic_seg/PQ``) and writes
them to ``metrics.json`` and to TensorBoard alike. COCOeval gives -1 where no ground
truth fits (no small objects: ``APs``; a category absent from the evaluation set), which
detectron2 writes as NaN: no value at all, not a value gone bad. Read as a value, NAN001
warned "bbox/APs became NaN" on a healthy run's TensorBoard.
"""

from __future__ import annotations

import re

import polars as pl

from trainlens.core.run import DataIssue, Run

#: an evaluation result's name (as logged; after a ``val/`` the JSON reader puts before it)
EVAL = re.compile(r"^(?:val/)?(bbox|segm|keypoints|sem_seg|panoptic_seg|box_proposals)/")
# the results COCOeval leaves undefined when nothing fits: detectron2 writes NaN ...
_AP = re.compile(r"^(?:val/)?(?:bbox|segm|keypoints)/AP")
# ... and OpenMMLab's CocoMetric the -1 itself (`coco/bbox_mAP_s`, mmpose's `coco/AP (M)`)
_MM_AP = re.compile(r"^(?:val/|test/)?coco/(?:.*[/_ ])?(?:m?AP|AR)", re.IGNORECASE)


def undefined_note(n: int) -> str:
    return f"{n} NaN result(s) left out (COCO's mark for no ground truth of that size or category)"


def drop_undefined(run: Run) -> None:
    """``run`` without the undefined values of its COCO results (detectron2's NaN,
    OpenMMLab's -1), said in a note."""
    d2 = [m for m in run.metrics if _AP.match(run.raw_names.get(m, m))]
    mm = [m for m in run.metrics if _MM_AP.match(run.raw_names.get(m, m))]
    if not d2 and not mm:
        return
    metric, value = pl.col("metric").cast(pl.String), pl.col("value")
    undefined = (metric.is_in(d2) & value.is_nan()) | (metric.is_in(mm) & (value == -1.0))
    n = int(run.frame.select(undefined.sum()).item())
    if not n:
        return
    run.frame = run.frame.filter(~undefined)
    run.data_quality.append(
        DataIssue(
            kind="framework",
            source=run.source,
            message=f"COCO evaluation results: {n} "
            + ("NaN" if d2 and not mm else "undefined (NaN or -1)")
            + " result(s) left out (COCO's mark for no ground truth of that size or category)",
            severity="info",
            count=n,
        )
    )
