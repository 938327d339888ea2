"""Paths and loaders every test file shares (import them: ``from tests.conftest import ...``).

The long tests carry ``@pytest.mark.slow`` (declared in pyproject.toml): ``pytest -m "not
slow"`` is the quick loop, the full suite runs them all.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from trainlens.core.run import Run
    from trainlens.detectors.base import Context

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REAL_LOGS = SHARED / "real-logs"
FIXTURES = REPO / "fixtures"
FIXTURE_RUNS = FIXTURES / "runs"
LABELS_PATH = FIXTURES / "labels.json"
DOCS = REPO / "docs"
BENCH = REPO / "bench"


@pytest.fixture(autouse=True)
def _mlflow_forgets_its_experiment():
    """``mlflow.set_experiment`` is remembered by the process (the fluent API's active
    experiment and ``MLFLOW_EXPERIMENT_ID``): a later test's new store has no such
    experiment ("Could not find experiment with ID 1"), which depended on the order."""
    yield
    fluent = sys.modules.get("mlflow.tracking.fluent")
    if fluent is not None:
        fluent._active_experiment_id = None  # type: ignore[attr-defined]
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None)


@functools.cache
def _all_labels() -> dict[str, Any]:
    if not LABELS_PATH.is_file() or not FIXTURE_RUNS.is_dir():
        return {}
    doc = json.loads(LABELS_PATH.read_text("utf-8"))
    runs: dict[str, Any] = doc.get("runs", doc)
    return runs


def fixture_labels(*, present_only: bool = False) -> dict[str, Any]:
    """fixtures/labels.json's ``runs`` (what was injected in each fixture run, the ground
    truth); ``{}`` when the fixture runs are not generated. ``present_only``: only the runs
    whose metrics.jsonl is there."""
    runs = _all_labels()
    if present_only:
        return {k: v for k, v in runs.items() if fixture_path(k, skip=False).is_file()}
    return dict(runs)


def labels_or_skip() -> dict[str, Any]:
    """:func:`fixture_labels`, skipping the test when the fixture runs are not generated."""
    runs = fixture_labels()
    if not runs:
        pytest.skip("fixture runs not generated (fixtures/runs, fixtures/labels.json)")
    return runs


def fixture_path(name: str, *, skip: bool = True) -> Path:
    """fixtures/runs/<name>/metrics.jsonl; the test is skipped when it is absent."""
    path = FIXTURE_RUNS / name / "metrics.jsonl"
    if skip and not path.is_file():
        pytest.skip(f"fixture run {name} not generated")
    return path


def read_fixture(name: str) -> tuple[Run, Context]:
    """A fixture run, read, and the context ``analyze`` would give it (default config)."""
    import trainlens
    from trainlens.api import build_context
    from trainlens.core.config import Config

    run = trainlens.read(fixture_path(name))[0]
    return run, build_context(run, Config())


@pytest.fixture
def shared_dir() -> Path:
    if not REAL_LOGS.is_dir():
        pytest.skip("../shared is not beside this checkout")
    return SHARED


@pytest.fixture
def fixture_runs() -> Path:
    if not FIXTURE_RUNS.is_dir():
        pytest.skip("fixtures/runs not generated")
    return FIXTURE_RUNS


def run_wandb_offline(writer: Path, root: Path, *args: str) -> None:
    """Run a script that writes W&B runs with the real SDK, offline and with its config,
    cache and data under ``root``, in a subprocess: the SDK keeps global state and a
    service process, which stay out of the test process this way."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_CONFIG_DIR": str(root / ".config"),
        "WANDB_CACHE_DIR": str(root / ".cache"),
        "WANDB_DATA_DIR": str(root / ".data"),
    }
    subprocess.run(
        [sys.executable, str(writer), str(root), *args],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )


class WebhookRecorder(http.server.BaseHTTPRequestHandler):
    """A webhook on 127.0.0.1 that keeps each JSON body POSTed to it: subclass it with
    its own ``received`` list (``type("Hook", (WebhookRecorder,), {"received": []})``)."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        type(self).received.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass
