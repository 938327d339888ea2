"""The report: annotated plots of one or several runs, as HTML, Markdown, PNG and SVG.

:func:`write_report` writes into a directory one PNG and one SVG per panel, a
self-contained ``report.html`` (plots embedded, no network, no JavaScript) and a
``report.md`` for CI summaries. :func:`build_figures` returns the matplotlib Figures
with every finding drawn, for notebooks and tests. See docs/report.md.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.figure import Figure
from matplotlib.text import Text

from trainlens.core.errors import UsageError
from trainlens.core.sanitize import xml
from trainlens.report.panels import DPI, DrawnFinding, Figures, Panel, build_figures, style

if TYPE_CHECKING:
    from trainlens.core.analysis import Analysis
    from trainlens.gate.reference import Overlay


def _plain_text(figure: Figure) -> None:
    """Every text and gid of the figure in the XML rule, the guard at the one place the
    files are written. matplotlib writes each text into the SVG as it is (in a comment)
    and each gid as an ``id``; both hold names from the input (titles, legends, notes,
    ``series-<run>-<metric>``), so an ESC or a NUL in a metric name would make the file
    invalid XML. Labels already pass through ``mpl_text`` (the same rule, before layout);
    this catches any other.

    Laid out first: a secondary axis (the perplexity scale) has no limits of its own until
    a draw, and asking its log locator for ticks before one raised "Data cannot be
    log-scaled" on a loss panel whose limits the draw would have set."""
    figure.draw_without_rendering()
    for artist in figure.findobj():
        gid = artist.get_gid()
        if gid is not None and xml(gid) != gid:
            artist.set_gid(xml(gid))
        if isinstance(artist, Text):
            shown = artist.get_text()
            if xml(shown) != shown:
                artist.set_text(xml(shown))


def _save(panel: Panel, out_dir: Path) -> bytes:
    _plain_text(panel.figure)
    buf = io.BytesIO()
    panel.figure.savefig(buf, format="png", dpi=DPI)
    png = buf.getvalue()
    (out_dir / f"{panel.key}.png").write_bytes(png)
    # the layout is settled by the first draw; the SVG reuses it (same size, same axes)
    panel.figure.set_layout_engine("none")
    panel.figure.savefig(out_dir / f"{panel.key}.svg", format="svg", metadata={"Date": None})
    return png


def write_report(
    analyses: Sequence[Analysis],
    out_dir: Path | str,
    *,
    smoothing: float | None = None,
    overlays: Sequence[Overlay] = (),
) -> Path:
    """Write the report of these analyses into ``out_dir``; returns the path of report.html.

    ``smoothing``: α of a debiased EMA drawn over the raw values (None: raw only).
    ``overlays``: a run's curves against golden references
    (:func:`trainlens.gate.reference.overlays`), drawn in their own section.
    """
    from trainlens import __version__
    from trainlens.report.html import render_html
    from trainlens.report.markdown import render_markdown
    from trainlens.report.options import check_smoothing

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a directory (the report is a directory of files)")
    smoothing = check_smoothing(smoothing)  # the CLI's rule and sentence, for library callers
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the report directory ({exc.strerror})") from None
    figures = build_figures(analyses, smoothing=smoothing)
    if overlays:
        from trainlens.report.golden import golden_panels

        figures.panels.extend(golden_panels(overlays))
    with style():
        pngs = {p.key: _save(p, out) for p in figures.panels}
    page = render_html(analyses, figures, pngs, smoothing=smoothing, version=__version__)
    target = out / "report.html"
    target.write_text(page, "utf-8")
    (out / "report.md").write_text(render_markdown(analyses, figures), "utf-8")
    return target


__all__ = ["DrawnFinding", "Figures", "Panel", "build_figures", "write_report"]
