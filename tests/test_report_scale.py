"""The report at scale (issue 24, item 5): 64 runs stay readable and the page bounded;
a per-tensor heatmap of a series logged every 10 steps is solid, and "no data" has a
colour no value has."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.image import AxesImage, imread

from trainlens.api import analyze
from trainlens.core.config import Config
from trainlens.report import build_figures, write_report
from trainlens.report.canvas import MANY_RUNS, MAX_FIGURE_IN
from trainlens.report.multiples import NO_DATA_COLOR
from trainlens.report.theme import DPI

RUNS = 64
STEPS = 30
#: the page of 64 such runs, measured at 1.1 MB (the PNGs, base64): the bound is per
#: figure (MAX_FIGURE_IN), so this stays put as runs are added; 2 MB leaves room for fonts
PAGE_BYTES = 2_000_000


def _runs(root: Path) -> list[Path]:
    """64 small JSONL runs, as a sweep writes them: loss every step, val every 10."""
    paths = []
    for r in range(RUNS):
        rng = np.random.default_rng(r)
        path = root / f"sweep-{r:02d}.jsonl"
        with path.open("w") as fh:
            for s in range(STEPS):
                row = {"step": s, "loss": 3 * math.exp(-s / 10) + 1 + 0.02 * rng.random()}
                if s % 10 == 0:
                    row["eval_loss"] = row["loss"] + 0.1
                fh.write(json.dumps(row) + "\n")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, Path]:
    root = tmp_path_factory.mktemp("sweep")
    analyses = [analyze(p, config=Config())[0] for p in _runs(root)]
    out = root / "report"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matplotlib warning (layout, legend) fails here
        write_report(analyses, out)
    return analyses, out


def test_64_runs_page_is_bounded_and_warning_free(sweep: tuple[list, Path]) -> None:
    _, out = sweep
    page = (out / "report.html").read_text("utf-8")
    assert len(page.encode()) < PAGE_BYTES
    for png in out.glob("*.png"):
        h, w = imread(png).shape[:2]
        assert w <= 1150 and h <= MAX_FIGURE_IN * DPI, png.name
    # the summary is a table of finals, one row per run, not 64 columns
    finals = page[page.index('<table class="finals">') :]
    finals = finals[: finals.index("</table>")]
    assert finals.count("<tr>") == RUNS + 1 and "sweep-63" in finals


def test_64_runs_legend_outside_and_one_axes_per_run(sweep: tuple[list, Path]) -> None:
    analyses, _ = sweep
    assert len(analyses) > MANY_RUNS
    figs = build_figures(analyses)
    loss = figs.panel("loss")
    ax = loss.figure.axes[0]
    renderer = loss.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    legend = ax.get_legend()
    assert legend is not None
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) <= 5 and f"{RUNS} runs, one colour each" in texts  # not 64 entries
    lb, ab = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
    assert lb.y0 >= ab.y1 - 1 or lb.x0 >= ab.x1 - 1  # above or beside: never over the plot
    assert ab.height > 0.6 * loss.figure.bbox.height  # and the axes keep the figure
    runs = figs.panel("runs")
    shown = [a for a in runs.figure.axes if a.get_visible()]
    assert len(shown) == RUNS
    assert {a.get_title(loc="left") for a in shown} >= {"sweep-00 #1", "sweep-63 #64"}
    assert len({a.get_ylim() for a in shown}) == 1  # one y scale: runs compare by eye
    # findings keep their homes on the overlay, not on a run's small axes
    assert all(d.panel != "runs" for d in figs.findings)


def test_sparse_tensor_heatmap_is_solid_and_no_data_is_its_own_colour(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with path.open("w") as fh:
        for s in range(400):
            row: dict[str, float] = {"step": s, "loss": 3 - s / 400}
            # 16 tensors (a heatmap) logged every 10 steps, not at all over 200–300
            if s % 10 == 0 and not 200 <= s < 300:
                row |= {f"grad_norm/layer{t}.weight": 0.1 * (t + 1) for t in range(16)}
            fh.write(json.dumps(row) + "\n")
    figs = build_figures(analyze(path, config=Config()))
    panel = figs.panel("tensors_grad_norm")
    [img] = [i for a in panel.figure.axes for i in a.get_images() if isinstance(i, AxesImage)]
    arr = np.ma.getmaskarray(img.get_array())
    cols = arr.shape[1]
    x = (np.arange(cols) + 0.5) * 399 / cols  # bucket centres: the loss runs to 399
    logged = (x < 189) | ((x > 301) & (x < 389))  # tensors at 0…190 and 300…390
    assert not arr[:, logged].any()  # no white barcode: solid between two logged steps
    assert arr[:, (x > 215) & (x < 285)].all()  # the real gap stays "no data"
    cmap = img.get_cmap()
    bad = np.array(to_rgb(cmap.get_bad()))
    assert np.allclose(bad, to_rgb(NO_DATA_COLOR))
    scale = np.array([cmap(v)[:3] for v in np.linspace(0, 1, 256)])
    # the nearest colour of the scale is far from "no data" (white, the old one, was 0.01)
    assert np.min(np.linalg.norm(scale - bad, axis=1)) > 0.15
