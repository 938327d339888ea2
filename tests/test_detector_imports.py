"""A detector module imports helpers (core, detectors/_*.py, base), never another detector.

entropy and data_path used to import their statistics from the throughput detector's
module, so a change to one detector could silently move another one's findings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trainlens.detectors

DETECTORS_DIR = Path(trainlens.detectors.__file__).parent
NOT_DETECTORS = {"__init__", "base"}


def _detector_names() -> set[str]:
    return {
        p.stem
        for p in DETECTORS_DIR.glob("*.py")
        if not p.stem.startswith("_") and p.stem not in NOT_DETECTORS
    }


def _imported_detectors(path: Path, detectors: set[str]) -> set[str]:
    """The detector modules ``path`` imports at run time (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "trainlens.detectors":
                found.update(a.name for a in node.names if a.name in detectors)
            elif node.module.startswith("trainlens.detectors."):
                found.add(node.module.rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("trainlens.detectors."):
                    found.add(a.name.split(".")[2])
    return found & detectors


def test_the_check_sees_detector_imports(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from trainlens.detectors.throughput import odd\n"
        "from trainlens.detectors import memory\n"
        "if TYPE_CHECKING:\n"
        "    from trainlens.detectors.lr_schedule import Params\n",
        encoding="utf-8",
    )
    assert _imported_detectors(src, {"throughput", "memory", "lr_schedule"}) == {
        "throughput",
        "memory",
    }


def test_no_module_in_detectors_imports_a_detector_at_run_time() -> None:
    detectors = _detector_names()
    assert {"throughput", "entropy", "data_path", "lr_schedule"} <= detectors
    offenders = {
        p.stem: sorted(_imported_detectors(p, detectors - {p.stem}))
        for p in DETECTORS_DIR.glob("*.py")
        if p.stem != "__init__"
    }
    assert {k: v for k, v in offenders.items() if v} == {}
