"""Symbolic links that loop in a folder of runs: walked once, never for ever."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from trainlens.gate.discover import _glob, discover


def _runs_with_loops(root: Path) -> Path:
    run = root / "runs" / "a"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n" for i in range(20))
    )
    # two links to the folder itself and one to its parent: glob's ** followed them,
    # 2**40 paths before the system's limit on links in a path
    os.symlink(".", run / "self")
    os.symlink(".", run / "again")
    os.symlink("..", run / "up")
    return root / "runs"


@pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32", reason="no symlinks")
@pytest.mark.parametrize("spec", ["{root}", "{root}/**", "{root}/**/*.jsonl"])
def test_a_symlink_loop_is_walked_once(tmp_path: Path, spec: str) -> None:
    root = _runs_with_loops(tmp_path)
    code = (
        "import sys; from trainlens.gate.discover import discover\n"
        "print([s.name for s in discover([sys.argv[1]])])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, spec.format(root=root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['a']"


@pytest.mark.parametrize(
    "pattern", ["**", "**/*.jsonl", "**/b/*", "a/**/z.jsonl", "*/**", "**/*", "**/"]
)
def test_recursive_glob_matches_what_glob_matches(tmp_path: Path, pattern: str) -> None:
    for f in ("x.jsonl", "a/y.jsonl", "a/b/z.jsonl", "a/b/w.csv", ".hidden/q.jsonl"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("{}\n")
    spec = f"{tmp_path}/{pattern}"
    want = sorted(p.rstrip("/") for p in glob.glob(spec, recursive=True))
    assert sorted(p.rstrip("/") for p in _glob(spec)) == want
    assert want  # (every pattern matches something here)


def test_a_link_to_a_sibling_run_is_one_source(tmp_path: Path) -> None:
    root = _runs_with_loops(tmp_path)
    os.symlink("a", root / "latest")
    assert [s.name for s in discover([str(root)])] == ["a"]
