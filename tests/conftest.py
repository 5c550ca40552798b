"""Shared fixtures for accelgrid's own tests, and how a plain ``pytest`` runs them.

A plain ``pytest`` (the README's test command) runs the quick tests on one xdist worker
per core (``-n N`` chooses, ``-n 0`` runs them in this process) and leaves out the
end-to-end set, the tests marked ``slow``: they build real cell envs and run real cells
(minutes). ``pytest -m slow`` runs that set (docs/design/testing.md: where), in one process
unless ``-n`` says otherwise (its tests build the same cell env); any ``-m`` given
decides alone (``-m "slow or not slow"``: everything). The cell envs they build live
outside the checkout (:func:`cell_envdir`), reused from one run to the next.

Which tests are ``slow`` (docs/design/testing.md, "The rule"): a test that runs a real cell, a
real nox/tox/pytest session or a process that imports torch carries ``@pytest.mark.slow``;
a test that asks for the :func:`python` fixture (the interpreter its real cell runs on) is
put in the set by :func:`pytest_collection_modifyitems` without it. A run that leaves a
new env in the checkout's ``.nox`` fails (:func:`pytest_sessionfinish`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers.mini_projects import cell_envdir, make_project

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SLOW = "slow"
# Asking for one of these fixtures puts a test in the slow set: it runs a real cell.
CELL_FIXTURES = frozenset({"python"})
NOX_IN_CHECKOUT = ROOT / ".nox"
_ENVS_BEFORE = pytest.StashKey[set[str]]()  # .nox's entries when the run started


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
    """Without ``-m``, the end-to-end tests (``slow``) are left out: ``pytest -m slow``. A
    test that runs a real cell (asks for :data:`CELL_FIXTURES`) is marked slow here."""
    for item in items:
        if CELL_FIXTURES & set(getattr(item, "fixturenames", ())) and not \
                item.get_closest_marker(SLOW):
            item.add_marker(SLOW)
    if config.option.markexpr:
        return
    slow = [i for i in items if i.get_closest_marker(SLOW)]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if not i.get_closest_marker(SLOW)]


def _envs_in_checkout() -> set[str]:
    return {p.name for p in NOX_IN_CHECKOUT.iterdir()} if NOX_IN_CHECKOUT.is_dir() else set()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_ENVS_BEFORE] = _envs_in_checkout()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test builds or leaves a cell env inside the checkout (:func:`cell_envdir` is
    where they go): a new entry of ``.nox`` fails the run, naming it."""
    if os.environ.get("PYTEST_XDIST_WORKER") or _ENVS_BEFORE not in session.config.stash:
        return
    before = session.config.stash[_ENVS_BEFORE]
    new = sorted(_envs_in_checkout() - before)
    if new:
        session.config.get_terminal_writer().line(
            f"\naccelgrid's tests: a test left {', '.join(new)} in {NOX_IN_CHECKOUT} (cell "
            "envs of tests belong outside the checkout: the outside_envdir fixture)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
    """The interpreter a test's real cell runs on (asking for it puts the test in the slow
    set: :data:`CELL_FIXTURES`)."""
    return sys.executable
