"""Labels along the top of an axes that never overlap one another.

Findings cluster: a noisy run can have a dozen loss spikes within a few hundred pixels,
and a lead-lag finding puts a label on two panels. Each label is measured with the
figure's renderer once the layout is settled, then placed greedily, left to right, in
the first row along the top where it clears every label already there. When the rows
fill up (:data:`MAX_ROW_FRACTION` of the axes height), a finding's label is merged into
the one it collides with: "LOSS001 ×3" when they share a code, "LOSS003 +2" (the most
severe code first) when they do not. A merged label's findings keep their own spans and
rings; the findings table lists each. Labels that are not a finding's own (the lag of a
lead-lag finding, a note on values beyond the axis) are never merged; they take a new
row if they must.
"""

from __future__ import annotations

from typing import Any

from matplotlib import transforms
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text

from trainlens.core.dataclass import dataclass, field

TOP = 0.985  # axes fraction of the first row's top edge
OFFSET_PT = 6.0  # a label starts this far from its step: clear of a 10-pt ring
ROW_PAD_PX = 2.0
GAP_PX = 5.0  # clearance between two labels in one row
MAX_ROW_FRACTION = 0.4  # rows may fill the top 40 % of the axes before labels merge
MIN_ROWS = 2
FONT_SIZE = 8


def label_box() -> dict[str, Any]:
    return {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8}


@dataclass
class Note:
    """One label to place. ``x`` is the data step it starts at (ends at, when ``right``);
    ``anchor`` the point a leader or arrow goes to (in ``anchor_transform``, default data
    coordinates). ``code`` is empty for labels that must never merge."""

    ax: Axes
    x: float
    text: str
    color: str
    gid: str
    bold: bool = True
    right: bool = False
    anchor: tuple[float, float] | None = None
    anchor_transform: transforms.Transform | None = None
    arrow: dict[str, Any] | None = None
    code: str = ""
    rank: int = 0  # severity: the most severe member names a merged label
    members: list[Any] = field(default_factory=list)
    artist: Annotation | None = None
    merged: list[Note] = field(default_factory=list)
    incident: tuple[int, int, str] | None = None  # (run, rank in the run, id) it labels

    def draw(self) -> Annotation:
        ax = self.ax
        sign = -1.0 if self.right else 1.0
        fig = ax.get_figure(root=True)
        assert isinstance(fig, Figure)
        text_tr = transforms.offset_copy(
            ax.get_xaxis_transform(), fig=fig, x=sign * OFFSET_PT, y=0, units="points"
        )
        xy = self.anchor if self.anchor is not None else (self.x, TOP)
        xy_tr = self.anchor_transform
        if self.anchor is None:
            xy_tr = text_tr
        elif xy_tr is None:
            xy_tr = ax.transData
        art = ax.annotate(
            self.text,
            xy=xy,
            xycoords=xy_tr,
            xytext=(self.x, TOP),
            textcoords=text_tr,
            ha="right" if self.right else "left",
            va="top",
            fontsize=FONT_SIZE,
            color=self.color,
            fontweight="bold" if self.bold else "normal",
            zorder=9,
            bbox=label_box(),
            arrowprops=self.arrow if self.anchor is not None else None,
            annotation_clip=False,
        )
        art.set_gid(self.gid)
        art.set_in_layout(False)  # placing labels must not move the axes
        self.artist = art
        return art

    def absorb(self, other: Note) -> None:
        """Merge ``other`` into this label."""
        self.merged += [other, *other.merged]
        other.merged = []
        self.members += other.members
        if other.artist is not None:
            other.artist.remove()
            other.artist = None
        group = [self, *self.merged]
        top = max(group, key=lambda n: n.rank)
        codes = {n.code for n in group}
        count = len(group)
        text = f"{top.code} ×{count}" if len(codes) == 1 else f"{top.code} +{count - 1}"
        assert self.artist is not None
        self.artist.set_text(text)
        self.artist.set_color(top.color)
        self.artist.set_fontweight("bold" if any(n.bold for n in group) else "normal")


