"""Shared fixtures for accelgrid's own tests, and how a plain ``pytest`` runs them.

A plain ``pytest`` (the README's test command) runs the quick tests on one xdist worker
per core (``-n N`` chooses, ``-n 0`` runs them in this process) and leaves out the
end-to-end set, the tests marked ``slow``: they build real cell envs and run real cells
(minutes). ``pytest -m slow`` runs that set (docs/testing.md: where), in one process
unless ``-n`` says otherwise (its tests build the same cell env); any ``-m`` given
decides alone (``-m "slow or not slow"``: everything). The cell envs they build live
outside the checkout (:func:`cell_envdir`), reused from one run to the next.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mini_projects import cell_envdir, make_project

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SLOW = "slow"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A plain ``pytest`` runs on xdist workers (``-n``, ``-m``, ``-p no:xdist`` or an xdist
    worker itself: as asked; with ``-m`` in one process, since the slow tests two workers
    would run at once build the same cell env)."""
    if (getattr(config.option, "numprocesses", 0) is None and config.pluginmanager.has_plugin(
            "xdist") and not os.environ.get("PYTEST_XDIST_WORKER")
            and not config.option.collectonly and not config.option.tx
            and not config.option.markexpr):
        config.option.numprocesses = "auto"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``-m``, the end-to-end tests (``slow``) are left out: ``pytest -m slow``."""
    if config.option.markexpr:
        return
    slow = [i for i in items if i.get_closest_marker(SLOW)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if not i.get_closest_marker(SLOW)]


@pytest.fixture(autouse=True)
def envs_beside_their_project(monkeypatch) -> None:
    """Mini projects' envs go in their own .nox, whatever this shell exported."""
    monkeypatch.delenv("ACCELGRID_ENVDIR", raising=False)


@pytest.fixture
def outside_envdir(monkeypatch) -> Path:
    """This checkout's cell envs outside it (:func:`cell_envdir`), for this test and the
    processes it starts."""
    where = cell_envdir()
    monkeypatch.setenv("ACCELGRID_ENVDIR", str(where))
    return where


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
