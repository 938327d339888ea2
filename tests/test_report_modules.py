"""The report's modules keep their boundaries: they draw, they never detect (no
detector import, shared math comes from core), and each stays small enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

import trainlens.report

REPORT_DIR = Path(trainlens.report.__file__).parent
MAX_LINES = 600


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports at run time (``if TYPE_CHECKING:`` blocks skipped)."""
    tree = ast.parse(path.read_text("utf-8"))
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_report_modules_never_import_a_detector_or_the_orchestrator() -> None:
    modules = sorted(REPORT_DIR.glob("*.py"))
    assert len(modules) > 8, "the report is split into modules by job"
    bad = {
        p.name: sorted(
            m for m in _imports(p) if m.startswith(("trainlens.detectors", "trainlens.api"))
        )
        for p in modules
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_panel_modules_import_the_shared_math_from_core() -> None:
    assert "trainlens.core.stats" in _imports(REPORT_DIR / "lines.py")
    assert "trainlens.core.schedules" in _imports(REPORT_DIR / "dashboard.py")


def test_panels_keeps_the_names_other_modules_import() -> None:
    from trainlens.report import panels

    for name in (
        "DPI",
        "DrawnFinding",
        "Figures",
        "Panel",
        "build_figures",
        "style",
        "summary_mfu",
    ):
        assert hasattr(panels, name), name
    assert panels.summary_mfu({"mfu": {"mfu": 0.41}}) == 0.41
    assert panels.summary_mfu({"mfu": 3.0}) is None