def _extent(note: Note, renderer: RendererBase) -> tuple[float, float]:
    """(width, height) in pixels of the label's text and its box."""
    assert note.artist is not None
    bb = Text.get_window_extent(note.artist, renderer)  # the text only, not the leader
    pad = 2 * 0.15 * FONT_SIZE * note.ax.figure.dpi / 72  # the box's pad on each side
    return bb.width + pad, bb.height + pad


def _interval(note: Note, width: float, box: Any) -> tuple[float, float]:
    """The label's horizontal extent in pixels, kept inside the axes."""
    px = note.ax.transData.transform((note.x, 0.0))[0]
    off = OFFSET_PT * note.ax.figure.dpi / 72
    lo, hi = (px - off - width, px - off) if note.right else (px + off, px + off + width)
    if hi > box.x1:
        lo, hi = lo - (hi - box.x1), box.x1
    if lo < box.x0:
        lo, hi = box.x0, hi + (box.x0 - lo)
    return lo, hi


def _to_data_x(note: Note, lo: float, hi: float) -> float:
    off = OFFSET_PT * note.ax.figure.dpi / 72
    px = hi + off if note.right else lo - off
    return float(note.ax.transData.inverted().transform((px, 0.0))[0])


def _fits(row: list[tuple[float, float]], lo: float, hi: float) -> bool:
    return all(hi + GAP_PX <= a or lo - GAP_PX >= b for a, b in row)


def place(ax: Axes, notes: list[Note], renderer: RendererBase) -> list[Note]:
    """Place the labels of one axes; returns the labels left standing (merges removed)."""
    box = ax.get_window_extent(renderer)
    notes = [n for n in notes if n.artist is not None]
    if not notes or box.height <= 0:
        return notes
    sizes = {id(n): _extent(n, renderer) for n in notes}
    row_h = max(h for _, h in sizes.values()) + ROW_PAD_PX
    max_rows = max(MIN_ROWS, int(MAX_ROW_FRACTION * box.height // row_h))
    while True:
        spans = {id(n): _interval(n, sizes[id(n)][0], box) for n in notes}
        order = sorted(notes, key=lambda n: spans[id(n)][0])
        rows: list[list[tuple[float, float]]] = []
        owners: list[list[Note]] = []
        row_of: dict[int, int] = {}
        merge: tuple[Note, Note] | None = None
        for n in order:
            lo, hi = spans[id(n)]
            r = next((i for i, row in enumerate(rows) if _fits(row, lo, hi)), len(rows))
            if r >= max_rows and n.code:
                target = _collider(owners, spans, lo, hi, max_rows)
                if target is not None:
                    merge = (target, n)
                    break
            if r == len(rows):
                rows.append([])
                owners.append([])
            rows[r].append((lo, hi))
            owners[r].append(n)
            row_of[id(n)] = r
        if merge is None:
            break
        target, n = merge
        target.absorb(n)
        notes.remove(n)
        sizes[id(target)] = _extent(target, renderer)
    row_frac = row_h / box.height
    for n in notes:
        assert n.artist is not None
        lo, hi = spans[id(n)]
        n.artist.xyann = (_to_data_x(n, lo, hi), TOP - row_of[id(n)] * row_frac)
    return notes


def _collider(
    owners: list[list[Note]],
    spans: dict[int, tuple[float, float]],
    lo: float,
    hi: float,
    max_rows: int,
) -> Note | None:
    """The mergeable label nearest the bottom row that overlaps [lo, hi]."""
    for r in range(min(max_rows, len(owners)) - 1, -1, -1):
        for other in owners[r]:
            a, b = spans[id(other)]
            if other.code and not (hi + GAP_PX <= a or lo - GAP_PX >= b):
                return other
    return None


def place_figure(fig: Figure, notes: list[Note]) -> list[Note]:
    """Settle the figure's layout, then place every axes' labels."""
    if not notes:
        return notes
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    # settle the axes where the first draw would put them, and keep them there: the
    # layout is a third of the time it takes to save a panel, and is done once, here
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        fig.set_layout_engine("none")
    by_ax: dict[int, list[Note]] = {}
    for n in notes:
        by_ax.setdefault(id(n.ax), []).append(n)
    kept: list[Note] = []
    for group in by_ax.values():
        kept += place(group[0].ax, group, renderer)
    return kept


__all__ = ["Note", "label_box", "place", "place_figure"]
