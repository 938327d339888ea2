"""The report: findings drawn where they happened (checked on the figures' artists, not
pixels), honest decimation, escaping, PNG sizes, several runs, the CLI and a browser."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.axes import Axes
from matplotlib.image import imread
from matplotlib.lines import Line2D
from matplotlib.patches import Polygon, Rectangle
from matplotlib.text import Annotation, Text

import trainlens.cli.report  # noqa: F401  (registers `trainlens report` until cli/__init__ does)
from tests.conftest import REPO
from trainlens.api import Analysis, analyze_run
from trainlens.api import analyze as trainlens_analyze
from trainlens.cli import main
from trainlens.core.config import Config
from trainlens.core.findings import Finding, Severity
from trainlens.core.run import build_run
from trainlens.detectors.base import Context
from trainlens.report import Figures, build_figures, write_report
from trainlens.report.decimate import decimate, nonfinite_marks, with_gaps
from trainlens.report.html import esc, render_html
from trainlens.report.limits import robust_ylim
from trainlens.report.markdown import md, render_markdown
from trainlens.summary import summarize

N = 2000
SPIKE, LAG = 1200, 3
NAN_AT = (1600, 1605)
RESTART_FROM, RESTART_TO = 900, 850
SCHEDULE = {
    "shape": "cosine",
    "warmup_steps": 50,
    "peak_lr": 3e-4,
    "min_lr": 3e-5,
    "total_steps": N,
}


def _long(series: dict[str, tuple[np.ndarray, np.ndarray]]) -> pl.DataFrame:
    return pl.concat(
        [
            pl.DataFrame(
                {
                    "step": np.asarray(s, dtype=np.int64),
                    "metric": [m] * len(s),
                    "value": np.asarray(v, dtype=np.float64),
                }
            )
            for m, (s, v) in series.items()
        ]
    )


def _series(
    n: int = N,
    seed: int = 0,
    tensors: int = 4,
    scale: float = 1.0,
    extra: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    loss = scale * (2.5 + 4 * np.exp(-s / 300)) + rng.normal(0, 0.02, n)
    loss[SPIKE + LAG : SPIKE + LAG + 4] += 2.0
    loss[NAN_AT[0] : NAN_AT[1]] = np.nan
    grad = 0.8 * np.exp(rng.normal(0, 0.1, n))
    grad[SPIKE % n] *= 30
    warm = SCHEDULE["warmup_steps"]
    lr = np.where(
        s < warm,
        3e-4 * (s + 1) / warm,
        3e-5 + 0.5 * 2.7e-4 * (1 + np.cos(np.pi * np.clip((s - warm) / (n - warm), 0, 1))),
    )
    out = {
        "train/loss": (s, loss),
        "val/loss": (s[::200], loss[::200] + 0.1),
        "grad_norm": (s, grad),
        "lr": (s, lr),
        "tokens_per_sec": (s, 4e4 + rng.normal(0, 300, n)),
        "mfu": (s, np.full(n, 0.41)),
        "update_ratio": (s, 1e-3 * np.exp(rng.normal(0, 0.2, n))),
        "entropy": (s, 5 - 2 * s / n),
        "mem/allocated": (s, (20 + 2 * s / n) * 2**30),
        "loss_scale": (s, 2.0 ** (16 - s // 500)),
    }
    for t in range(tensors):
        out[f"grad_norm/layer{t}"] = (s, np.zeros(n) if t == 1 else grad * (0.3 + 0.1 * t))
    out.update(extra or {})
    return out


def _with_restart(df: pl.DataFrame) -> pl.DataFrame:
    """The job logged up to RESTART_FROM, then resumed from RESTART_TO (file order)."""
    return pl.concat(
        [df.filter(pl.col("step") <= RESTART_FROM), df.filter(pl.col("step") >= RESTART_TO)]
    )


def _finding(
    code: str,
    metric: str | None,
    start: int | None,
    end: int | None,
    sev: str = "warning",
    message: str | None = None,
    **ev: Any,
) -> Finding:
    return Finding(
        code, code.lower(), Severity(sev), metric, start, end, message or f"{code} happened", ev
    )


# hand-made findings, so the drawing is tested independently of the detectors' tuning
FINDINGS = [
    _finding(
        "GRAD001",
        "grad_norm",
        SPIKE,
        SPIKE + LAG + 4,
        lead_step=SPIKE,
        lag_step=SPIKE + LAG,
        lag=LAG,
    ),
    _finding("NAN001", "train/loss", NAN_AT[0], NAN_AT[1] - 1, "error", first_step=NAN_AT[0]),
    _finding("DATA001", None, RESTART_TO, RESTART_FROM),
    _finding("TPUT001", "tokens_per_sec", 1500, N - 1),
    _finding("MEM001", "mem/allocated", 300, N - 1),
    _finding("LR001", "lr", 100, 400),
    _finding("ENT001", "entropy", 1700, 1700, "info"),
    _finding("TENSOR001", "grad_norm/layer1", 0, N - 1),
    _finding("TENSOR002", "update_ratio", 10, 20, "info"),
    _finding("DATA002", "wall_time", 700, 700, "info"),
    _finding("LOSS002", "loss_scale", 500, 999, "info"),
    _finding("VAL001", "val/loss", 1000, 1800),
    _finding("LR007", None, None, None, "info", message="no step range"),
]
HOME = {
    "grad_norm": "grad_norm",
    "train/loss": "loss",
    None: "loss",
    "val/loss": "loss",
    "tokens_per_sec": "throughput",
    "wall_time": "throughput",
    "mem/allocated": "memory",
    "lr": "lr",
    "entropy": "entropy",
    "grad_norm/layer1": "tensors_grad_norm",
    "update_ratio": "update_ratio",
    "loss_scale": "other",
}


def _analysis(
    name: str = "demo",
    findings: list[Finding] | None = None,
    schedule: dict[str, Any] | None = None,
    **kw: Any,
) -> Analysis:
    run = build_run(
        _with_restart(_long(_series(**kw))), name=name, source=f"/runs/{name}.jsonl", fmt="jsonl"
    )
    return Analysis(
        run=run,
        summary=summarize(run),
        findings=list(FINDINGS if findings is None else findings),
        context=Context(
            schedule=dict(schedule if schedule is not None else SCHEDULE), schedule_source="test"
        ),
    )


@pytest.fixture(scope="module")
def demo() -> Analysis:
    return _analysis()


@pytest.fixture(scope="module")
def figures(demo: Analysis) -> Figures:
    return build_figures([demo])


@pytest.fixture(scope="module")
def written(demo: Analysis, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report([demo], tmp_path_factory.mktemp("report"))


def _page(analyses: list[Analysis], figs: Figures) -> str:
    """The HTML without rendering images (the tests that read text need no pixels)."""
    return render_html(analyses, figs, {p.key: b"" for p in figs.panels})


# ---- helpers over artists --------------------------------------------------------------------


def _texts(ax: Axes, gid: str | None = None) -> list[str]:
    return [
        t.get_text()
        for t in ax.texts
        if isinstance(t, Text) and (gid is None or t.get_gid() == gid)
    ]


def _span_x(patch: Any) -> tuple[float, float]:
    if isinstance(patch, Rectangle):
        return patch.get_x(), patch.get_x() + patch.get_width()
    assert isinstance(patch, Polygon)
    xs = patch.get_xy()[:, 0]
    return float(xs.min()), float(xs.max())


def _spans(ax: Axes, gid: str) -> list[tuple[float, float]]:
    return [_span_x(p) for p in ax.patches if p.get_gid() == gid]


def _lines(ax: Axes, gid: str) -> list[Line2D]:
    return [ln for ln in ax.lines if ln.get_gid() == gid]


# ---- findings drawn where they happened ------------------------------------------------------


def test_every_finding_is_drawn_on_the_panel_of_its_metric(
    demo: Analysis, figures: Figures
) -> None:
    assert figures.undrawn == []
    for i, f in enumerate(demo.findings):
        d = figures.drawn(0, i)
        assert d is not None, f.code
        assert d.panel == HOME[f.metric], (f.code, d.panel)
        gid = f"finding-0-{i}"
        assert d.axes in figures.panel(d.panel).figure.axes
        labels = _texts(d.axes, gid)
        assert any(t.startswith(f.code) for t in labels), (f.code, labels)
        if f.step_start is None:
            assert "whole run" in labels[0]
            continue
        [(lo, hi)] = _spans(d.axes, gid)
        assert lo <= f.step_start and hi >= (f.step_end or f.step_start), (f.code, lo, hi)
        assert hi - lo < (f.step_end - f.step_start) + 0.01 * N  # not wider than needed


def test_lead_lag_is_drawn_on_grad_and_loss_panels(demo: Analysis, figures: Figures) -> None:
    d = figures.drawn(0, 0)
    assert d is not None and d.finding.code == "GRAD001"
    grad_ax = figures.panel("grad_norm").axes[(0, "grad_norm")]
    loss_ax = figures.panel("loss").axes[(0, "train/loss")]
    assert d.axes is grad_ax and ("loss", loss_ax) in d.also
    # a ring at the grad-norm spike, labelled with the code
    ring = [ln for ln in _lines(grad_ax, d.anchor) if ln.get_marker() == "o"]
    assert ring and ring[0].get_xdata()[0] == SPIKE
    assert ring[0].get_ydata()[0] == pytest.approx(float(demo.run.series("grad_norm")[1][SPIKE]))
    # a dashed line at the lead step on both panels
    for ax in (grad_ax, loss_ax):
        vlines = [ln for ln in _lines(ax, d.anchor) if ln.get_linestyle() == "--"]
        assert vlines and list(vlines[0].get_xdata()) == [SPIKE, SPIKE]
    # the lag marker on the loss panel, with an arrow from the lead step
    arrows = [t for t in loss_ax.texts if isinstance(t, Annotation) and t.get_gid() == d.anchor]
    assert arrows and arrows[0].get_text() == f"GRAD001 lag +{LAG}"
    assert arrows[0].arrow_patch is not None
    assert arrows[0].xy[0] == SPIKE + LAG
    lag_mark = [ln for ln in _lines(loss_ax, d.anchor) if ln.get_marker() == "D"]
    assert lag_mark and lag_mark[0].get_xdata()[0] == SPIKE + LAG


def test_nan_steps_are_marked_on_the_axis_and_break_the_line(figures: Figures) -> None:
    ax = figures.panel("loss").axes[(0, "train/loss")]
    [marks] = _lines(ax, "nonfinite-0-train/loss-nan")
    assert list(marks.get_xdata()) == list(range(*NAN_AT))
    assert set(marks.get_ydata()) == {0.0} and not marks.get_clip_on()  # on the bottom edge
    [line] = _lines(ax, "series-0-train/loss")
    xs, ys = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    gap = np.isnan(ys)
    assert gap.any() and NAN_AT[0] <= xs[gap][0] < NAN_AT[1]


def test_inf_is_marked_on_the_top_edge() -> None:
    s = np.arange(500)
    g = np.ones(500)
    g[100] = np.inf
    run = build_run(_long({"grad_norm": (s, g)}), name="r", source="r", fmt="jsonl")
    figs = build_figures([Analysis(run=run, summary=summarize(run), findings=[])])
    ax = figs.panel("grad_norm").axes[(0, "grad_norm")]
    [marks] = _lines(ax, "nonfinite-0-grad_norm-+inf")
    assert list(marks.get_xdata()) == [100] and list(marks.get_ydata()) == [1.0]


def test_restart_line_and_faint_superseded_segment(figures: Figures) -> None:
    ax = figures.panel("loss").axes[(0, "train/loss")]
    [vline] = _lines(ax, f"restart-0-{RESTART_TO}")
    assert list(vline.get_xdata()) == [RESTART_TO, RESTART_TO]
    [faint] = _lines(ax, "superseded-0-train/loss")
    xs = np.asarray(faint.get_xdata())
    assert xs.min() == RESTART_TO and xs.max() == RESTART_FROM
    assert faint.get_alpha() is not None and faint.get_alpha() < 0.6
    assert any("restart" in t for t in _texts(ax))


def test_best_val_step_is_starred(demo: Analysis, figures: Figures) -> None:
    ax = figures.panel("loss").axes[(0, "val/loss")]
    [star] = _lines(ax, "best-val-0")
    assert star.get_xdata()[0] == demo.summary["val_loss"]["best_step"]
    assert star.get_ydata()[0] == pytest.approx(demo.summary["val_loss"]["best"])


def test_panels_units_scales_and_declared_lr(figures: Figures) -> None:
    keys = [p.key for p in figures.panels]
    assert keys[:7] == [
        "loss",
        "grad_norm",
        "lr",
        "throughput",
        "update_ratio",
        "entropy",
        "memory",
    ]
    assert "tensors_grad_norm" in keys and "other" in keys
    grad = figures.panel("grad_norm").axes[(0, "grad_norm")]
    assert grad.get_yscale() == "log" and "clipping" in grad.get_ylabel()
    assert figures.panel("update_ratio").axes[(0, "update_ratio")].get_yscale() == "log"
    mem = figures.panel("memory").axes[(0, "mem/allocated")]
    assert "GiB" in mem.get_ylabel()
    assert max(_lines(mem, "series-0-mem/allocated")[0].get_ydata()) == pytest.approx(22, 0.01)
    mfu_ax = figures.panel("throughput").axes[(0, "mfu")]
    assert mfu_ax.get_ylabel() == "MFU (%)"
    assert _lines(mfu_ax, "series-0-mfu")[0].get_ydata()[0] == pytest.approx(41.0)
    lr = figures.panel("lr").axes[(0, "lr")]
    [declared] = _lines(lr, "declared-lr-0")
    assert max(declared.get_ydata()) == pytest.approx(3e-4, rel=1e-3)
    assert "declared (cosine)" in [t.get_text() for t in lr.get_legend().get_texts()]
    loss = figures.panel("loss").axes[(0, "train/loss")]
    assert any("perplexity" in a.get_ylabel() for a in loss.child_axes)
    # every metric of the run is drawn somewhere
    drawn = {m for p in figures.panels for (_, m) in p.axes}
    assert drawn == set(_series())


def test_summary_mfu_is_drawn_when_no_mfu_series() -> None:
    a = _analysis(findings=[], tensors=0)
    a.run.frame = a.run.frame.filter(pl.col("metric") != "mfu")
    a.summary["mfu"] = {"mean": 0.31, "text": "MFU mean 31.0%"}
    figs = build_figures([a])
    panel = figs.panel("throughput")
    twin = [ax for ax in panel.figure.axes if ax.get_ylabel() == "MFU (%)"]
    assert twin and [ln.get_ydata()[0] for ln in twin[0].lines] == [31.0]
    labels = [t.get_text() for t in panel.figure.axes[0].get_legend().get_texts()]
    assert "MFU 31.0% (summary)" in labels


def test_no_declared_curve_without_a_schedule() -> None:
    figs = build_figures([_analysis(schedule={}, findings=[])])
    assert _lines(figs.panel("lr").axes[(0, "lr")], "declared-lr-0") == []


def test_heatmap_for_many_tensors_marks_the_finding_row() -> None:
    f = _finding("TENSOR001", "grad_norm/layer1", 0, N - 1)
    figs = build_figures([_analysis(tensors=20, findings=[f])])
    panel = figs.panel("tensors_grad_norm")
    ax = panel.axes[(0, "grad_norm/layer1")]
    assert ax.images, "a heatmap"
    [(lo, hi)] = _spans(ax, "finding-0-0")
    [rect] = [p for p in ax.patches if p.get_gid() == "finding-0-0"]
    assert isinstance(rect, Rectangle) and rect.get_y() == pytest.approx(0.5)  # row 1
    assert lo <= 0 and hi >= N - 1


@pytest.mark.slow
def test_smoothing_is_drawn_over_the_raw_line_and_named() -> None:
    figs = build_figures([_analysis(findings=[])], smoothing=0.1)
    ax = figs.panel("loss").axes[(0, "train/loss")]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "train/loss (raw)" in labels and "train/loss · EMA α=0.1" in labels
    raw = _lines(ax, "series-0-train/loss")[0]
    ema = next(ln for ln in ax.lines if ln.get_label() == "train/loss · EMA α=0.1")
    assert ema.get_zorder() > raw.get_zorder()
    at = SPIKE + LAG + 1  # the loss spike: full height in the raw line, damped in the EMA
    raw_y = np.asarray(raw.get_ydata())[np.asarray(raw.get_xdata()) == at]
    ema_y = np.asarray(ema.get_ydata())[np.asarray(ema.get_xdata()) == at]
    assert raw_y.size == ema_y.size == 1 and ema_y[0] < raw_y[0] - 1.0
    with pytest.raises(ValueError, match="smoothing"):
        build_figures([_analysis(findings=[])], smoothing=1.5)


@pytest.mark.slow
def test_several_runs_overlay_with_a_legend_entry_per_run() -> None:
    a = _analysis("alpha", findings=[FINDINGS[0]], tensors=0)
    b = _analysis("beta", findings=[FINDINGS[3]], seed=1, scale=1.1, tensors=0)
    figs = build_figures([a, b])
    loss = figs.panel("loss").axes
    assert loss[(0, "train/loss")] is loss[(1, "train/loss")]
    labels = [t.get_text() for t in loss[(0, "train/loss")].get_legend().get_texts()]
    assert any(t.startswith("alpha") for t in labels) and any(t.startswith("beta") for t in labels)
    colors = {
        _lines(loss[(r, "train/loss")], f"series-{r}-train/loss")[0].get_color() for r in (0, 1)
    }
    assert len(colors) == 2  # one colour per run
    assert figs.drawn(1, 0) is not None and figs.drawn(1, 0).panel == "throughput"
    small = figs.panel("other").figure.legends
    assert small and {"alpha (#1)", "beta (#2)"} <= {t.get_text() for t in small[0].get_texts()}
    assert any(t == "GRAD001 #1" for t in _texts(figs.drawn(0, 0).axes))  # short run tags
    page = _page([a, b], figs)
    row = page.split('<th scope="row">run</th>')[1].split("</tr>")[0]
    assert row.count("<td>") == 2 and "alpha" in row and "beta" in row  # side by side
    assert 'id="finding-1-0"' in page and "<th>run</th>" in page


# ---- written files ---------------------------------------------------------------------------


@pytest.mark.slow
def test_report_files_png_sizes_and_svgs(written: Path, figures: Figures) -> None:
    out = written.parent
    assert written.name == "report.html" and (out / "report.md").is_file()
    for p in figures.panels:
        img = imread(out / f"{p.key}.png")
        w, h = p.size_px()
        assert img.shape[:2] == (h, w), p.key
        assert 1000 <= w <= 1200
        root = ET.parse(out / f"{p.key}.svg").getroot()
        assert root.tag.endswith("svg")
    svg = (out / "grad_norm.svg").read_text()
    assert 'id="finding-0-0"' in svg  # the finding's artists are addressable in the SVG
    assert sum(f.stat().st_size for f in out.glob("*.svg")) < 5e6


@pytest.mark.slow
def test_every_finding_in_the_html_linked_to_its_panel(
    written: Path, demo: Analysis, figures: Figures
) -> None:
    page = written.read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert page.count("data:image/png;base64,") == len(figures.panels)
    for i, f in enumerate(demo.findings):
        row = page.split(f'<tr id="finding-0-{i}">')[1].split("</tr>")[0]
        assert esc(f.code) in row and esc(f.message) in row
        d = figures.drawn(0, i)
        assert d is not None and f'href="#panel-{d.panel}"' in row
        assert f'id="panel-{d.panel}"' in page
        assert f'href="#finding-0-{i}"' in page  # and back from the panel's caption


@pytest.mark.slow
def test_markdown_references_the_pngs(written: Path, figures: Figures) -> None:
    text = (written.parent / "report.md").read_text()
    for p in figures.panels:
        assert f"]({p.key}.png)" in text
    assert "| **GRAD001** | warning | steps 1200–1207 |" in text


def test_strings_from_the_input_are_escaped() -> None:
    evil_metric = "<script>alert(1)</script>"
    evil_run = '<script>run"&<>x'
    s = np.arange(300)
    odd = np.sin(s / 10)
    odd[0] = 1e6  # cut from the axis: its caption names the metric
    extra = {evil_metric: (s, odd), "cost$x$": (s, s * 1.0)}
    f = _finding("LOSS001", evil_metric, 100, 100, message="<b>bold</b> & 'quoted'")
    a = _analysis(evil_run, findings=[f], n=300, extra=extra, tensors=0)
    figs = build_figures([a])
    page = _page([a], figs)
    assert "<script" not in page and "<b>bold" not in page and evil_run not in page
    assert esc(evil_metric) in page and esc(evil_run) in page
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &#x27;quoted&#x27;" in page
    assert f"1 {esc(evil_metric)} value(s) above" in page  # the y-axis caption, escaped
    md_text = render_markdown([a], figs)
    assert "<script" not in md_text and md(evil_run) in md_text
    assert md('run"&<>x') == 'run"&amp;&lt;&gt;x'
    # the finding on the odd metric is drawn on its small multiple, as literal text
    d = figs.drawn(0, 0)
    assert d is not None and d.panel == "other"
    assert d.axes.get_title(loc="left") == evil_metric
    titles = [ax.get_title(loc="left") for ax in figs.panel("other").figure.axes]
    assert r"cost\$x\$" in titles  # no mathtext


# ---- real logs read well: limits, labels, gaps, log LR ----------------------------------------


def _plain(
    series: dict[str, tuple[np.ndarray, np.ndarray]],
    findings: list[Finding] | None = None,
    name: str = "r",
) -> Analysis:
    run = build_run(_long(series), name=name, source=f"/runs/{name}.jsonl", fmt="jsonl")
    return Analysis(run=run, summary=summarize(run), findings=list(findings or []))


def _body_with_outlier(n: int, lo: float, hi: float, outlier: float, seed: int = 1) -> np.ndarray:
    """A long curve living in [lo, hi] whose first few values fall from ``outlier``."""
    rng = np.random.default_rng(seed)
    v = lo + (hi - lo) * rng.uniform(0.0, 1.0, n)
    v[:20] = np.geomspace(outlier, hi, 20)
    return v


PANEL_KINDS = [
    # metric, panel, body, far-out first value
    ("train/loss", "loss", (2.5, 5.0), 22.0),
    ("grad_norm", "grad_norm", (0.2, 0.6), 5e3),
    ("tokens_per_sec", "throughput", (3e4, 5e4), 4e6),
    ("mem/allocated", "memory", (16 * 2**30, 24 * 2**30), 2e3 * 2**30),
    ("entropy", "entropy", (4.0, 5.0), 60.0),
    ("update_ratio", "update_ratio", (1e-3, 3e-3), 5.0),
]


@pytest.mark.parametrize(("metric", "key", "body", "outlier"), PANEL_KINDS)
def test_robust_limits_keep_the_body_and_mark_the_outlier_on_the_edge(
    metric: str, key: str, body: tuple[float, float], outlier: float
) -> None:
    n = 20_000
    s = np.arange(n)
    v = _body_with_outlier(n, *body, outlier)
    a = _plain({metric: (s, v)})
    figs = build_figures([a])
    panel = figs.panel(key)
    ax = panel.axes[(0, metric)]
    scale = 1 / 2**30 if metric.startswith("mem/") else 1.0
    lo, hi = ax.get_ylim()
    assert lo <= body[0] * scale and hi >= body[1] * scale  # the body is all on the axis
    assert hi < outlier * scale  # the far-out start is not
    if ax.get_yscale() == "linear":  # and the body fills a good part of it
        assert (body[1] - body[0]) * scale / (hi - lo) > 0.35
    else:
        assert np.log10(body[1] / body[0]) / np.log10(hi / lo) > 0.35
    [edge] = _lines(ax, f"clipped-0-{metric}-above")
    assert edge.get_xdata()[0] == 0 and set(edge.get_ydata()) == {1.0}
    assert not edge.get_clip_on()  # drawn on the edge, outside the clip box
    [note] = _texts(ax, f"clipped-0-{metric}-above")
    assert "▲" in note and f"{outlier * scale:.4g}" in note
    assert any("y axis cut" in c for c in panel.notes)


def test_limits_keep_a_findings_peak_and_leave_a_tame_run_alone() -> None:
    n = 5000
    s = np.arange(n)
    v = _body_with_outlier(n, 2.5, 5.0, 22.0)
    v[3000] = 40.0  # a spike the detectors flagged: it must stay on the axis
    f = _finding("LOSS001", "train/loss", 3000, 3000, peak_step=3000)
    figs = build_figures([_plain({"train/loss": (s, v)}, [f])])
    ax = figs.panel("loss").axes[(0, "train/loss")]
    assert ax.get_ylim()[1] > 40.0
    # a finding over a stretch (no peak named): its highest value stays on the axis too
    v[3000] = 3.0
    v[4200] = 30.0
    f = _finding("LOSS003", "train/loss", 4000, 4500)
    figs = build_figures([_plain({"train/loss": (s, v)}, [f])])
    assert figs.panel("loss").axes[(0, "train/loss")].get_ylim()[1] > 30.0
    # a healthy run: nothing cut, matplotlib's own limits
    tame = np.linspace(5.0, 2.5, n)
    figs = build_figures([_plain({"train/loss": (s, tame)})])
    ax = figs.panel("loss").axes[(0, "train/loss")]
    assert ax.get_ylim()[0] < 2.5 and ax.get_ylim()[1] > 5.0
    assert not [ln for ln in ax.lines if str(ln.get_gid()).startswith("clipped-")]


def test_robust_ylim_small_samples_and_lone_spikes() -> None:
    # an HF state logged every 100 steps: 284 and 161, then about 5 (val 15 → 0.3)
    train = np.array([284.87, 161.25, 9.9, 5.3, 5.1, 5.02])
    val = np.array([15.44, 2.38, 0.347, 0.319, 0.308, 0.304])
    lim = robust_ylim([train, val])
    assert lim is not None and lim[0] < 0.304 and 15.44 < lim[1] < 161
    # 19 values with one spike to 5.1 (BLOOM's iteration 31219): drawn, not cut
    bloom = np.r_[np.full(18, 2.2) + np.linspace(0, 0.3, 18), 5.1]
    assert robust_ylim([bloom]) is None
    assert robust_ylim([np.full(100, 3.0)]) is None  # constant
    assert robust_ylim([np.array([1.0, np.nan, np.inf])]) is None


def _overlaps(boxes: list[Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].x0 < boxes[j].x1
        and boxes[j].x0 < boxes[i].x1
        and boxes[i].y0 < boxes[j].y1
        and boxes[j].y0 < boxes[i].y1
    ]


def _label_boxes(ax: Axes) -> list[Any]:
    fig = ax.get_figure(root=True)
    assert fig is not None
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    return [
        Text.get_window_extent(t, renderer)  # the text, not its leader line
        for t in ax.texts
        if t.get_visible() and str(t.get_gid() or "").startswith(("finding-", "clipped-"))
    ]


def test_finding_labels_never_overlap_they_stack_or_merge() -> None:
    n = 3000
    s = np.arange(n)
    rng = np.random.default_rng(3)
    loss = 3 + rng.normal(0, 0.05, n)
    loss[:10] = 22.0  # a clip note joins the labels along the top
    grad = 0.5 + rng.normal(0, 0.01, n)
    codes = ["LOSS001", "LOSS003", "GRAD002", "VAL001"]
    findings = [
        _finding(codes[i % 4], "train/loss", 1000 + 7 * i, 1000 + 7 * i, peak_step=1000 + 7 * i)
        for i in range(40)
    ]
    findings += [
        _finding("LOSS001", "train/loss", 2000 + 400 * i, 2000 + 400 * i) for i in range(3)
    ]
    findings.append(
        _finding("GRAD001", "grad_norm", 1100, 1110, lead_step=1100, lag_step=1103, lag=3)
    )
    figs = build_figures([_plain({"train/loss": (s, loss), "grad_norm": (s, grad)}, findings)])
    ax = figs.panel("loss").axes[(0, "train/loss")]
    boxes = _label_boxes(ax)
    assert len(boxes) >= 5
    assert _overlaps(boxes) == []
    labels = [t.get_text() for t in ax.texts if str(t.get_gid()).startswith("finding-")]
    assert any("×" in t or "+" in t.split(" lag")[0] for t in labels)  # 40 labels merged
    assert "GRAD001 lag +3" in labels  # never merged away
    # every finding still has a visible label that names it (its own or a merged one)
    for i, f in enumerate(findings):
        d = figs.drawn(0, i)
        assert d is not None and d.label is not None and d.label.axes is d.axes
        text = d.label.get_text()
        assert text.startswith(f.code) or "+" in text, (f.code, text)
    # the labels stay inside the axes
    box = ax.get_window_extent()
    assert all(b.x0 >= box.x0 - 1 and b.x1 <= box.x1 + 1 for b in boxes)


def test_demo_and_fixture_labels_never_overlap(figures: Figures) -> None:
    for panel in figures.panels:
        for ax in panel.figure.axes:
            assert _overlaps(_label_boxes(ax)) == [], panel.key


def test_a_gap_in_the_steps_breaks_the_line() -> None:
    # two excerpts of a log and one lone line between them
    s = np.r_[np.arange(0, 1000), [3000], np.arange(6000, 7000)]
    v = 3 + np.sin(s / 50.0)
    figs = build_figures([_plain({"train/loss": (s, v)})])
    ax = figs.panel("loss").axes[(0, "train/loss")]
    [line] = _lines(ax, "series-0-train/loss")
    xs, ys = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    breaks = xs[np.isnan(ys)]
    assert any(999 < b < 3000 for b in breaks) and any(3000 < b < 6000 for b in breaks)
    assert not any(0 < b < 999 or 6000 < b < 6999 for b in breaks)
    [dot] = _lines(ax, "isolated-0-train/loss")  # the lone point is a dot, not nothing
    assert list(dot.get_xdata()) == [3000]
    assert any("no steps logged at 1,000–2,999, 3,001–5,999" in c for c in figs.panel("loss").notes)
    # a log whose interval varies (1 or 2 steps, every 250 for val) has no gaps
    rng = np.random.default_rng(0)
    s2 = np.cumsum(rng.integers(1, 3, 4000))
    figs = build_figures([_plain({"train/loss": (s2, np.ones(s2.size))})])
    [line] = _lines(figs.panel("loss").axes[(0, "train/loss")], "series-0-train/loss")
    assert not np.isnan(np.asarray(line.get_ydata(), dtype=float)).any()


def test_step_gaps_keep_decimation_spike_preserving() -> None:
    s = np.r_[np.arange(0, 500_000), np.arange(600_000, 1_000_000)]
    v = np.ones(s.size)
    v[700_000 - 100_000] = 50.0  # one-step spike after the gap (step 700,000)
    figs = build_figures([_plain({"grad_norm": (s, v)})])
    ax = figs.panel("grad_norm").axes[(0, "grad_norm")]
    [line] = _lines(ax, "series-0-grad_norm")
    xs, ys = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    assert np.nanmax(ys) == 50.0 and xs[np.nanargmax(ys)] == 700_000
    assert any(499_999 < b < 600_000 for b in xs[np.isnan(ys)])
    assert len(xs) < 5000


def test_lr_spanning_decades_gets_a_log_axis() -> None:
    n = 2000
    s = np.arange(n)
    warm = np.linspace(1e-7, 1e-3, n)  # a linear warmup from 1e-7: four decades
    decay = 1e-3 * np.exp(-np.log(1000) * s / (n - 1))  # decay by 1000×
    cosine = 3e-5 + 0.5 * 2.7e-4 * (1 + np.cos(np.pi * s / n))  # to 10 %: one decade
    for lr, scale in ((warm, "log"), (decay, "log"), (cosine, "linear")):
        figs = build_figures([_plain({"lr": (s, lr)})])
        assert figs.panel("lr").axes[(0, "lr")].get_yscale() == scale


# ---- decimation ------------------------------------------------------------------------------


def test_decimating_a_million_steps_keeps_a_one_step_spike_and_the_minimum() -> None:
    n = 1_000_000
    rng = np.random.default_rng(0)
    s = np.arange(n, dtype=np.int64)
    v = rng.normal(0, 1, n)
    v[654_321] = 1e3
    v[123_457] = -50.0
    ds, dv = decimate(s, v, 1000)
    assert ds.size <= 4000
    assert dv.max() == 1e3 and ds[dv.argmax()] == 654_321
    assert dv.min() == -50.0 and ds[dv.argmin()] == 123_457
    assert ds[0] == 0 and ds[-1] == n - 1 and np.all(np.diff(ds) > 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=400), st.integers(1, 20))
def test_decimation_keeps_every_bucket_envelope(values: list[float], buckets: int) -> None:
    v = np.asarray(values)
    s = np.arange(v.size) * 3
    ds, dv = decimate(s, v, buckets)
    assert set(ds.tolist()) <= set(s.tolist()) and np.all(np.diff(ds) > 0)
    assert np.array_equal(dv, v[np.searchsorted(s, ds)])  # real points, not made-up ones
    if v.size > 4 * buckets:
        assert ds.size <= 4 * buckets
        ids = np.minimum((s - s[0]) * buckets // max(s[-1] - s[0], 1), buckets - 1)
        kept = np.minimum((ds - s[0]) * buckets // max(s[-1] - s[0], 1), buckets - 1)
        for b in np.unique(ids):
            assert dv[kept == b].max() == v[ids == b].max()
            assert dv[kept == b].min() == v[ids == b].min()


def test_nonfinite_marks_and_gaps() -> None:
    s = np.arange(10)
    v = np.array([1, np.nan, np.nan, 2, np.inf, 3, -np.inf, 4, 5, 6], dtype=float)
    marks = nonfinite_marks(s, v, 100)
    assert marks["nan"].tolist() == [1, 2] and marks["+inf"].tolist() == [4]
    assert marks["-inf"].tolist() == [6]
    ok = np.isfinite(v)
    xs, ys = with_gaps(s[ok], v[ok], np.array([1, 4, 6]))
    assert np.isnan(ys[xs == 1]).all() and xs.tolist() == sorted(xs.tolist())


def test_a_million_step_run_is_plotted_with_its_spike() -> None:
    n = 1_000_000
    s = np.arange(n)
    v = 1.0 + 0.01 * np.sin(s / 1000)
    v[777_777] = 40.0
    run = build_run(_long({"grad_norm": (s, v)}), name="long", source="long", fmt="jsonl")
    figs = build_figures([Analysis(run=run, summary=summarize(run), findings=[])])
    [line] = _lines(figs.panel("grad_norm").axes[(0, "grad_norm")], "series-0-grad_norm")
    xs, ys = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    assert xs.size <= 4 * 1000 + 10
    assert ys.max() == 40.0 and xs[ys.argmax()] == 777_777


# ---- from the detectors and the command line -------------------------------------------------


def _write_jsonl(path: Path, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    rows: dict[int, dict[str, Any]] = {}
    for m, (s, v) in series.items():
        for step, value in zip(s.tolist(), v.tolist(), strict=True):
            rows.setdefault(step, {"step": step})[m] = value
    with path.open("w") as fh:
        for step in sorted(rows):
            fh.write(json.dumps(rows[step]) + "\n")
    return path


def test_detected_findings_are_all_drawn() -> None:
    run = build_run(_with_restart(_long(_series())), name="det", source="det", fmt="jsonl")
    cfg = Config()
    cfg.schedule = dict(SCHEDULE)
    a = analyze_run(run, cfg)
    assert a.findings, "the synthetic run has problems to find"
    figs = build_figures([a])
    assert figs.undrawn == []
    page = _page([a], figs)
    for i, f in enumerate(a.findings):
        d = figs.drawn(0, i)
        assert d is not None
        # its incident's label on its axes: its own code, or the headline's with "+N"
        assert d.label is not None and d.label in d.axes.texts
        assert d.label.get_text().startswith(f.code) or "+" in d.label.get_text()
        assert f'<tr id="finding-0-{i}">' in page and esc(f.message) in page


@pytest.mark.slow
def test_cli_report_writes_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = np.arange(400)
    series = {"loss": (s, 3 * np.exp(-s / 100) + 1), "grad_norm": (s, np.ones(400))}
    a = _write_jsonl(tmp_path / "a.jsonl", series)
    b = _write_jsonl(tmp_path / "b.jsonl", {k: (x, y * 1.1) for k, (x, y) in series.items()})
    out = tmp_path / "rep"
    assert main(["report", str(a), str(b), "-o", str(out), "--smooth", "0.2"]) == 0
    said = capsys.readouterr().out
    assert "report: " in said and "2 run(s)" in said
    page = (out / "report.html").read_text()
    assert "EMA" in page and ">a<" in page and ">b<" in page
    assert (out / "loss.png").is_file() and (out / "loss.svg").is_file()
    assert main(["report", str(a), "-o", str(out), "--smooth", "2"]) == 2
    assert "--smooth must be in (0, 1]" in capsys.readouterr().err
    assert main(["report", str(a), "-o", str(a)]) == 2  # a file, not a directory
    assert main(["analyze", str(a), "--report", str(tmp_path / "via-analyze")]) == 0
    assert (tmp_path / "via-analyze" / "report.html").is_file()


def test_report_config_smoothing(tmp_path: Path) -> None:
    s = np.arange(300)
    path = _write_jsonl(tmp_path / "r.jsonl", {"loss": (s, 1 + np.exp(-s / 50))})
    cfg = tmp_path / "trainlens.toml"
    cfg.write_text("[report]\nsmoothing = 0.3\n")
    out = tmp_path / "rep"
    assert main(["report", str(path), "-o", str(out), "--config", str(cfg)]) == 0
    assert "α = 0.3" in (out / "report.html").read_text()
    cfg.write_text("[report]\nsmothing = 0.3\n")
    assert main(["report", str(path), "-o", str(out), "--config", str(cfg)]) == 2


# ---- fixture runs (when generated) -----------------------------------------------------------


FIXTURE_RUNS = sorted((REPO / "fixtures" / "runs").glob("*/metrics.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(not FIXTURE_RUNS, reason="fixtures/runs not generated")
def test_fixture_runs_every_finding_drawn() -> None:
    from trainlens.api import analyze

    for path in FIXTURE_RUNS:
        analyses = analyze(path, config=Config())
        figs = build_figures(analyses)
        page = _page(analyses, figs)
        for r, a in enumerate(analyses):
            for i, f in enumerate(a.findings):
                d = figs.drawn(r, i)
                assert d is not None, (path, f.code)
                # its own label, or one shared with findings at nearby steps ("+2")
                assert d.label is not None and d.label in d.axes.texts, (path, f)
                text = d.label.get_text()
                assert text.startswith(f.code) or "+" in text, (path, f, text)
                assert f'<tr id="finding-{r}-{i}">' in page and esc(f.message) in page


# ---- a real browser --------------------------------------------------------------------------


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="chromium not installed")
def test_headless_chromium_renders_the_page(written: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    cmd = [
        str(_chromium()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1280,2400",
        written.as_uri(),
    ]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    img = imread(shot)
    assert img.shape[:2] == (2400, 1280)
    rgb = img[..., :3]
    # not a blank page: text and plots put dark and coloured pixels on it
    assert (rgb.mean(axis=2) < 0.5).mean() > 0.002
    assert (rgb.std(axis=2) > 0.1).mean() > 0.001
    assert math.isfinite(float(rgb.sum()))


# ---- on real logs nobody here wrote -----------------------------------------------------------


@pytest.mark.slow
def test_real_logs_read_well(shared_dir: Path) -> None:
    from trainlens.api import analyze

    logs = shared_dir / "real-logs"
    # modded-nanogpt (llm.c): loss 11.0 at step 0, then 3.1–4.5 for 19,560 steps
    figs = build_figures(analyze(logs / "modded_nanogpt/2024-10-13_llmc_main.log"))
    ax = figs.panel("loss").axes[(0, "train/loss")]
    lo, hi = ax.get_ylim()
    assert lo < 3.15 and 4.6 < hi < 7.0
    [edge] = _lines(ax, "clipped-0-train/loss-above")
    assert edge.get_xdata()[0] == 0
    assert _overlaps(_label_boxes(ax)) == []
    # an HF state: 284.9 and 161.3 first, then 5–10 (val 15.4 → 0.30)
    figs = build_figures(analyze(logs / "aaghaazkhan_law-llm/trainer_state.json"))
    lo, hi = figs.panel("loss").axes[(0, "train/loss")].get_ylim()
    assert lo < 0.31 and 15.4 < hi < 161
    # a Lightning warmup from 7.2e-7 to 5.8e-4: a log axis
    figs = build_figures(
        analyze(logs / "Arshya-Guru_deepmind-research/lightning_logs/version_13/metrics.csv")
    )
    assert figs.panel("lr").axes[(0, "lr")].get_yscale() == "log"
    # the BLOOM chronicles quote excerpts: 12,695, then 31,214–31,251, … — no line between
    figs = build_figures(analyze(logs / "bigscience/tr11-176B-ml_chronicles.md"))
    [line] = _lines(figs.panel("loss").axes[(0, "train/loss")], "series-0-train/loss")
    xs, ys = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    assert any(12_695 < x < 31_214 for x in xs[np.isnan(ys)])
    assert any(31_251 < x < 42_780 for x in xs[np.isnan(ys)])


@pytest.mark.slow
def test_perplexity_only_where_the_summary_gives_one(shared_dir: Path, tmp_path: Path) -> None:
    """An image classifier's cross-entropy (Keras CSVLogger) gets no perplexity axis and no
    '(perplexity —)' in the summary table; an llm.c log gets both (one rule: the summary)."""
    real = shared_dir / "real-logs"
    keras = trainlens_analyze(real / "Althea80_DM2025-Lab2-Exercise" / "logs" / "training_log.csv")
    assert "perplexity" not in write_report(keras, tmp_path / "keras").read_text()
    figs = build_figures(keras)
    loss_ax = next(p for p in figs.panels if p.key == "loss").figure.axes[0]
    assert not loss_ax.child_axes  # no secondary perplexity axis
    llmc = trainlens_analyze(real / "modded_nanogpt" / "2024-10-13_llmc_main.log")
    assert "(perplexity 2" in write_report(llmc, tmp_path / "llmc").read_text()
    loss_ax = next(p for p in build_figures(llmc).panels if p.key == "loss").figure.axes[0]
    assert loss_ax.child_axes
