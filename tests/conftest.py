"""Shared fixtures for accelgrid's own tests."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def mini_project(tmp_path: Path):
    """A project folder with the repo's conftest and a matrix whose only suite is
    ``suites/payload`` (tests write their payload test files there)."""

    def make(test_seconds: int = 60, cell_minutes: int = 10, workers: int = 1) -> Path:
        proj = tmp_path / "proj"
        (proj / "suites" / "payload").mkdir(parents=True)
        shutil.copy(ROOT / "conftest.py", proj / "conftest.py")
        (proj / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
        text = (TESTS / "base_matrix.yaml").read_text()
        text = text.replace("  smoke: {path: .}", "  smoke: {path: suites/payload}")
        text = text.replace("  suites: [smoke]", "  suites: [smoke]\n  timeout: {cell_minutes: "
                            f"{cell_minutes}, test_seconds: {test_seconds}}}\n  workers: {workers}")
        (proj / "matrix.yaml").write_text(text)
        return proj

    return make


@pytest.fixture
def python() -> str:
    return sys.executable
