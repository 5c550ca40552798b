"""Shared fixtures for accelgrid's own tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mini_projects import make_project

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def one_worker_per_device(monkeypatch) -> None:
    """Plans and runs that do not depend on this host's cores (the runner shares a device
    among more workers on a bigger host); tests of that choice set or delete it."""
    monkeypatch.setenv("ACCELGRID_WORKERS_PER_DEVICE", "1")


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def mini_project(tmp_path: Path):
    """:func:`make_project` in ``tmp_path/proj`` (tests write their payload test files
    in its ``suites/payload``)."""

    def make(test_seconds: int = 60, cell_minutes: int = 10, workers: int = 1,
             noxfile: bool = False) -> Path:
        return make_project(tmp_path / "proj", test_seconds, cell_minutes, workers, noxfile)

    return make


@pytest.fixture
def python() -> str:
    return sys.executable
