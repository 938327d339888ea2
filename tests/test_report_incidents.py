"""The report reads incidents first: a table at the top, worst first, and one label per
incident on each axes it reaches (issue 24), with member spans shaded lightly."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.colors import to_rgba

from tests.conftest import FIXTURE_RUNS, REAL_LOGS
from trainlens.api import analyze
from trainlens.core.config import Config
from trainlens.report import build_figures, write_report
from trainlens.report.annotate import MEMBER_ALPHA
from trainlens.report.model import run_incidents

SIX_EVALS = REAL_LOGS / "aigoncharov_trainer_state_viz" / "trainer_state.json"


def _fixture(name: str) -> Path:
    path = FIXTURE_RUNS / name
    if not (path / "metrics.jsonl").is_file():
        pytest.skip(f"fixtures/runs/{name} not generated")
    return path


def _code_labels(ax: object) -> list[str]:
    """Every label along the top that names a finding (its gid is finding-…)."""
    return [
        t.get_text()
        for t in ax.texts  # type: ignore[attr-defined]
        if t.get_visible() and str(t.get_gid() or "").startswith("finding-")
    ]


@pytest.mark.parametrize("name", ["lr_shock_diverge", "nan_divergence"])
def test_one_label_per_incident_on_each_axes(name: str) -> None:
    analyses = analyze(_fixture(name), config=Config())
    a = analyses[0]
    figs = build_figures(analyses)
    incidents = run_incidents(a)
    assert len(incidents) < len(a.findings)  # these runs group: the test means something
    for panel in figs.panels:
        for ax in panel.figure.axes:
            # the incidents with a member drawn on this axes
            here = {
                inc.id
                for inc in incidents
                for i in inc.members
                if (d := figs.drawn(0, i)) is not None and d.axes is ax
            }
            labels = [lab for lab in figs.labels if lab.axes is ax]
            assert sorted(lab.id for lab in labels) == sorted(here), (panel.key, labels)
            # and no other finding code is written on it, save the lead/lag of a GRAD001
            texts = [t for t in _code_labels(ax) if " lead" not in t and " lag " not in t]
            assert len(texts) == len(here), (panel.key, texts)
    # NaN in 21 series: one tag on the loss panel, not three (train, val, the run-wide one)
    if name == "nan_divergence":
        loss = figs.panel("loss").figure.axes[0]
        assert [lab.text.get_text() for lab in figs.labels if lab.axes is loss] == ["NAN001 +20"]


def test_incidents_table_is_at_the_top_worst_first(tmp_path: Path) -> None:
    # slow_loader (warnings and an info) first: the order is the table's, not the runs'
    runs = [_fixture("slow_loader"), _fixture("lr_shock_diverge"), _fixture("nan_divergence")]
    analyses = [analyze(p, config=Config())[0] for p in runs]
    page = write_report(analyses, tmp_path).read_text("utf-8")
    top = page.index('<section id="incidents">')
    assert top < page.index('<section id="summary">') < page.index('<section id="findings">')
    table = page[top : page.index("</section>", top)]
    rows = table.split('<tr class="incident">')[1:]
    total = sum(len(run_incidents(a)) for a in analyses)
    assert len(rows) == total and f"Incidents ({total})" in table
    rank = {"error": 2, "warning": 1, "info": 0}
    sevs = [next(s for s in rank if f"sev-{s}" in row) for row in rows]
    assert sevs == sorted(sevs, key=lambda s: -rank[s])  # worst first
    assert sevs[0] == "error" and sevs[-1] == "info" and len(set(sevs)) == 3
    assert "NAN001</a> ×21" in table  # the 21 NaN findings, one row
    md = (tmp_path / "report.md").read_text("utf-8")
    assert md.index("## Incidents") < md.index("## Findings")


def test_six_eval_sets_are_one_label_and_one_light_band() -> None:
    if not SIX_EVALS.is_file():
        pytest.skip("../shared/real-logs absent")
    analyses = analyze(SIX_EVALS, config=Config())
    a = analyses[0]
    assert [f.code for f in a.findings].count("VAL001") == 6
    figs = build_figures(analyses)
    loss = figs.panel("loss").figure.axes[0]
    assert [lab.text.get_text() for lab in figs.labels if lab.axes is loss] == ["VAL001 +5"]
    red = to_rgba("#C0392B")[:3]
    shades = [
        p.get_alpha() or 1.0
        for p in loss.patches
        if str(p.get_gid() or "").startswith("finding-") and p.get_facecolor()[:3] == red
    ]
    # the headline's span (401–12030) holds every member's (g5's from 802): one light band
    # of 0.14 red where six stacked spans made 1 − 0.86⁶ = 60 %
    assert shades == [0.14]
    for i in range(6):
        d = figs.drawn(0, i)
        assert d is not None and d.label is not None and d.label.get_text() == "VAL001 +5"


def test_a_member_outside_its_headline_is_shaded_lightly() -> None:
    analyses = analyze(_fixture("lr_shock_diverge"), config=Config())
    figs = build_figures(analyses)
    grad = figs.panel("grad_norm").figure.axes[0]
    spans = [
        p.get_alpha()
        for p in grad.patches
        if str(p.get_gid() or "").startswith("finding-") and p.get_alpha() is not None
    ]
    # GRAD001 (the headline, 400–1000) and GRAD004 (a member, the same steps) on one axes:
    # the member's span is inside the headline's, so one span; LR001 on lr is its own axes
    assert spans == [0.14]
    lr = figs.panel("lr").figure.axes[0]
    assert [p.get_alpha() for p in lr.patches if str(p.get_gid()).startswith("finding-")] == [
        MEMBER_ALPHA
    ]
