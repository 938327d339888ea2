from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = REPO / "fixtures"


@pytest.fixture
def shared_dir() -> Path:
    if not (SHARED / "real-logs").is_dir():
        pytest.skip("../shared is not beside this checkout")
    return SHARED


@pytest.fixture
def fixture_runs() -> Path:
    runs = FIXTURES / "runs"
    if not runs.is_dir():
        pytest.skip("fixtures/runs not generated")
    return runs
